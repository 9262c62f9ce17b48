//! The tree the gRPC targets (device plugin, DRA driver) serve: the captured
//! QEMU nested-switch host, copied to a scratch directory, its five NVMe
//! functions (the GPUs of that fixture) relinked to vfio-pci as a bind
//! would, as tests/tests/kubernetes/device_plugin.rs does.

use std::path::{Path, PathBuf};

/// The fixture's GPUs (NVMe functions, class 0108, 1b36:0010).
pub const GPUS: [&str; 5] = [
    "0000:25:00.0",
    "0000:26:00.0",
    "0000:27:00.0",
    "0000:28:00.0",
    "0000:81:00.0",
];

/// Points GPU's `driver` link at vfio-pci, as a bind would.
fn to_vfio(tree: &Path, gpu: &str) {
    let dev = std::fs::canonicalize(tree.join("bus/pci/devices").join(gpu)).unwrap();
    let link = dev.join("driver");
    let old = std::fs::read_link(&link).unwrap();
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(old.parent().unwrap().join("vfio-pci"), &link).unwrap();
}

/// A fresh scratch directory `vp2p-fuzz-<name>-<pid>` holding the copied
/// tree at `sysfs/` with [`GPUS`] on vfio-pci; returns the directory.
pub fn nested_switch_on_vfio(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vp2p-fuzz-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/qemu-11.1-nested-switch-iommu-on/sysfs");
    let ok = std::process::Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(&dir)
        .status()
        .unwrap();
    assert!(ok.success(), "copying {}", src.display());
    for g in GPUS {
        to_vfio(&dir.join("sysfs"), g);
    }
    dir
}
