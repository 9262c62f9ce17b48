//! scripts/fleet.sh's pieces against expectations derived by hand from
//! boot.sh's layouts, and one small fleet on the real control plane.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use p2p_tests::fleet::arrivals::Vm;
use p2p_tests::fleet::placement::oracle;
use p2p_tests::fleet::trees::{discover, Class, Shape, Tree};
use p2p_tests::{binary, repo_root};
use serde_json::Value;

/// The fleet's shapes of tests/fixtures, by name.
fn shapes() -> (Vec<Shape>, Vec<(String, String)>) {
    let work = tempfile::tempdir().unwrap();
    let found = discover(
        &repo_root().join("tests/fixtures"),
        work.path(),
        &binary("p2p-host"),
    )
    .unwrap();
    // The staged copies must outlive the test's use of the shapes' roots:
    // only the classes are used below, computed during discovery.
    std::mem::forget(work);
    let (mut usable, mut skipped) = (Vec::new(), Vec::new());
    for t in found {
        match t {
            Tree::Usable(s) => usable.push(s),
            Tree::Skipped { name, reason } => skipped.push((name, reason)),
        }
    }
    (usable, skipped)
}

fn shape<'a>(all: &'a [Shape], name: &str) -> &'a Shape {
    all.iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("{name} is not usable"))
}

/// The device name `p2p-host dra slices` gives the function at `bdf`.
fn dev(bdf: &str) -> String {
    format!("gpu-{}", bdf.replace([':', '.'], "-"))
}

#[test]
fn fixtures_without_iommu_groups_or_gpus_are_skipped_with_the_reason() {
    let (usable, skipped) = shapes();
    let names: BTreeSet<&str> = usable.iter().map(|s| s.name.as_str()).collect();
    // Every capture with the IOMMU on and at least two GPUs is usable (the
    // fixtures README's table), the NVSwitch shape included.
    for n in [
        "qemu-11.1-eight-gpu-iommu-on",
        "qemu-11.1-switch-pairs-iommu-on",
        "qemu-11.1-root-ports-iommu-on",
        "fleet-nvswitch",
        "qemu-11.1-two-socket-iommu-on",
        "qemu-11.1-vfio-user-gpus",
    ] {
        assert!(names.contains(n), "{n} usable: {names:?}");
    }
    let why = |n: &str| {
        skipped
            .iter()
            .find(|(s, _)| s == n)
            .map(|(_, r)| r.clone())
            .unwrap_or_default()
    };
    // IOMMU off: no group, so VFIO cannot assign any GPU (the captures' guest.txt: 0 groups).
    assert!(
        why("qemu-11.1-two-socket-iommu-off").contains("no IOMMU group"),
        "{}",
        why("qemu-11.1-two-socket-iommu-off")
    );
    // The passthrough VMs have no vIOMMU (their README).
    assert!(why("h200x4-passthrough-guest").contains("no IOMMU group"));
    assert!(why("domains").contains("no sysfs tree"));
}

#[test]
fn the_eight_gpu_shapes_pair_as_boot_sh_lays_them_out() {
    let (usable, _) = shapes();
    // eight-gpu: 23..26 below sw0, 29..2c below sw1, one root complex; NIC on its own root port.
    let e = shape(&usable, "qemu-11.1-eight-gpu-iommu-on");
    assert_eq!(e.gpus.len(), 8);
    assert_eq!(
        e.class(&dev("0000:23:00.0"), &dev("0000:26:00.0")),
        Class::Pix
    );
    assert_eq!(
        e.class(&dev("0000:26:00.0"), &dev("0000:29:00.0")),
        Class::Phb
    );
    assert_eq!(
        e.nic_class(&[&dev("0000:23:00.0")], "nic-0000-2d-00-0"),
        Class::Phb
    );
    // switch-pairs: a switch per root complex, two root complexes per socket.
    let s = shape(&usable, "qemu-11.1-switch-pairs-iommu-on");
    assert_eq!(s.nics.len(), 4);
    assert_eq!(
        s.class(&dev("0000:23:00.0"), &dev("0000:24:00.0")),
        Class::Pix
    );
    assert_eq!(
        s.class(&dev("0000:23:00.0"), &dev("0000:43:00.0")),
        Class::Node
    );
    assert_eq!(
        s.class(&dev("0000:23:00.0"), &dev("0000:83:00.0")),
        Class::Sys
    );
    assert_eq!(
        s.nic_class(
            &[&dev("0000:23:00.0"), &dev("0000:24:00.0")],
            "nic-0000-25-00-0"
        ),
        Class::Pix
    );
    // root-ports: PHB within a root complex, nothing nearer.
    let r = shape(&usable, "qemu-11.1-root-ports-iommu-on");
    assert_eq!(
        r.class(&dev("0000:21:00.0"), &dev("0000:22:00.0")),
        Class::Phb
    );
    assert_eq!(
        r.class(&dev("0000:21:00.0"), &dev("0000:41:00.0")),
        Class::Node
    );
    // The NVSwitch shape: the same tree with every pair NV18 in its map.
    let n = shape(&usable, "fleet-nvswitch");
    let all: Vec<&str> = n.gpus.keys().map(String::as_str).collect();
    assert_eq!(n.worst(&all), Class::Nv);
}

#[test]
fn the_oracle_places_each_size_first_on_the_best_class_free() {
    let (usable, _) = shapes();
    let e = shape(&usable, "qemu-11.1-eight-gpu-iommu-on");
    let r = shape(&usable, "qemu-11.1-root-ports-iommu-on");
    let nodes = [e, r];
    let vm = |index, gpus, nic| Vm { index, gpus, nic };
    // One 8-GPU VM and four 2-GPU VMs on an eight-gpu node and a root-ports node.
    let vms = [
        vm(0, 2, false),
        vm(1, 8, false),
        vm(2, 2, false),
        vm(3, 2, false),
        vm(4, 2, false),
    ];
    // 8-GPU first: it takes the eight-gpu node (PHB beats root-ports' SYS);
    // the 2-GPU VMs then get root-ports' PHB pairs, four of them.
    let (placed, rejected) = oracle(&nodes, &vms, 8);
    assert!(rejected.is_empty());
    let by = |i: usize| placed.iter().find(|p| p.vm.index == i).unwrap();
    assert_eq!(by(1).node, 0);
    assert_eq!(by(1).classes(e).0, Class::Phb);
    for i in [0, 2, 3, 4] {
        assert_eq!(by(i).node, 1);
        assert_eq!(by(i).classes(r).0, Class::Phb);
    }
    // 2-GPU first: each takes a PIX pair of the eight-gpu node (four pairs,
    // two per switch), and the 8-GPU VM gets root-ports, SYS.
    let (placed, _) = oracle(&nodes, &vms, 2);
    let by = |i: usize| placed.iter().find(|p| p.vm.index == i).unwrap();
    for i in [0, 2, 3, 4] {
        assert_eq!(by(i).classes(nodes[by(i).node]).0, Class::Pix, "VM {i}");
    }
    assert_eq!(by(1).classes(r).0, Class::Sys);
}

/// A trees directory holding only `names` from tests/fixtures.
fn trees_of(dir: &Path, names: &[&str]) {
    for n in names {
        std::os::unix::fs::symlink(repo_root().join("tests/fixtures").join(n), dir.join(n))
            .unwrap();
    }
}

#[test]
fn a_small_fleet_on_the_real_scheduler_records_every_policy_load_and_size() {
    let tmp = tempfile::tempdir().unwrap();
    let trees = tmp.path().join("trees");
    std::fs::create_dir_all(&trees).unwrap();
    trees_of(&trees, &["qemu-11.1-eight-gpu-iommu-on"]);
    let json = tmp.path().join("fleet.json");
    let out = Command::new(env!("CARGO_BIN_EXE_fleet"))
        .current_dir(repo_root())
        .args(["--trees"])
        .arg(&trees)
        .args([
            "--nodes", "6", "--seeds", "1", "--loads", "0.5,0.8", "--work",
        ])
        .arg(tmp.path().join("work"))
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "fleet failed:\n{stdout}\n{stderr}");
    eprintln!("{stdout}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let records = doc["records"].as_array().unwrap();
    // One record per policy, load and size (one seed): 4 x 2 x 3.
    assert_eq!(records.len(), 24);
    for r in records {
        let classes = r["classes"].as_object().unwrap();
        let keys: BTreeSet<&str> = classes.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            BTreeSet::from(["NV", "PIX", "PXB", "PHB", "NODE", "SYS"])
        );
        assert!(r["rejected"].is_u64() && r["vm_gpus"].is_u64() && r["seed"] == 1);
    }
    let rec = |policy: &str, load: f64, size: u64| {
        records
            .iter()
            .find(|r| {
                r["policy"] == policy && r["load"].as_f64() == Some(load) && r["vm_gpus"] == size
            })
            .unwrap()
    };
    // On eight-gpu nodes only, every switch holds 4 GPUs, and vp2p's claims
    // take GPUs by twos (2-GPU VMs at the switch tier) or a whole switch
    // (4-GPU VMs, the switch tier) or a whole node: a switch's free count
    // stays even, so a 2-GPU VM always finds a free pair on one switch (PIX).
    for load in [0.5, 0.8] {
        let two = rec("vp2p", load, 2);
        let admitted: u64 = two["classes"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert!(admitted > 0);
        assert_eq!(two["classes"]["PIX"].as_u64(), Some(admitted), "{two}");
        // An 8-GPU VM there can only be PHB (two switches below one root complex).
        let eight = rec("vp2p", load, 8);
        for c in ["NV", "PIX", "PXB", "NODE", "SYS"] {
            assert_eq!(eight["classes"][c], 0, "{eight}");
        }
    }
    assert!(stdout.contains("DRA filter timeout (10 s)"), "{stdout}");
}
