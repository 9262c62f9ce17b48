//! The IOMMU group of a function and whether VFIO can hand it out: every
//! function in the group must be bound to no driver or to one that manages
//! DMA itself ([`p2p_topology::iommu_groups::leaves_group_viable`], the rule
//! `check` and the DRA driver apply too), else `VFIO_GROUP_GET_STATUS` says
//! "not viable" and the group cannot be attached. Read from sysfs, so it is
//! testable on a captured tree.

use std::path::{Path, PathBuf};

use p2p_topology::{Bdf, IommuGroup};

use super::VfioError;

/// A function's IOMMU group, as sysfs shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMembers {
    /// The group number (`/dev/vfio/N`).
    pub group: IommuGroup,
    /// Every function in the group with the driver it is bound to (None: no driver).
    pub functions: Vec<(String, Option<String>)>,
}

impl GroupMembers {
    /// Reads the group of `bdf` under the sysfs root `sysfs` (`/sys`, or a captured tree).
    pub fn read(sysfs: &Path, bdf: Bdf) -> Result<Self, VfioError> {
        let dev = sysfs.join("bus/pci/devices").join(bdf.to_string());
        if !dev.exists() {
            return Err(VfioError::NoDevice { bdf, path: dev });
        }
        let link = dev.join("iommu_group");
        let target = std::fs::read_link(&link).map_err(|_| VfioError::NoGroup { bdf })?;
        let group = target
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse::<IommuGroup>().ok())
            .ok_or(VfioError::NoGroup { bdf })?;
        let devices = sysfs.join(format!("kernel/iommu_groups/{group}/devices"));
        let list = std::fs::read_dir(&devices).map_err(|source| VfioError::Sysfs {
            path: devices.clone(),
            source,
        })?;
        let mut functions = Vec::new();
        for entry in list {
            let entry = entry.map_err(|source| VfioError::Sysfs {
                path: devices.clone(),
                source,
            })?;
            let name = entry.file_name().to_string_lossy().into_owned();
            functions.push((name, driver_of(&entry.path())));
        }
        functions.sort();
        Ok(Self { group, functions })
    }

    /// The first function whose driver keeps the group from being viable.
    pub fn blocker(&self) -> Option<(&str, &str)> {
        self.functions.iter().find_map(|(f, d)| match d.as_deref() {
            Some(d) if !p2p_topology::iommu_groups::leaves_group_viable(Some(d)) => {
                Some((f.as_str(), d))
            }
            _ => None,
        })
    }

    /// Ok when every function is bound to vfio-pci (or an allowed driver, or
    /// none) and `bdf` itself is bound to vfio-pci.
    pub fn check(&self, bdf: Bdf) -> Result<(), VfioError> {
        if let Some((function, driver)) = self.blocker() {
            return Err(VfioError::NotViable {
                bdf,
                group: self.group,
                function: function.to_string(),
                driver: driver.to_string(),
            });
        }
        let me = bdf.to_string();
        let own = self
            .functions
            .iter()
            .find(|(f, _)| *f == me)
            .and_then(|(_, d)| d.clone());
        if own.as_deref() != Some("vfio-pci") {
            return Err(VfioError::NotVfioPci {
                bdf,
                driver: own.unwrap_or_else(|| "no driver".into()),
            });
        }
        Ok(())
    }
}

/// The driver a function is bound to: the last part of its `driver` link.
pub fn driver_of(function: &Path) -> Option<String> {
    let target: PathBuf = std::fs::read_link(function.join("driver")).ok()?;
    Some(target.file_name()?.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, PathBuf) {
        let fixture = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/qemu-11.1-vfio-user-gpus/sysfs"
        );
        let dir = tempfile::tempdir().unwrap();
        let st = std::process::Command::new("cp")
            .args(["-a", fixture])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(st.success());
        let root = dir.path().join("sysfs");
        std::fs::create_dir_all(root.join("bus/pci/drivers/vfio-pci")).unwrap();
        std::fs::create_dir_all(root.join("bus/pci/drivers/nvidia")).unwrap();
        (dir, root)
    }

    fn bind(root: &Path, bdf: &str, driver: &str) {
        let dev = root.join("bus/pci/devices").join(bdf);
        let real = std::fs::canonicalize(&dev).unwrap();
        let link = real.join("driver");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(root.join("bus/pci/drivers").join(driver), link).unwrap();
    }

    #[test]
    fn a_group_of_vfio_pci_functions_is_viable() {
        let (_d, root) = tree();
        bind(&root, "0000:82:00.0", "vfio-pci");
        bind(&root, "0000:83:00.0", "vfio-pci");
        let g = GroupMembers::read(&root, "0000:83:00.0".parse().unwrap()).unwrap();
        assert_eq!(g.group, IommuGroup(7));
        assert_eq!(g.functions.len(), 2);
        g.check("0000:83:00.0".parse().unwrap()).unwrap();
    }

    #[test]
    fn a_function_with_another_driver_is_named() {
        let (_d, root) = tree();
        bind(&root, "0000:82:00.0", "nvidia");
        bind(&root, "0000:83:00.0", "vfio-pci");
        let bdf: Bdf = "0000:83:00.0".parse().unwrap();
        let e = GroupMembers::read(&root, bdf)
            .unwrap()
            .check(bdf)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "0000:83:00.0: IOMMU group 7 is not viable: 0000:82:00.0 is bound to nvidia \
             (bind every function of the group to vfio-pci, or unbind it)"
        );
    }

    #[test]
    fn the_device_itself_must_be_bound_to_vfio_pci() {
        let (_d, root) = tree();
        let bdf: Bdf = "0000:83:00.0".parse().unwrap();
        let e = GroupMembers::read(&root, bdf)
            .unwrap()
            .check(bdf)
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("is bound to no driver, not vfio-pci"),
            "{e}"
        );
        let e = GroupMembers::read(&root, "0000:99:00.0".parse().unwrap()).unwrap_err();
        assert!(e.to_string().contains("no such PCI function"), "{e}");
    }
}
