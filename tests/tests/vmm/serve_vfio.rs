//! `p2p-host serve --gpu socket=PATH,vfio=BDF,clique=N` refuses, before it
//! touches `/dev/vfio` or creates a socket, a device whose IOMMU group is not
//! viable, naming the function in the way and its driver; checked on a
//! captured sysfs tree with driver links added. (Serving a real device is
//! proven where one exists: see docs/testing.md.)

use std::path::{Path, PathBuf};
use std::process::Command;

use p2p_tests::{fixture_dir, run};

/// A copy of the vfio-user-gpus tree (group 7 holds 0000:82:00.0 and
/// 0000:83:00.0) with `drivers` bound.
fn tree(drivers: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let src = fixture_dir("qemu-11.1-vfio-user-gpus").join("sysfs");
    let ok = Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(dir.path())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let root = dir.path().join("sysfs");
    for (bdf, driver) in drivers {
        let drv = root.join("bus/pci/drivers").join(driver);
        std::fs::create_dir_all(&drv).unwrap();
        let dev = std::fs::canonicalize(root.join("bus/pci/devices").join(bdf)).unwrap();
        let link = dev.join("driver");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&drv, link).unwrap();
    }
    (dir, root)
}

fn serve(root: &Path, spec: &str) -> p2p_tests::Run {
    run(
        "p2p-host",
        &[
            "serve",
            "--sysfs-root",
            root.to_str().unwrap(),
            "--gpu",
            spec,
        ],
    )
}

#[test]
fn a_group_with_a_host_driver_is_refused_naming_the_function_and_driver() {
    let (dir, root) = tree(&[("0000:82:00.0", "nvidia"), ("0000:83:00.0", "vfio-pci")]);
    let sock = dir.path().join("g.sock");
    let r = serve(
        &root,
        &format!("socket={},vfio=0000:83:00.0,clique=1", sock.display()),
    );
    assert_ne!(r.code, Some(0));
    assert!(
        r.stderr.contains(
            "0000:83:00.0: IOMMU group 7 is not viable: 0000:82:00.0 is bound to nvidia \
             (bind every function of the group to vfio-pci, or unbind it)"
        ),
        "{}",
        r.stderr
    );
    assert!(!sock.exists(), "no socket is left behind");
}

#[test]
fn a_device_not_bound_to_vfio_pci_is_refused() {
    let (dir, root) = tree(&[("0000:83:00.0", "nouveau")]);
    let sock = dir.path().join("g.sock");
    let r = serve(
        &root,
        &format!("socket={},vfio=0000:83:00.0,clique=1", sock.display()),
    );
    assert_ne!(r.code, Some(0));
    assert!(
        r.stderr.contains("0000:83:00.0 is bound to nouveau"),
        "{}",
        r.stderr
    );
    let (_d, root) = tree(&[]);
    let r = serve(
        &root,
        "socket=/tmp/vp2p-never.sock,vfio=0000:83:00.0,clique=1",
    );
    assert!(
        r.stderr
            .contains("0000:83:00.0: is bound to no driver, not vfio-pci"),
        "{}",
        r.stderr
    );
}

/// The number no IOMMU group can have: the kernel numbers groups with an
/// IDA bounded by `INT_MAX` (`iommu_group_alloc` in drivers/iommu/iommu.c), so
/// `/dev/vfio/4294967295` exists on no machine.
const NO_SUCH_GROUP: u32 = u32::MAX;

/// Moves group 7 of the tree (0000:82:00.0 and 0000:83:00.0) to `to`.
fn renumber_group_7(root: &Path, to: u32) {
    let groups = root.join("kernel/iommu_groups");
    std::fs::rename(groups.join("7"), groups.join(to.to_string())).unwrap();
    for bdf in ["0000:82:00.0", "0000:83:00.0"] {
        let dev = std::fs::canonicalize(root.join("bus/pci/devices").join(bdf)).unwrap();
        let link = dev.join("iommu_group");
        let target = std::fs::read_link(&link).unwrap();
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(target.with_file_name(to.to_string()), link).unwrap();
    }
}

#[test]
fn a_viable_group_goes_on_to_dev_vfio() {
    // The tree says yes; its group is one no machine has, so opening it
    // fails on any machine and says which step did: the container where
    // this machine has no VFIO, else the group.
    let (dir, root) = tree(&[("0000:82:00.0", "pcieport"), ("0000:83:00.0", "vfio-pci")]);
    renumber_group_7(&root, NO_SUCH_GROUP);
    let sock = dir.path().join("g.sock");
    let r = serve(
        &root,
        &format!("socket={},vfio=0000:83:00.0,clique=1", sock.display()),
    );
    assert_ne!(r.code, Some(0));
    let want = if Path::new("/dev/vfio/vfio").exists() {
        format!("0000:83:00.0: opening /dev/vfio/{NO_SUCH_GROUP}: No such file or directory")
    } else {
        "0000:83:00.0: opening /dev/vfio/vfio: No such file or directory".to_string()
    };
    assert!(r.stderr.contains(&want), "want {want:?} in {}", r.stderr);
    assert!(!sock.exists());
}

#[test]
fn vfio_specs_that_cannot_work_are_refused() {
    let (_d, root) = tree(&[]);
    for (spec, want) in [
        (
            "socket=/tmp/x.sock,vfio=0000:83:00.0,config=/c,clique=1",
            "'config' and 'vfio' cannot be given together",
        ),
        (
            "socket=/tmp/x.sock,vfio=0000:83:00.0,clique=1,max-bar=256M",
            "'max-bar' and 'vfio' cannot be given together",
        ),
        (
            "socket=/tmp/x.sock,vfio=83:00,clique=1",
            "vfio '83:00': want a PCI address",
        ),
        (
            "socket=/tmp/x.sock,vfio=0000:99:00.0,clique=1",
            "0000:99:00.0: no such PCI function",
        ),
    ] {
        let r = serve(&root, spec);
        assert_ne!(r.code, Some(0), "{spec}");
        assert!(r.stderr.contains(want), "{spec}: {}", r.stderr);
    }
}

#[test]
fn check_serve_vfio_says_which_gpus_serve_can_take() {
    let (_d, root) = tree(&[("0000:82:00.0", "pcieport"), ("0000:83:00.0", "vfio-pci")]);
    let r = run(
        "p2p-host",
        &[
            "check",
            "--sysfs-root",
            root.to_str().unwrap(),
            "--serve-vfio",
            "--json",
        ],
    );
    let report: serde_json::Value = serde_json::from_str(&r.stdout).expect(&r.stderr);
    let items: Vec<&serde_json::Value> = report["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["check"] == "serve-vfio")
        .collect();
    let verdict = |bdf: &str| {
        items
            .iter()
            .find(|i| i["scope"] == bdf)
            .map(|i| i["verdict"].as_str().unwrap().to_string())
    };
    assert_eq!(
        verdict("0000:83:00.0").as_deref(),
        Some("pass"),
        "{items:?}"
    );
    assert_eq!(
        verdict("0000:84:00.0").as_deref(),
        Some("fail"),
        "{items:?}"
    );
    assert_eq!(
        r.code,
        Some(1),
        "a GPU that cannot be served fails the check"
    );
}
