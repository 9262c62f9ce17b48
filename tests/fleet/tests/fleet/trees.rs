//! The fleet's shapes from tests/fixtures: which trees it uses and why not,
//! pair classes by hand and against nvidia-smi, the partition rule, the
//! greedy heuristic.

use std::collections::BTreeSet;

use p2p_fleet::arrivals::Vm;
use p2p_fleet::placement::greedy;
use p2p_fleet::trees::{discover, Class, Shape, Tree};
use p2p_tests::{binary, repo_root};
use serde_json::Value;

/// Every directory of tests/fixtures as the fleet finds it, and the
/// directory its staged copies are in (they go with it).
fn discovered() -> (tempfile::TempDir, Vec<Tree>) {
    let work = tempfile::tempdir().unwrap();
    let found = discover(
        &repo_root().join("tests/fixtures"),
        work.path(),
        &binary("p2p-host"),
    )
    .unwrap();
    (work, found)
}

/// The fleet's shapes of tests/fixtures, by name.
fn shapes() -> (Vec<Shape>, Vec<(String, String)>) {
    let (_work, found) = discovered();
    // The staged copies go with `work`: the tests use only the classes,
    // computed during discovery.
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
    // QEMU 7.2's captures of the same layouts are the same machines.
    for (n, first) in [
        (
            "qemu-7.2-two-socket-iommu-on",
            "qemu-11.1-two-socket-iommu-on",
        ),
        (
            "qemu-7.2-nested-switch-iommu-on",
            "qemu-11.1-nested-switch-iommu-on",
        ),
    ] {
        assert_eq!(
            why(n),
            format!("the same machine as {first} (the same GPUs, NICs and pair classes)")
        );
    }
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

/// The NVSwitch shape runs Fabric Manager's shared NVSwitch model with the
/// partitions of its fm-partitions.json (one of eight, two of four, four of
/// two, eight of one, in address order): a VM's GPUs are NVLink peers only
/// when they are one partition, and otherwise get the PCIe class of the
/// same tree (switch-pairs': PIX within a switch, NODE across root
/// complexes of a socket, SYS across sockets).
#[test]
fn on_the_partitioned_board_nvlink_counts_only_inside_one_partition() {
    let (usable, _) = shapes();
    let n = shape(&usable, "fleet-nvswitch");
    assert_eq!(n.partitions.len(), 15);
    let worst = |bdfs: &[&str]| {
        let names: Vec<String> = bdfs
            .iter()
            .map(|b| dev(&format!("0000:{b}:00.0")))
            .collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        n.worst(&refs)
    };
    // Partitions: {23,24} (pair 3), {23,24,43,44} (four 1), all eight (0).
    assert_eq!(worst(&["23", "24"]), Class::Nv);
    assert_eq!(worst(&["43", "44"]), Class::Nv);
    assert_eq!(worst(&["23", "24", "43", "44"]), Class::Nv);
    assert_eq!(worst(&["83", "84", "a3", "a4"]), Class::Nv);
    // Not partitions: the PCIe class.
    assert_eq!(worst(&["23", "43"]), Class::Node);
    assert_eq!(worst(&["24", "83"]), Class::Sys);
    assert_eq!(worst(&["23", "24", "83", "84"]), Class::Sys);
    assert_eq!(worst(&["23", "24", "43", "83"]), Class::Sys);
    // The pair matrix still says NVLink joins every pair.
    assert_eq!(
        n.class(&dev("0000:23:00.0"), &dev("0000:83:00.0")),
        Class::Nv
    );
}

/// The benchmark grades pairs with a reader of its own (p2p_fleet::grading);
/// on every usable fixture tree it agrees with vp2p's classifier on every
/// pair of published devices, so neither can drift from nvidia-smi's legend
/// unseen.
#[test]
fn the_benchmarks_grader_agrees_with_vp2ps_classifier_on_every_published_pair() {
    use p2p_host::nvlink::NvLinkOptions;
    use p2p_host::sysfs::{SysfsReader, SysfsRoot};
    use p2p_topology::classify::classify;
    use p2p_topology::select::GpuSelector;

    let (_work, found) = discovered();
    let mut pairs = 0;
    for t in found {
        let Tree::Usable(s) = t else { continue };
        let arg = |flag: &str| {
            s.slice_args
                .iter()
                .position(|a| a == flag)
                .map(|i| s.slice_args[i + 1].clone())
        };
        let selector = match arg("--gpus") {
            Some(list) => GpuSelector::List {
                bdfs: list.split(',').map(|b| b.parse().unwrap()).collect(),
            },
            None => GpuSelector::Nvidia,
        };
        let reader = SysfsReader::with_nvlinks(
            selector,
            NvLinkOptions {
                map: arg("--nvlink").map(Into::into),
                use_nvml: false,
            },
        );
        let topo = reader.read_root(&SysfsRoot::new(&s.root).unwrap()).unwrap();
        let all: Vec<(&String, &p2p_topology::bdf::Bdf)> =
            s.gpus.iter().chain(s.nics.iter()).collect();
        for (na, ba) in &all {
            for (nb, bb) in &all {
                if na == nb {
                    continue;
                }
                let theirs = Class::of(classify(&topo, **ba, **bb).unwrap().class);
                assert_eq!(s.class(na, nb), theirs, "{}: {ba} {bb}", s.name);
                pairs += 1;
            }
        }
    }
    assert!(pairs > 500, "{pairs} pairs compared");
}

/// On the captured GPU machines the grader gives what `nvidia-smi topo -m`
/// printed there (topo-m.txt; GPU i is the i-th by PCI address, nvidia-smi's
/// default order), from the capture's tree and its NVLink map. These VMs
/// show NV18 on every pair: the check covers NVLink, not the PCIe classes.
#[test]
fn the_grader_gives_nvidia_smis_matrix_on_the_captured_gpu_machines() {
    use p2p_fleet::grading::Grader;

    for name in ["h200x4-passthrough-guest", "h200x2-passthrough-guest"] {
        let dir = repo_root().join("tests/fixtures").join(name);
        let tree = p2p_tests::unpack_fixture(name);
        let root = tree.path().join("sysfs");
        let map: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("nvlink.json")).unwrap())
                .unwrap();
        let mut gpus: Vec<String> = map["links"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|l| {
                [
                    l["a"].as_str().unwrap().to_string(),
                    l["b"].as_str().unwrap().to_string(),
                ]
            })
            .collect();
        gpus.sort();
        gpus.dedup();
        let grader = Grader::new(&root, Some(&dir.join("nvlink.json"))).unwrap();
        let topo = std::fs::read_to_string(dir.join("topo-m.txt")).unwrap();
        let mut cells = 0;
        for (i, row) in topo.lines().filter(|l| l.starts_with("GPU")).enumerate() {
            let printed: Vec<&str> = row.split('\t').skip(1).take(gpus.len()).collect();
            for (j, cell) in printed.iter().enumerate() {
                let cell = cell.trim();
                if i == j {
                    assert_eq!(cell, "X");
                    continue;
                }
                let want = match cell {
                    c if c.starts_with("NV") => Class::Nv,
                    "PIX" => Class::Pix,
                    "PXB" => Class::Pxb,
                    "PHB" => Class::Phb,
                    "NODE" => Class::Node,
                    "SYS" => Class::Sys,
                    other => panic!("{name}: cell {other:?}"),
                };
                assert_eq!(
                    grader.class(&gpus[i], &gpus[j]).unwrap(),
                    want,
                    "{name}: GPU{i} GPU{j}"
                );
                cells += 1;
            }
        }
        assert_eq!(
            cells,
            gpus.len() * (gpus.len() - 1),
            "{name}: every pair of the matrix"
        );
    }
}

#[test]
fn the_greedy_heuristic_places_each_size_first_on_the_best_class_free() {
    let (usable, _) = shapes();
    let e = shape(&usable, "qemu-11.1-eight-gpu-iommu-on");
    let r = shape(&usable, "qemu-11.1-root-ports-iommu-on");
    let nodes = [e, r];
    let vm = |index, gpus, nic| Vm {
        index,
        gpus,
        nic,
        arrive: 0.0,
        leave: f64::INFINITY,
    };
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
    let (placed, rejected) = greedy(&nodes, &vms, 8);
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
    let (placed, _) = greedy(&nodes, &vms, 2);
    let by = |i: usize| placed.iter().find(|p| p.vm.index == i).unwrap();
    for i in [0, 2, 3, 4] {
        assert_eq!(by(i).classes(nodes[by(i).node]).0, Class::Pix, "VM {i}");
    }
    assert_eq!(by(1).classes(r).0, Class::Sys);
}

#[test]
fn vp2p_publishes_nic_last_when_asked_and_nvidias_cut_stays_in_bus_order() {
    let (_work, found) = discovered();
    let s = found
        .into_iter()
        .find_map(|t| match t {
            Tree::Usable(s) if s.name == "qemu-11.1-two-socket-iommu-on" => Some(s),
            _ => None,
        })
        .expect("the two-socket tree is usable");
    let mut args = s.slice_args.clone();
    args.extend(["--device-order".into(), "nic-last".into()]);
    let (slices, _) = p2p_fleet::trees::slices(&binary("p2p-host"), &args, "node-a").unwrap();
    let buses = |slices: &[Value], driver: &str| -> Vec<String> {
        slices
            .iter()
            .filter(|sl| sl["spec"]["driver"] == driver)
            .flat_map(|sl| {
                sl["spec"]["devices"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter(|d| d["attributes"]["gpu.vp2p.io/kind"]["string"] != "nic")
            .filter_map(|d| {
                d["attributes"][p2p_allocation::dra::PCI_BUS_ID]["string"]
                    .as_str()
                    .map(str::to_string)
            })
            .collect()
    };
    // The fleet stages 25:00.0 as the RDMA NIC (rdma-nics.txt).
    let vp2p = buses(&slices, "gpu.vp2p.io");
    assert_eq!(vp2p, p2p_tests::TWO_SOCKET_GPUS_NIC_LAST);
    let cut = p2p_fleet::policy::nvidia_cut(&slices, "node-a", &s);
    let nvidia = buses(&cut, p2p_fleet::policy::NVIDIA_DRIVER);
    let mut sorted = vp2p.clone();
    sorted.sort();
    assert_eq!(nvidia, sorted, "NVIDIA's GPUs by bus ID");
}
