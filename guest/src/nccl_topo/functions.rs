//! The guest's PCI functions as NCCL's file needs them: ids, class, link, NUMA.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use p2p_topology::hex::{self, HexWidth};
use p2p_topology::topology::LinkInfo;
use p2p_topology::Bdf;

use super::NcclTopoError;
use crate::probe::sysfs::resolve_root;

/// One guest PCI function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestFunction {
    /// PCI vendor id.
    pub vendor: u16,
    /// PCI device id.
    pub device: u16,
    /// PCI class code (class, subclass, programming interface).
    pub class: u32,
    /// Subsystem vendor id; None when sysfs has no `subsystem_vendor`.
    pub subsystem_vendor: Option<u16>,
    /// Subsystem device id; None when sysfs has no `subsystem_device`.
    pub subsystem_device: Option<u16>,
    /// Current and maximum PCIe link speed and width, as far as sysfs tells.
    pub link: LinkInfo,
    /// None when sysfs says -1 or has no `numa_node`.
    pub numa_node: Option<u32>,
}

fn text(dir: &Path, name: &str) -> Option<String> {
    fs::read_to_string(dir.join(name))
        .ok()
        .map(|t| t.trim().to_string())
}

/// Reads a hex attribute of width `T` ([`hex::parse`]); None when absent.
fn hex<T: HexWidth>(dir: &Path, name: &str) -> Result<Option<T>, NcclTopoError> {
    text(dir, name)
        .map(|t| {
            hex::parse(&t).map_err(|e| NcclTopoError::Io {
                path: dir.join(name),
                why: e.to_string(),
            })
        })
        .transpose()
}

/// Reads a hex attribute of width `T` that must exist.
fn required_hex<T: HexWidth>(dir: &Path, name: &str) -> Result<T, NcclTopoError> {
    hex(dir, name)?.ok_or_else(|| NcclTopoError::Io {
        path: dir.join(name),
        why: "missing".into(),
    })
}

/// Every function under `root/bus/pci/devices`, by address.
pub fn read_functions(sysfs_root: &Path) -> Result<BTreeMap<Bdf, GuestFunction>, NcclTopoError> {
    let dir = resolve_root(sysfs_root).join("bus/pci/devices");
    let entries = fs::read_dir(&dir).map_err(|e| NcclTopoError::Io {
        path: dir.clone(),
        why: e.to_string(),
    })?;
    let mut out = BTreeMap::new();
    for e in entries.flatten() {
        let Ok(bdf) = e.file_name().to_string_lossy().parse::<Bdf>() else {
            continue;
        };
        let p = e.path();
        let width = |name: &str| text(&p, name).and_then(|t| t.parse().ok());
        out.insert(
            bdf,
            GuestFunction {
                vendor: required_hex(&p, "vendor")?,
                device: required_hex(&p, "device")?,
                class: required_hex(&p, "class")?,
                subsystem_vendor: hex(&p, "subsystem_vendor")?,
                subsystem_device: hex(&p, "subsystem_device")?,
                link: LinkInfo {
                    current_speed: text(&p, "current_link_speed"),
                    current_width: width("current_link_width"),
                    max_speed: text(&p, "max_link_speed"),
                    max_width: width("max_link_width"),
                },
                numa_node: text(&p, "numa_node")
                    .and_then(|t| t.parse::<i64>().ok())
                    .and_then(|n| u32::try_from(n).ok()),
            },
        );
    }
    Ok(out)
}
