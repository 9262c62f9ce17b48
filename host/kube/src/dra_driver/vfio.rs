//! Binding PCI functions to vfio-pci through sysfs, as the kernel documents
//! it (Documentation/ABI/testing/sysfs-bus-pci, "driver_override", Linux
//! v6.12): write the driver's name to the function's `driver_override`,
//! unbind it from its driver (`driver/unbind`), then ask the bus to probe it
//! (`/sys/bus/pci/drivers_probe`); clearing `driver_override` (a newline) and
//! probing again gives it back to the driver that matches it. Everything is
//! under a sysfs root, so tests bind on copies of captured trees.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use p2p_topology::{Bdf, IommuGroup};

/// The driver VFIO assignment needs.
pub const VFIO_PCI: &str = "vfio-pci";

/// A sysfs tree functions are read from and bound in.
#[derive(Debug, Clone)]
pub struct PciBus {
    root: PathBuf,
    /// How long a bind or a give-back may take to show in `driver`.
    pub timeout: Duration,
}

/// Why a function could not be bound or given back.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// A sysfs file could not be written.
    #[error("{bdf}: writing {}: {source}", path.display())]
    Write {
        /// The function.
        bdf: Bdf,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The kernel did not bind it in time.
    #[error("{bdf}: still bound to {} after {:?} (wanted {want})", got.as_deref().unwrap_or("no driver"), timeout)]
    NotBound {
        /// The function.
        bdf: Bdf,
        /// Its driver now.
        got: Option<String>,
        /// The driver wanted.
        want: String,
        /// How long it was given.
        timeout: Duration,
    },
}

fn write(bdf: Bdf, path: &Path, text: &str) -> Result<(), BindError> {
    // create(true): on a captured copy the attribute files may be absent; on
    // the live /sys they always exist and O_CREAT changes nothing.
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|source| BindError::Write {
            bdf,
            path: path.to_path_buf(),
            source,
        })
}

impl PciBus {
    /// The bus of the sysfs tree at `root` (a directory holding bus/ and devices/).
    pub fn new(root: &Path, timeout: Duration) -> Self {
        Self {
            root: root.to_path_buf(),
            timeout,
        }
    }

    fn dir(&self, bdf: Bdf) -> PathBuf {
        self.root.join("bus/pci/devices").join(bdf.to_string())
    }

    /// The function's driver now (the `driver` link's last component).
    pub fn driver(&self, bdf: Bdf) -> Option<String> {
        let target = std::fs::read_link(self.dir(bdf).join("driver")).ok()?;
        Some(target.file_name()?.to_string_lossy().into_owned())
    }

    /// The function exists in the tree.
    pub fn exists(&self, bdf: Bdf) -> bool {
        self.dir(bdf).exists()
    }

    /// Every function of IOMMU group `group`, as the kernel lists it
    /// (`kernel/iommu_groups/<group>/devices`).
    pub fn group(&self, group: IommuGroup) -> std::io::Result<Vec<Bdf>> {
        let dir = self
            .root
            .join("kernel/iommu_groups")
            .join(group.to_string())
            .join("devices");
        let mut out = Vec::new();
        for e in std::fs::read_dir(&dir)? {
            let name = e?.file_name();
            if let Ok(b) = name.to_string_lossy().parse::<Bdf>() {
                out.push(b);
            }
        }
        out.sort();
        Ok(out)
    }

    /// The function is a PCI-to-PCI bridge (class 0x0604): VFIO does not ask
    /// bridges in a group to be bound.
    pub fn is_bridge(&self, bdf: Bdf) -> bool {
        std::fs::read_to_string(self.dir(bdf).join("class"))
            .ok()
            .and_then(|s| u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok())
            .is_some_and(|c| c >> 8 == 0x0604)
    }

    /// The function's VFIO character device (`vfio-dev/vfioN`), present when
    /// it is bound to vfio-pci on a kernel with VFIO_DEVICE_CDEV (6.2+).
    pub fn vfio_cdev(&self, bdf: Bdf) -> Option<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.dir(bdf).join("vfio-dev"))
            .ok()?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("vfio"))
            .collect();
        names.sort();
        names.into_iter().next()
    }

    /// The function's VFIO cdev once it shows, waiting at most `within`: the
    /// kernel links `driver` before it calls vfio-pci's probe, which adds
    /// `vfio-dev/vfioN` (drivers/base/dd.c, `really_probe`), so a bind seen
    /// in `driver` may not have its cdev yet.
    pub fn wait_vfio_cdev(&self, bdf: Bdf, within: Duration) -> Option<String> {
        let start = Instant::now();
        loop {
            if let Some(name) = self.vfio_cdev(bdf) {
                return Some(name);
            }
            if start.elapsed() >= within {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The function's IOMMU group (its `iommu_group` link's number).
    pub fn iommu_group(&self, bdf: Bdf) -> Option<IommuGroup> {
        let target = std::fs::read_link(self.dir(bdf).join("iommu_group")).ok()?;
        target.file_name()?.to_str()?.parse().ok()
    }

    fn wait_for(&self, bdf: Bdf, want: Option<&str>, limit: Duration) -> Result<(), BindError> {
        let start = Instant::now();
        loop {
            let got = self.driver(bdf);
            if got.as_deref() == want || (want.is_none() && got.is_none()) {
                return Ok(());
            }
            if start.elapsed() >= limit {
                return Err(BindError::NotBound {
                    bdf,
                    got,
                    want: want.unwrap_or("no driver").to_string(),
                    timeout: limit,
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn unbind_and_probe(&self, bdf: Bdf) -> Result<(), BindError> {
        if self.driver(bdf).is_some() {
            write(bdf, &self.dir(bdf).join("driver/unbind"), &bdf.to_string())?;
        }
        write(
            bdf,
            &self.root.join("bus/pci/drivers_probe"),
            &bdf.to_string(),
        )
    }

    /// Binds the function to vfio-pci and waits until `driver` says so, for
    /// at most `within`; on failure `driver_override` is cleared again.
    pub fn bind_vfio(&self, bdf: Bdf, within: Duration) -> Result<(), BindError> {
        write(bdf, &self.dir(bdf).join("driver_override"), VFIO_PCI)?;
        let r = self
            .unbind_and_probe(bdf)
            .and_then(|()| self.wait_for(bdf, Some(VFIO_PCI), within));
        if r.is_err() {
            let _ = write(bdf, &self.dir(bdf).join("driver_override"), "\n");
        }
        r
    }

    /// Gives the function back: clears `driver_override`, unbinds it from
    /// vfio-pci and probes, then waits for `original` (its driver before).
    pub fn give_back(&self, bdf: Bdf, original: Option<&str>) -> Result<(), BindError> {
        write(bdf, &self.dir(bdf).join("driver_override"), "\n")?;
        self.unbind_and_probe(bdf)?;
        self.wait_for(bdf, original, self.timeout)
    }
}
