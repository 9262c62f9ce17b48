//! `p2p-host snapshot`: copies the PCI part of a sysfs tree, as the fixtures
//! are laid out, so a machine's topology can be analysed elsewhere and kept as
//! a test fixture. Reads only; writes only below the output directory.

use std::fs;
use std::io;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use crate::sysfs::SysfsRoot;

/// Attributes copied for each function (those absent on a function are skipped).
const ATTRIBUTES: &[&str] = &[
    "vendor",
    "device",
    "class",
    "revision",
    "subsystem_vendor",
    "subsystem_device",
    "config",
    "numa_node",
    "local_cpulist",
    "current_link_speed",
    "current_link_width",
    "max_link_speed",
    "max_link_width",
    "resource",
    "irq",
    "enable",
    "ari_enabled",
];

/// Symbolic links copied verbatim for each function.
const LINKS: &[&str] = &["driver", "iommu_group"];

/// Subdirectories whose entry names are kept (interfaces below a NIC).
const NAMED_CHILDREN: &[&str] = &["net", "infiniband"];

/// Why a snapshot failed; every variant names the path.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Reading the tree or writing the copy failed, or a device link resolves outside
    /// the tree.
    #[error("{path}: {why}")]
    Io {
        /// The file, link or directory involved.
        path: PathBuf,
        /// The I/O error, or where the link resolves.
        why: String,
    },
    /// `<out>/sysfs` already exists and is not empty; nothing was written.
    #[error("{0}: already holds a snapshot; choose an empty directory")]
    NotEmpty(PathBuf),
}

/// What a snapshot captured.
#[derive(Debug, Clone, Default, serde::Serialize, schemars::JsonSchema)]
pub struct SnapshotSummary {
    /// `vp2p.snapshot/1`.
    pub schema: String,
    /// PCI functions copied: one per `bus/pci/devices` link.
    pub functions: usize,
    /// Attribute files, symbolic links and NUMA node `cpulist` files written.
    pub files: usize,
    /// Functions whose config read returned fewer than 256 bytes (not root).
    pub truncated_configs: Vec<String>,
    /// The copy's root, `<out>/sysfs`: what `--sysfs-root` takes to analyse it.
    pub out: PathBuf,
}

fn io_err(path: &Path) -> impl Fn(io::Error) -> SnapshotError + '_ {
    move |e| SnapshotError::Io {
        path: path.to_path_buf(),
        why: e.to_string(),
    }
}

/// Copies the PCI part of `root` into `out/sysfs`.
pub fn snapshot(root: &SysfsRoot, out: &Path) -> Result<SnapshotSummary, SnapshotError> {
    let dest = out.join("sysfs");
    if dest.exists() && fs::read_dir(&dest).map_err(io_err(&dest))?.next().is_some() {
        return Err(SnapshotError::NotEmpty(dest));
    }
    let mut summary = SnapshotSummary {
        schema: "vp2p.snapshot/1".into(),
        out: dest.clone(),
        ..Default::default()
    };
    let devices = root.path().join("bus/pci/devices");
    let dest_devices = dest.join("bus/pci/devices");
    fs::create_dir_all(&dest_devices).map_err(io_err(&dest_devices))?;
    let mut entries: Vec<PathBuf> = fs::read_dir(&devices)
        .map_err(io_err(&devices))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for link in entries {
        let name = link.file_name().unwrap_or_default().to_owned();
        let target = fs::read_link(&link).map_err(io_err(&link))?;
        symlink(&target, dest_devices.join(&name)).map_err(io_err(&dest_devices))?;
        let real = fs::canonicalize(&link).map_err(io_err(&link))?;
        let rel = real
            .strip_prefix(root.path())
            .map_err(|_| SnapshotError::Io {
                path: link.clone(),
                why: format!(
                    "resolves to {}, outside {}",
                    real.display(),
                    root.path().display()
                ),
            })?;
        let fdest = dest.join(rel);
        fs::create_dir_all(&fdest).map_err(io_err(&fdest))?;
        summary.files += copy_function(&real, &fdest, &dest)?;
        summary.functions += 1;
        let cfg_len = fs::metadata(fdest.join("config"))
            .map(|m| m.len())
            .unwrap_or(0);
        if cfg_len < 256 {
            summary
                .truncated_configs
                .push(name.to_string_lossy().into_owned());
        }
    }
    summary.files += copy_numa_nodes(root, &dest)?;
    Ok(summary)
}

/// Copies one function's attributes, links and interface names.
fn copy_function(src: &Path, dest: &Path, tree: &Path) -> Result<usize, SnapshotError> {
    let mut files = 0;
    for attr in ATTRIBUTES {
        let from = src.join(attr);
        match fs::read(&from) {
            Ok(bytes) => {
                let to = dest.join(attr);
                fs::write(&to, bytes).map_err(io_err(&to))?;
                files += 1;
            }
            // Absent, or not readable for this function (no link, no power): skip.
            Err(_) => continue,
        }
    }
    for name in LINKS {
        let from = src.join(name);
        let Ok(target) = fs::read_link(&from) else {
            continue;
        };
        let to = dest.join(name);
        symlink(&target, &to).map_err(io_err(&to))?;
        files += 1;
        if *name == "iommu_group" {
            // Keep the group directory so the link resolves inside the tree.
            if let Some(group) = target.file_name() {
                let gdir = tree.join("kernel/iommu_groups").join(group).join("devices");
                fs::create_dir_all(&gdir).map_err(io_err(&gdir))?;
                if let Some(fname) = src.file_name() {
                    let member = gdir.join(fname);
                    if !member.exists() {
                        let back = Path::new("../../../../devices").join(
                            dest.strip_prefix(tree.join("devices"))
                                .unwrap_or(Path::new("")),
                        );
                        symlink(&back, &member).map_err(io_err(&member))?;
                    }
                }
            }
        }
    }
    for sub in NAMED_CHILDREN {
        let Ok(entries) = fs::read_dir(src.join(sub)) else {
            continue;
        };
        for e in entries.flatten() {
            let d = dest.join(sub).join(e.file_name());
            fs::create_dir_all(&d).map_err(io_err(&d))?;
        }
    }
    Ok(files)
}

/// Copies `devices/system/node/node*/cpulist`, for NUMA affinity.
fn copy_numa_nodes(root: &SysfsRoot, dest: &Path) -> Result<usize, SnapshotError> {
    let src = root.path().join("devices/system/node");
    let Ok(entries) = fs::read_dir(&src) else {
        return Ok(0);
    };
    let mut files = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().starts_with("node") {
            continue;
        }
        let Ok(cpulist) = fs::read(e.path().join("cpulist")) else {
            continue;
        };
        let d = dest.join("devices/system/node").join(&name);
        fs::create_dir_all(&d).map_err(io_err(&d))?;
        fs::write(d.join("cpulist"), cpulist).map_err(io_err(&d))?;
        files += 1;
    }
    Ok(files)
}
