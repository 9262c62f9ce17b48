//! `p2p-host dra driver --bind` (and `--bind --iommufd`) under the
//! kubelet's own DRA code (`kube-peers kubelet-dra`, see
//! tests/tests/kubernetes/kube_kubelet_dra.rs) against the real control plane: the
//! tree's GPUs start on their host driver, the real scheduler allocates a
//! pod's ResourceClaim of two peers, the kubelet's NodePrepareResources
//! makes their IOMMU groups whole on vfio-pci and its NodeUnprepareResources
//! gives them back. `kubelet-dra --hold-prepared FILE` pauses between
//! prepare and unprepare so the test reads the tree while the claim is
//! prepared. The kernel's side of a bind is the stand-in of
//! tests/src/dra_kubelet.rs ([`Kernel`]) on the copied tree: it answers
//! `bus/pci/drivers_probe` by relinking the function's `driver` as its
//! `driver_override` says (back to the driver it started on when cleared),
//! and gives a function bound to vfio-pci a `vfio-dev/vfioN` entry, N from 0
//! in probe order, as a kernel with VFIO_DEVICE_CDEV does.
//!
//! Expectations come from the fixture by hand
//! (tests/fixtures/qemu-11.1-nested-switch-iommu-on/sysfs): 27:00.0 and
//! 28:00.0 are NVMe functions (class 0x010802) on `nvme`, the only pair on
//! one root complex the driver publishes (kube_kubelet_dra.rs says why);
//! kernel/iommu_groups/10 holds 22:01.0 (a switch port, class 0x060400, on
//! `pcieport`) and 27:00.0, group 11 holds 28:00.0 alone. A bridge in a
//! group need not be bound for VFIO, so 22:01.0 stays on pcieport.
//!
//! The VFIO cdev: the kernel lists a vfio-pci function's device cdev in
//! sysfs as `<function>/vfio-dev/vfioN` and makes its node
//! `/dev/vfio/devices/vfioN`, minor N of the dynamic `vfio-dev` major
//! (Documentation/driver-api/vfio.rst, "VFIO Device cdev"); the driver takes
//! the name from sysfs (host/kube/src/dra_driver/vfio.rs, `vfio_cdev`) and
//! names `/dev/iommu` and `/dev/vfio/devices/<name>` in the CDI spec with
//! `--iommufd` (docs/p2p-host.md, `dra driver`). `/dev/iommu` is iommufd's
//! misc device (major 10, a dynamic minor). The stand-in `/dev` of the mount
//! namespace kubelet-dra runs in (tests/src/kube_node.rs) has those nodes
//! with the numbers below, as it has the group nodes without `--iommufd`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use p2p_tests::dra_kubelet::{driver_of, function_dir, Kernel};
use p2p_tests::dra_node::{device, plain_tree, read_json, schema, spec_devices};
use p2p_tests::kube::ControlPlane;
use p2p_tests::kube_node::{
    finish_kubelet_dra, oci_devices, oci_mounts, spawn_kubelet_dra, tail, two_peer_gpus_pod,
    vfio_group_nodes, DevNode, KubeletNode, DRIVER, GROUP_MAJOR, VFIO_CONTAINER,
};
use serde_json::Value;

/// The peers by hand: BDF, IOMMU group.
const PEERS: [(&str, u32); 2] = [("0000:27:00.0", 10), ("0000:28:00.0", 11)];
/// The switch port in 27:00.0's group.
const BRIDGE: &str = "0000:22:01.0";
/// The stand-in `/dev/iommu`: misc major 10, a minor of our choosing (the
/// kernel's is dynamic).
const IOMMU: (i64, i64) = (10, 123);
/// The stand-in major of `/dev/vfio/devices/vfioN` (the kernel's is
/// dynamic); the minor is N.
const CDEV_MAJOR: i64 = 510;

fn members(tree: &Path, group: u32) -> BTreeSet<String> {
    std::fs::read_dir(tree.join(format!("kernel/iommu_groups/{group}/devices")))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// The function's VFIO cdev in the tree (`vfio-dev/`'s entries).
fn cdevs(tree: &Path, bdf: &str) -> Vec<String> {
    std::fs::read_dir(function_dir(tree, bdf).join("vfio-dev"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn driver_override(tree: &Path, bdf: &str) -> String {
    std::fs::read_to_string(function_dir(tree, bdf).join("driver_override"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// What one run showed.
struct Run {
    /// kubelet-dra's JSON at the end.
    out: Value,
    /// The claim's CDI spec as the driver wrote it, read while prepared.
    spec: Value,
    /// BDF: its cdevs in the tree while prepared.
    cdevs: BTreeMap<String, Vec<String>>,
    /// The claim's uid.
    uid: String,
}

/// Node `node` on a copy of the tree as captured (GPUs on nvme) with the
/// kernel stand-in, the driver with `--bind` and `extra`, pod `ns/vm`'s
/// claim allocated by the scheduler, prepared by the kubelet's code (checked
/// while held: the groups whole on vfio-pci, the checkpoint's record of
/// what was bound, the spec valid), unprepared (checked: all back as
/// captured, each function probed once each way); `dev` is the stand-in
/// `/dev`.
fn bind_and_give_back(node: &str, ns: &str, extra: &[&str], dev: &[DevNode]) -> Run {
    let cp = ControlPlane::shared(module_path!());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let tree = plain_tree(dir);
    for (bdf, _) in PEERS {
        assert_eq!(driver_of(&tree, bdf).as_deref(), Some("nvme"), "{bdf}");
    }
    assert_eq!(driver_of(&tree, BRIDGE).as_deref(), Some("pcieport"));
    assert_eq!(members(&tree, 10), set(&[BRIDGE, PEERS[0].0]));
    assert_eq!(members(&tree, 11), set(&[PEERS[1].0]));
    let kernel = Kernel::start(&tree);
    let mut args = vec!["--bind"];
    args.extend(extra);
    let n = KubeletNode::start(cp, node, dir, &tree, &args);

    let a = two_peer_gpus_pod(cp, ns, node, false);
    let uid = a.uid.clone();
    let allocated: BTreeSet<String> = a.devices.values().cloned().collect();
    assert_eq!(
        allocated,
        PEERS
            .iter()
            .map(|(b, _)| device(b))
            .collect::<BTreeSet<_>>(),
        "{}",
        a.claim
    );

    let hold = dir.join("prepared.json");
    let mut args = n.kubelet_dra_args(cp, &format!("{ns}/vm"));
    args.extend(["--unprepare", "--hold-prepared", hold.to_str().unwrap()].map(String::from));
    let mut child = spawn_kubelet_dra(dir, dev, &args);
    let start = Instant::now();
    while !hold.exists() {
        if let Some(s) = child.try_wait().unwrap() {
            let err = std::fs::read_to_string(dir.join("kubelet-dra.err")).unwrap_or_default();
            panic!(
                "kubelet-dra ended ({s}) before the claim was prepared:\n{}\ndriver log:\n{}",
                tail(&err),
                n.driver_log()
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "the claim is not prepared within 90 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // Prepared: both groups whole on vfio-pci through driver_override, the
    // bridge left alone, each function's host driver recorded.
    let held = read_json(&hold);
    for (bdf, _) in PEERS {
        assert_eq!(driver_of(&tree, bdf).as_deref(), Some("vfio-pci"), "{bdf}");
        assert_eq!(driver_override(&tree, bdf), "vfio-pci", "{bdf}");
    }
    assert_eq!(driver_of(&tree, BRIDGE).as_deref(), Some("pcieport"));
    let record = &n.checkpoint()["claims"][&uid];
    assert_eq!(record["state"], "prepared", "{record}");
    let bound: BTreeSet<String> = record["bound"]
        .as_array()
        .expect("the checkpoint records what the driver bound")
        .iter()
        .map(|b| {
            assert_eq!(b["driver"], "nvme", "{b}");
            b["bdf"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(bound, set(&[PEERS[0].0, PEERS[1].0]));
    // The stand-in adds a cdev 50 ms after the link, as the kernel adds it
    // in the probe after linking; without --iommufd the driver does not wait
    // for it, so the test does, for a second at most.
    let prepared_cdevs = PEERS
        .iter()
        .map(|(b, _)| {
            let start = Instant::now();
            let mut c = cdevs(&tree, b);
            while c.is_empty() && start.elapsed() < Duration::from_secs(1) {
                std::thread::sleep(Duration::from_millis(10));
                c = cdevs(&tree, b);
            }
            (b.to_string(), c)
        })
        .collect();
    let spec = read_json(&n.cdi.join(format!("{DRIVER}-{uid}.json")));
    let errors: Vec<String> = schema().iter_errors(&spec).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?}\n{spec:#}");
    std::fs::remove_file(&hold).unwrap();

    let (code, stdout, stderr) = finish_kubelet_dra(child, dir);
    assert_eq!(
        code,
        Some(0),
        "kubelet-dra failed\nstderr (tail):\n{}\ndriver log:\n{}",
        tail(&stderr),
        n.driver_log()
    );
    let out: Value = serde_json::from_str(&stdout).expect("kubelet-dra printed one JSON object");
    assert_eq!(held["unprepared"], false);
    for k in ["registered", "claims", "cdi_devices", "oci", "metadata"] {
        assert_eq!(held[k], out[k], "{k} held and at the end");
    }
    assert_eq!(out["unprepared"], true);
    let claims = out["claims"].as_array().unwrap();
    assert_eq!(claims.len(), 1, "{}", out["claims"]);
    assert_eq!(claims[0]["uid"], uid.as_str());

    // Unprepared: each function back on nvme, its override cleared, its
    // cdev gone; the spec and the record gone; one probe each way.
    for (bdf, _) in PEERS {
        assert_eq!(driver_of(&tree, bdf).as_deref(), Some("nvme"), "{bdf}");
        assert_eq!(
            driver_override(&tree, bdf),
            "",
            "{bdf}: driver_override cleared"
        );
        assert!(cdevs(&tree, bdf).is_empty(), "{bdf}");
    }
    assert_eq!(driver_of(&tree, BRIDGE).as_deref(), Some("pcieport"));
    assert!(!n.cdi.join(format!("{DRIVER}-{uid}.json")).exists());
    assert!(n.checkpoint()["claims"].get(&uid).is_none());
    let probes = kernel.probes.lock().unwrap().clone();
    assert_eq!(probes.len(), 4, "{probes:?}");
    let (to_vfio, back) = probes.split_at(2);
    let bdfs = |p: &[(String, String)], d: &str| -> BTreeSet<String> {
        p.iter()
            .map(|(b, got)| {
                assert_eq!(got, d, "{probes:?}");
                b.clone()
            })
            .collect()
    };
    assert_eq!(bdfs(to_vfio, "vfio-pci"), set(&[PEERS[0].0, PEERS[1].0]));
    assert_eq!(bdfs(back, "nvme"), set(&[PEERS[0].0, PEERS[1].0]));
    // The pod's claim named directly: its metadata where the protocol
    // puts a claim's, resourceclaims/<claim>/<request>/, and no pod claim
    // name in it.
    let mounts = oci_mounts(&out["oci"]);
    let dest = |req: &str| {
        format!("/var/run/kubernetes.io/dra-device-attributes/resourceclaims/vm-gpus/{req}/{DRIVER}-metadata.json")
    };
    assert_eq!(
        mounts.keys().cloned().collect::<Vec<_>>(),
        [dest("gpu0"), dest("gpu1")]
    );
    for m in out["metadata"].as_array().unwrap() {
        assert_eq!(m["validation_error"], "", "{m}");
        assert_eq!(m["pod_claim_name"], Value::Null, "{m}");
        let dev = &m["requests"][0]["devices"][0];
        let bdf = dev["attributes"]["resource.kubernetes.io/pciBusID"]["string"]
            .as_str()
            .unwrap();
        assert_eq!(dev["device"], device(bdf), "{m}");
        assert_eq!(
            a.devices[m["requests"][0]["name"].as_str().unwrap()],
            device(bdf)
        );
    }
    drop(n);
    Run {
        out,
        spec,
        cdevs: prepared_cdevs,
        uid,
    }
}

/// `--bind`: the groups bound at prepare and given back at unprepare; the
/// container gets the legacy VFIO nodes of the groups.
#[test]
fn the_kubelet_prepare_binds_the_groups_and_unprepare_gives_them_back() {
    let groups: Vec<u32> = PEERS.iter().map(|(_, g)| *g).collect();
    let r = bind_and_give_back("node-bind", "kdra-bind", &[], &vfio_group_nodes(&groups));
    let mut want = BTreeMap::from([(
        "/dev/vfio/vfio".to_string(),
        ("c".to_string(), VFIO_CONTAINER.0, VFIO_CONTAINER.1),
    )]);
    for (minor, g) in groups.iter().enumerate() {
        want.insert(
            format!("/dev/vfio/{g}"),
            ("c".to_string(), GROUP_MAJOR, minor as i64),
        );
    }
    assert_eq!(oci_devices(&r.out["oci"]), want, "{}", r.out["oci"]);
    // The stand-in kernel made the cdevs, but the spec names none.
    assert!(r.cdevs.values().all(|c| c.len() == 1), "{:?}", r.cdevs);
    assert!(
        !r.spec.to_string().contains("/dev/vfio/devices"),
        "{}",
        r.spec
    );
    assert!(!r.spec.to_string().contains("/dev/iommu"), "{}", r.spec);
}

/// `--bind --iommufd`: the same, and the container gets `/dev/iommu` and
/// each function's VFIO cdev, not the groups.
#[test]
fn the_kubelet_prepare_binds_the_groups_and_hands_out_iommufd_cdevs() {
    let cdev = |n: i64| (format!("/dev/vfio/devices/vfio{n}"), CDEV_MAJOR, n);
    let dev = vec![
        ("/dev/iommu".to_string(), IOMMU.0, IOMMU.1),
        cdev(0),
        cdev(1),
    ];
    let r = bind_and_give_back("node-iommufd", "kdra-iommufd", &["--iommufd"], &dev);
    // Each function got one cdev from the stand-in kernel; between them
    // vfio0 and vfio1.
    let names: BTreeSet<String> = r
        .cdevs
        .values()
        .map(|c| {
            assert_eq!(c.len(), 1, "{:?}", r.cdevs);
            c[0].clone()
        })
        .collect();
    assert_eq!(names, set(&["vfio0", "vfio1"]));
    // The spec: per device /dev/iommu and that function's cdev.
    for (bdf, c) in &r.cdevs {
        let name = format!("{}-{}", r.uid, device(bdf));
        let nodes = spec_devices(&r.spec)
            .into_iter()
            .find(|d| d.0 == name)
            .unwrap_or_else(|| panic!("{name} in the spec: {}", r.spec))
            .1;
        assert_eq!(
            nodes,
            [
                "/dev/iommu".to_string(),
                format!("/dev/vfio/devices/{}", c[0])
            ]
        );
    }
    // Injected by the CDI library: /dev/iommu once and both cdevs, with the
    // stand-in /dev's numbers; no group.
    let want: BTreeMap<String, (String, i64, i64)> = dev
        .iter()
        .map(|(p, maj, min)| (p.clone(), ("c".to_string(), *maj, *min)))
        .collect();
    assert_eq!(oci_devices(&r.out["oci"]), want, "{}", r.out["oci"]);
    assert_eq!(r.out["oci"]["devices"].as_array().unwrap().len(), 3);
    assert_eq!(
        r.out["cdi_devices"]["compute"].as_array().unwrap().len(),
        4,
        "two devices and two metadata entries: {}",
        r.out["cdi_devices"]
    );
}
