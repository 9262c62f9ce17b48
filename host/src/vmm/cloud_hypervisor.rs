//! Cloud Hypervisor: `--device` arguments with `x_nv_gpudirect_clique`, the
//! `--platform vfio_p2p_dma=on` it requires since v52, and the DeviceConfig
//! bodies `p2p-host apply` sends to `PUT /api/v1/vm.add-device`.

use std::fmt::Write;

use p2p_allocation::clique::CliquePlan;
use p2p_topology::guest_layout::{DeviceRole, GuestTopology};
use p2p_topology::Bdf;
use serde::{Deserialize, Serialize};

/// The sysfs path Cloud Hypervisor opens for a VFIO device.
pub fn sysfs_path(bdf: &Bdf) -> String {
    format!("/sys/bus/pci/devices/{bdf}/")
}

/// The DeviceConfig body of `vm.add-device` (OpenAPI schema DeviceConfig).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceConfig {
    /// The host function's sysfs directory, `/sys/bus/pci/devices/<BDF>/`.
    pub path: String,
    /// Device id in the VM, the one the guest layout gives the GPU (`vm.remove-device` takes it).
    pub id: String,
    /// int8 in the spec; clique ids are 0..=15.
    pub x_nv_gpudirect_clique: i8,
}

/// The request bodies for a VM's GPUs, in plan order.
pub fn device_configs(plan: &CliquePlan) -> Vec<DeviceConfig> {
    plan.assignments
        .iter()
        .enumerate()
        .map(|(i, a)| DeviceConfig {
            path: sysfs_path(&a.bdf),
            id: super::device_id(i),
            // Clique ids are 0..=15, so the cast cannot wrap.
            x_nv_gpudirect_clique: a.clique.id() as i8,
        })
        .collect()
}

/// Command-line arguments for one VM: its GPUs with their cliques, then its
/// RDMA NICs. Cloud Hypervisor numbers guest slots itself, so the guest bus
/// ids of the plan's flat map do not apply.
pub fn arguments(plan: &CliquePlan, guest: &GuestTopology) -> String {
    let mut out = format!("# {}\n--platform vfio_p2p_dma=on", super::summary(plan));
    for d in device_configs(plan) {
        let _ = write!(
            out,
            " \\\n--device path={},id={},x_nv_gpudirect_clique={}",
            d.path, d.id, d.x_nv_gpudirect_clique
        );
    }
    for n in guest.devices.iter().filter(|d| d.role == DeviceRole::Nic) {
        let _ = write!(
            out,
            " \\\n--device path={},id={}",
            sysfs_path(&n.host),
            n.id
        );
    }
    out.push('\n');
    out
}
