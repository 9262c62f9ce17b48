//! The health of the devices of prepared claims, as the node shows it now:
//! healthy while the function is on the PCI bus, bound to vfio-pci, and its
//! IOMMU group viable (every other member without a driver or on one that
//! leaves it viable, the kernel's rule); unhealthy, with the reason, when it
//! was removed (surprise removal, a failed device dropped off the bus),
//! taken by another driver, or its group broken by a member bound to a host
//! driver. Devices allocated for administrative access are not reported:
//! they are another claim's.

use p2p_topology::iommu_groups::leaves_group_viable;
use p2p_topology::Bdf;

use super::checkpoint::State;
use super::prepare::Driver;
use super::vfio::VFIO_PCI;
use crate::kubelet_plugin::driver::{DeviceHealth, Health};

impl Driver {
    /// Each device of each prepared claim, with its health now.
    pub fn device_health(&self) -> Vec<DeviceHealth> {
        let mut out: Vec<DeviceHealth> = Vec::new();
        for entry in self.recorded().claims.values() {
            if entry.state != State::Prepared {
                continue;
            }
            for d in entry.devices.iter().filter(|d| !d.admin_access) {
                if out.iter().any(|o| o.pool == d.pool && o.device == d.device) {
                    continue;
                }
                let (health, message) = match d.bdf.parse::<Bdf>() {
                    Ok(bdf) => self.function_health(bdf),
                    Err(_) => (Health::Unknown, format!("no PCI address {:?}", d.bdf)),
                };
                out.push(DeviceHealth {
                    pool: d.pool.clone(),
                    device: d.device.clone(),
                    health,
                    message,
                });
            }
        }
        out
    }

    fn function_health(&self, bdf: Bdf) -> (Health, String) {
        let bus = self.bus();
        if !bus.exists(bdf) {
            return (Health::Unhealthy, format!("{bdf} is gone from the PCI bus"));
        }
        let driver = bus.driver(bdf);
        if driver.as_deref() != Some(VFIO_PCI) {
            return (
                Health::Unhealthy,
                format!(
                    "{bdf} is bound to {}, not vfio-pci",
                    driver.as_deref().unwrap_or("no driver")
                ),
            );
        }
        let Some(group) = bus.iommu_group(bdf) else {
            return (Health::Unhealthy, format!("{bdf} has no IOMMU group"));
        };
        match bus.group(group) {
            Ok(members) => {
                for m in members.into_iter().filter(|m| *m != bdf) {
                    let d = bus.driver(m);
                    if !leaves_group_viable(d.as_deref()) {
                        return (
                            Health::Unhealthy,
                            format!(
                                "IOMMU group {group} is not viable: {m} is bound to {}",
                                d.as_deref().unwrap_or("no driver")
                            ),
                        );
                    }
                }
                (
                    Health::Healthy,
                    format!("{bdf} on vfio-pci, IOMMU group {group} viable"),
                )
            }
            Err(e) => (Health::Unknown, format!("reading IOMMU group {group}: {e}")),
        }
    }
}
