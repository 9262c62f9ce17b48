//! IOMMU groups of the VMs' devices: VFIO hands a group to one VM as a whole
//! (every endpoint in it bound to vfio-pci, none used elsewhere), so a plan
//! that splits a group between two VMs cannot start, and a group with
//! endpoints outside every VM needs them bound to vfio-pci (or given to the VM).
//! Bridges in a group are fine: VFIO accepts them bound to their port driver.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::bdf::Bdf;
use crate::topology::Topology;

/// An IOMMU group's number, as the kernel names the group
/// (`/sys/kernel/iommu_groups/<N>`, a function's `iommu_group` link, VFIO's
/// `/dev/vfio/<N>`): the unit VFIO assigns. In JSON, the bare number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct IommuGroup(pub u32);

/// The schema of the bare number, as `u32`'s: schemars' derive would name
/// the type (a `$defs` entry) because it has a doc comment, and every
/// report's schema would change.
impl schemars::JsonSchema for IommuGroup {
    fn inline_schema() -> bool {
        <u32 as schemars::JsonSchema>::inline_schema()
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        <u32 as schemars::JsonSchema>::schema_name()
    }

    fn schema_id() -> std::borrow::Cow<'static, str> {
        <u32 as schemars::JsonSchema>::schema_id()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <u32 as schemars::JsonSchema>::json_schema(generator)
    }
}

impl fmt::Display for IommuGroup {
    /// The bare number, as sysfs and `/dev/vfio` spell it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::str::FromStr for IommuGroup {
    type Err = std::num::ParseIntError;

    /// A group's directory or link name (`27`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(Self)
    }
}

/// Drivers that leave an IOMMU group viable for VFIO. Since Linux 5.19 VFIO
/// attaches a group only when it can claim the group's DMA ownership
/// (`iommu_group_claim_dma_owner`), which fails while a function of the
/// group is bound to a driver that uses the kernel's DMA API; drivers that
/// set `driver_managed_dma` in their `struct pci_driver` do not count:
/// vfio-pci and its variant drivers (named here as sysfs shows them, the
/// module name with `-` as `_`), pci-stub and the PCIe port driver. A
/// function with no driver does not count either.
pub const DMA_MANAGING_DRIVERS: [&str; 10] = [
    "vfio-pci",
    "pci-stub",
    "pcieport",
    "nvgrace_gpu_vfio_pci",
    "mlx5_vfio_pci",
    "hisi_acc_vfio_pci",
    "pds_vfio_pci",
    "virtio_vfio_pci",
    "qat_vfio_pci",
    "xe-vfio-pci",
];

/// Whether a function bound to `driver` (`None`: no driver) lets VFIO attach
/// its IOMMU group: the one rule `serve`, `check` and the DRA driver apply.
pub fn leaves_group_viable(driver: Option<&str>) -> bool {
    driver.is_none_or(|d| DMA_MANAGING_DRIVERS.contains(&d))
}

/// One function of a group the VMs use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GroupMember {
    /// Address of the function.
    pub bdf: Bdf,
    /// The VM it is given to, or None.
    pub vm: Option<String>,
    /// A bridge (type-1 header); VFIO accepts it bound to its port driver.
    pub bridge: bool,
    /// Its driver now, as sysfs says.
    pub driver: Option<String>,
}

/// An IOMMU group some VM's device sits in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GroupUse {
    /// IOMMU group number (`/sys/kernel/iommu_groups/N`).
    pub group: IommuGroup,
    /// Every function of the group, in address order, whether a VM takes it or not.
    pub members: Vec<GroupMember>,
    /// Set when endpoints of the group belong to no VM: they must be bound to
    /// vfio-pci (or given to the VM) before the VM starts.
    pub warning: Option<String>,
}

/// A group split between VMs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "IOMMU group {group} is split between VMs ({}): VFIO assigns a group whole, to one VM; \
     give its devices to one VM",
    .members.iter().map(|(b, vm)| format!("{b} to {vm}")).collect::<Vec<_>>().join(", ")
)]
pub struct SplitGroup {
    /// IOMMU group number that is split.
    pub group: IommuGroup,
    /// The group's functions given to a VM, with the VM each goes to.
    pub members: Vec<(Bdf, String)>,
}

/// The groups of every VM device, with the facts VFIO cares about; an error
/// when a group's devices go to different VMs. Devices without a group (no
/// IOMMU on the host) are left out.
pub fn check(topo: &Topology, vms: &[(&str, &[Bdf])]) -> Result<Vec<GroupUse>, SplitGroup> {
    let mut owner: BTreeMap<Bdf, &str> = BTreeMap::new();
    for (vm, devices) in vms {
        for d in *devices {
            owner.insert(*d, vm);
        }
    }
    let mut groups: BTreeMap<IommuGroup, Vec<GroupMember>> = BTreeMap::new();
    let used: Vec<IommuGroup> = owner
        .keys()
        .filter_map(|b| topo.function(*b).and_then(|f| f.iommu_group))
        .collect();
    for f in &topo.functions {
        let Some(g) = f.iommu_group.filter(|g| used.contains(g)) else {
            continue;
        };
        groups.entry(g).or_default().push(GroupMember {
            bdf: f.bdf,
            vm: owner.get(&f.bdf).map(|v| v.to_string()),
            bridge: f.is_bridge,
            driver: f.driver.clone(),
        });
    }
    let mut out = Vec::new();
    for (group, members) in groups {
        let mut vms_in: Vec<&str> = members.iter().filter_map(|m| m.vm.as_deref()).collect();
        vms_in.sort_unstable();
        vms_in.dedup();
        if vms_in.len() > 1 {
            return Err(SplitGroup {
                group,
                members: members
                    .iter()
                    .filter_map(|m| m.vm.clone().map(|vm| (m.bdf, vm)))
                    .collect(),
            });
        }
        let outside: Vec<String> = members
            .iter()
            .filter(|m| m.vm.is_none() && !m.bridge)
            .map(|m| match &m.driver {
                Some(d) => format!("{} (driver {d})", m.bdf),
                None => format!("{} (no driver)", m.bdf),
            })
            .collect();
        let warning = (!outside.is_empty()).then(|| {
            format!(
                "IOMMU group {group} also holds {}, given to no VM: bind them to vfio-pci \
                 (or give them to {}) before the VM starts, or VFIO refuses the group",
                outside.join(", "),
                vms_in.first().copied().unwrap_or("the VM")
            )
        });
        out.push(GroupUse {
            group,
            members,
            warning,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod viability_tests {
    use super::*;

    #[test]
    fn drivers_that_manage_dma_and_no_driver_leave_a_group_viable() {
        for ok in [
            None,
            Some("vfio-pci"),
            Some("pci-stub"),
            Some("pcieport"),
            Some("nvgrace_gpu_vfio_pci"),
        ] {
            assert!(leaves_group_viable(ok), "{ok:?}");
        }
        for blocks in [
            "nvidia",
            "nvme",
            "mlx5_core",
            "nouveau",
            "vfio_pci",
            "shpchp",
        ] {
            assert!(!leaves_group_viable(Some(blocks)), "{blocks}");
        }
    }
}
