//! scripts/fleet.sh's pieces against expectations derived by hand from
//! boot.sh's layouts, and one small fleet on the real control plane.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

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

/// A trees directory holding only `names` from tests/fixtures.
fn trees_of(dir: &Path, names: &[&str]) {
    for n in names {
        std::os::unix::fs::symlink(repo_root().join("tests/fixtures").join(n), dir.join(n))
            .unwrap();
    }
}

/// The fleet binary on the trees `names` of tests/fixtures with `args`,
/// on a control plane of its own: its stdout and its `--json` document.
fn fleet_on(names: &[&str], args: &[&str]) -> (String, Value) {
    let (stdout, doc, _) = fleet_in(names, args);
    (stdout, doc)
}

/// [`fleet_on`], and the directory its work (logs) went to.
fn fleet_in(names: &[&str], args: &[&str]) -> (String, Value, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let trees = tmp.path().join("trees");
    std::fs::create_dir_all(&trees).unwrap();
    trees_of(&trees, names);
    let json = tmp.path().join("fleet.json");
    let out = Command::new(env!("CARGO_BIN_EXE_fleet"))
        .current_dir(repo_root())
        .arg("--trees")
        .arg(&trees)
        .args(args)
        .arg("--work")
        .arg(tmp.path().join("work"))
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "fleet failed:\n{stdout}\n{stderr}");
    eprintln!("{stdout}");
    let doc = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (stdout, doc, tmp)
}

/// `--extender`: kube-scheduler, given vp2p's extender in its
/// KubeSchedulerConfiguration, calls `p2p-host dra extender`, which reads
/// the scheduler's ExtenderArgs (Go's field names), the claim and the
/// slices, and scores the nodes; every pod is still counted once.
#[test]
fn the_real_scheduler_calls_vp2ps_extender_and_gets_scores() {
    let (_, doc, work) = fleet_in(
        &["qemu-11.1-eight-gpu-iommu-on"],
        &[
            "--nodes",
            "4",
            "--regimes",
            "fill",
            "--policies",
            "vp2p,count",
            "--extender",
            "5",
        ],
    );
    assert_eq!(doc["extender"], 5);
    let log = std::fs::read_to_string(work.path().join("work/extender.log")).unwrap();
    assert!(
        log.contains("scheduler extender on http://127.0.0.1:"),
        "{log}"
    );
    let first = log
        .lines()
        .find(|l| l.contains("extender: call 1: pod "))
        .unwrap_or_else(|| panic!("no call logged:\n{log}"));
    // Four empty eight-gpu nodes: the first VM fits a switch on each.
    assert!(first.contains("4 node(s), best score"), "{first}");
    assert!(!first.contains("best score 0 "), "{first}");
    assert!(
        !log.contains("extender: the request") && !log.contains("extender: pod "),
        "errors:\n{log}"
    );
    for r in doc["runs"].as_array().unwrap() {
        for s in r["sizes"].as_array().unwrap() {
            let n = |k: &str| s[k].as_u64().unwrap();
            assert_eq!(n("placed") + n("refused"), n("arrived"), "{s}");
        }
    }
}

#[test]
fn a_small_fleet_on_the_real_scheduler_counts_every_policy_on_the_same_arrivals() {
    let (stdout, doc) = fleet_on(
        &["qemu-11.1-eight-gpu-iommu-on"],
        &[
            "--nodes",
            "6",
            "--seeds",
            "1",
            "--churn-loads",
            "1.0",
            "--warmup",
            "0.5",
            "--window",
            "1",
        ],
    );
    assert_eq!(doc["schema"], "vp2p.fleet/2");
    let runs = doc["runs"].as_array().unwrap();
    let keys: BTreeSet<(&str, &str)> = runs
        .iter()
        .map(|r| (r["regime"].as_str().unwrap(), r["policy"].as_str().unwrap()))
        .collect();
    // The scheduled policies in both regimes; greedy and the two optima in fill.
    let mut want = BTreeSet::new();
    for p in ["vp2p", "nvidia", "count", "kubevirt"] {
        want.insert(("fill", p));
        want.insert(("churn-100", p));
    }
    for p in ["greedy", "optimum", "optimum-well"] {
        want.insert(("fill", p));
    }
    assert_eq!(keys, want);
    assert_eq!(runs.len(), want.len());
    let run = |regime: &str, policy: &str| {
        runs.iter()
            .find(|r| r["regime"] == regime && r["policy"] == policy)
            .unwrap()
    };
    let sizes = |r: &Value, key: &str| -> Vec<u64> {
        r["sizes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s[key].as_u64().unwrap())
            .collect()
    };
    // 6 eight-GPU nodes, 48 GPUs; fill asks 110 % of them: at least 53 GPUs.
    let fill_arrived = sizes(run("fill", "vp2p"), "arrived");
    let asked: u64 = fill_arrived.iter().zip([2, 4, 8]).map(|(n, g)| n * g).sum();
    assert!((53..53 + 8).contains(&asked), "{asked} GPUs asked");
    for regime in ["fill", "churn-100"] {
        let arrived = sizes(run(regime, "vp2p"), "arrived");
        for p in ["nvidia", "count", "kubevirt"] {
            assert_eq!(
                sizes(run(regime, p), "arrived"),
                arrived,
                "{regime} {p}: the same arrivals"
            );
        }
        for p in ["vp2p", "nvidia", "count", "kubevirt"] {
            let r = run(regime, p);
            let (placed, refused) = (sizes(r, "placed"), sizes(r, "refused"));
            for i in 0..3 {
                assert_eq!(
                    placed[i] + refused[i],
                    arrived[i],
                    "{regime} {p}: every arrival counted once"
                );
            }
        }
        assert!(run(regime, "vp2p")["gpu_hours_served"].is_null() == (regime == "fill"));
    }
    // Six nodes are few enough for branch and bound: both optima proven.
    for o in doc["optima"].as_array().unwrap() {
        if o["regime"] == "fill" {
            assert_eq!(o["exact"], true, "{o}");
        } else {
            assert!(o["exact"].is_null(), "{o}");
        }
    }
    // No policy beats the optimum: placed at most the optimum's, well
    // placed at most the well-placed optimum's.
    let total = |r: &Value, key: &str| sizes(r, key).iter().sum::<u64>();
    let (best_placed, best_well) = (
        total(run("fill", "optimum"), "placed"),
        total(run("fill", "optimum-well"), "well_placed"),
    );
    for p in ["vp2p", "nvidia", "count", "kubevirt", "greedy"] {
        let r = run("fill", p);
        assert!(
            total(r, "placed") <= best_placed,
            "{p} placed more than the optimum"
        );
        assert!(
            total(r, "well_placed") <= best_well,
            "{p} well placed more than the optimum"
        );
    }
    // On eight-gpu nodes only, every switch holds 4 GPUs, and vp2p's claims
    // take GPUs by twos (2-GPU VMs at the switch tier) or a whole switch
    // (4-GPU VMs, the switch tier) or a whole node: a switch's free count
    // stays even, so a 2-GPU VM always finds a free pair on one switch (PIX)
    // while nobody leaves.
    let two = &run("fill", "vp2p")["sizes"][0];
    assert!(two["placed"].as_u64().unwrap() > 0);
    assert_eq!(two["by_class"]["PIX"], two["placed"], "{two}");
    // An 8-GPU VM there can only be PHB (two switches below one root complex).
    let eight = &run("fill", "vp2p")["sizes"][2];
    for c in ["NV", "PIX", "PXB", "NODE", "SYS"] {
        assert_eq!(eight["by_class"][c], 0, "{eight}");
    }
    assert!(stdout.contains("DRA filter timeout (10 s)"), "{stdout}");
    assert!(stdout.contains("Goals, seed by seed:"), "{stdout}");
}

/// On partitioned NVSwitch nodes the real scheduler, given vp2p's shipped
/// tiered claims or NVIDIA's partition attributes, gives every VM a whole
/// Fabric Manager partition: the tier each allocation names is the
/// partition one, and the grader (which counts NVLink only inside one
/// partition) finds every placed VM on NVLink.
#[test]
fn on_partitioned_nodes_both_policies_take_whole_partitions() {
    let (_, doc) = fleet_on(
        &["fleet-nvswitch"],
        &[
            "--nodes",
            "4",
            "--regimes",
            "fill",
            "--policies",
            "vp2p,nvidia",
        ],
    );
    for r in doc["runs"].as_array().unwrap() {
        let tier = if r["policy"] == "vp2p" {
            "fm-partition"
        } else {
            "partition"
        };
        for s in r["sizes"].as_array().unwrap() {
            let placed = s["placed"].as_u64().unwrap();
            assert_eq!(s["by_class"]["NV"], placed, "{}: {s}", r["policy"]);
            let tiers = s["gpu_tiers"].as_object().unwrap();
            let on_tier = tiers.get(tier).and_then(Value::as_u64).unwrap_or(0);
            assert_eq!(on_tier, placed, "{}: {s}", r["policy"]);
        }
        let placed: u64 = r["sizes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["placed"].as_u64().unwrap())
            .sum();
        assert!(placed > 0, "{r}");
    }
}

/// docs/results' counted fleet runs: the format of their counts (one run per
/// policy, regime and seed; per size, placed and refused add up to arrived,
/// the same arrivals for every policy of a regime and seed; the optima only
/// in fill, proven or marked not), and the tables and goals `--report`
/// prints of each `NAME.json` are the ones in its table (`table.txt` for
/// fleet.json, `NAME-table.txt` for the others).
#[test]
fn the_committed_fleet_counts_format_adds_up_and_each_table_is_their_report() {
    let dir = repo_root().join("docs/results/dev-2vcpu-2026-11-29-fleet-counts");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(files.iter().any(|f| f.ends_with("fleet.json")), "{files:?}");
    for json in &files {
        committed_counts_add_up(json);
    }
}

fn committed_counts_add_up(json: &Path) {
    let dir = json.parent().unwrap();
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    assert_eq!(doc["schema"], "vp2p.fleet/2");
    let runs = doc["runs"].as_array().unwrap();
    let mut keys = BTreeSet::new();
    for r in runs {
        let (policy, regime) = (r["policy"].as_str().unwrap(), r["regime"].as_str().unwrap());
        keys.insert((policy, regime, r["seed"].as_u64().unwrap()));
        if policy.starts_with("optimum") || policy == "greedy" {
            assert_eq!(regime, "fill", "{policy} runs only in fill");
        }
        assert!(doc["seeds"].as_array().unwrap().contains(&r["seed"]), "{r}");
        for s in r["sizes"].as_array().unwrap() {
            let n = |k: &str| s[k].as_u64().unwrap();
            assert_eq!(
                n("placed") + n("refused"),
                n("arrived"),
                "{policy} {regime}: {s}"
            );
            assert!(n("well_placed") <= n("placed"), "{s}");
            if let Some(by) = s["by_class"].as_object() {
                assert_eq!(by.len(), 6, "{s}");
                assert_eq!(
                    by.values().map(|v| v.as_u64().unwrap()).sum::<u64>(),
                    n("placed")
                );
            }
        }
        let same = runs
            .iter()
            .find(|o| o["regime"] == r["regime"] && o["seed"] == r["seed"] && o["policy"] == "vp2p")
            .unwrap();
        let arrived = |x: &Value| -> Vec<u64> {
            x["sizes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["arrived"].as_u64().unwrap())
                .collect()
        };
        assert_eq!(
            arrived(r),
            arrived(same),
            "{policy} {regime}: the same arrivals as vp2p"
        );
    }
    assert_eq!(
        keys.len(),
        runs.len(),
        "one run per policy, regime and seed"
    );
    for o in doc["optima"].as_array().unwrap() {
        let fill = o["regime"] == "fill";
        assert_eq!(o["count"].is_u64(), fill, "{o}");
        assert_eq!(o["exact"].is_boolean(), fill, "{o}");
        if let Some(c) = o["count"].as_u64() {
            assert!(c as f64 <= o["bound"].as_f64().unwrap() + 1e-6, "{o}");
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_fleet"))
        .arg("--report")
        .arg(json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = String::from_utf8_lossy(&out.stdout);
    let stem = json.file_stem().unwrap().to_string_lossy();
    let table_file = if stem == "fleet" {
        dir.join("table.txt")
    } else {
        dir.join(format!("{stem}-table.txt"))
    };
    let table = std::fs::read_to_string(&table_file).unwrap();
    assert!(
        table.contains(report.as_ref()),
        "{} does not hold `fleet --report`'s output:\n{report}",
        table_file.display()
    );
}

/// The tuning candidates of scripts/fleet-tune.sh read as their policy's
/// three templates (the names the fleet's pods ask for), each asking its
/// size's GPUs in every alternative.
#[test]
fn the_tuning_candidates_are_each_policys_three_templates() {
    use p2p_fleet::policy::{templates, Policy};
    let dir = repo_root().join("tests/fleet/templates");
    let mut seen = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let f = e.unwrap().path();
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let (policy, docs) = if name.starts_with("vp2p-") {
            (
                Policy::Vp2p,
                templates(Policy::Vp2p, &f, None, "t").unwrap(),
            )
        } else if name.starts_with("nvidia-") {
            let shipped = repo_root().join(p2p_fleet::policy::TIERED);
            (
                Policy::Nvidia,
                templates(Policy::Nvidia, &shipped, Some(&f), "t").unwrap(),
            )
        } else {
            panic!("{name}: a candidate is vp2p-*.yaml or nvidia-*.yaml");
        };
        let names: Vec<&str> = docs
            .iter()
            .map(|d| d["metadata"]["name"].as_str().unwrap())
            .collect();
        let want: Vec<String> = [2, 4, 8].iter().map(|g| policy.template_name(*g)).collect();
        assert_eq!(names, want, "{name}");
        for (d, g) in docs.iter().zip([2, 4, 8]) {
            for alt in d["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"]
                .as_array()
                .unwrap()
            {
                assert_eq!(alt["count"], g, "{name}: {alt}");
            }
        }
        seen += 1;
    }
    assert!(seen >= 2, "a candidate for each policy");
}

/// The shipped tiered templates, as docs/kubevirt.md describes them: the
/// alternatives in order, each but `anywhere` held by its attribute, and in
/// the four-GPU template each PCIe level's constraint holding every nearer
/// level of both lists (written out by hand here).
#[test]
fn the_shipped_tiered_templates_hold_each_level_and_every_nearer_one() {
    let text = std::fs::read_to_string(
        repo_root().join("host/kubernetes/dra/claim-templates-tiered.yaml"),
    )
    .unwrap();
    let docs: Vec<Value> = p2p_tests::yaml_documents(&text)
        .into_iter()
        .map(|d| serde_json::to_value(d).unwrap())
        .collect();
    let names: Vec<&str> = docs
        .iter()
        .map(|d| d["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "two-peer-gpus-tiered",
            "four-peer-gpus-and-nic-tiered",
            "eight-peer-gpus-tiered"
        ]
    );
    let tiers = [
        "fm-partition",
        "nvlink",
        "switch",
        "switches",
        "root-complex",
        "numa-node",
        "anywhere",
    ];
    for (d, count) in docs.iter().zip([2, 4, 8]) {
        let gpus = &d["spec"]["spec"]["devices"]["requests"][0];
        let alts: Vec<&str> = gpus["firstAvailable"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["name"].as_str().unwrap())
            .collect();
        // Two GPUs ask first for a switch pair on GPUs without NVLink.
        let want: Vec<&str> = if count == 2 {
            ["switch-no-nvlink"].into_iter().chain(tiers).collect()
        } else {
            tiers.to_vec()
        };
        assert_eq!(alts, want);
        assert!(gpus["firstAvailable"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["count"] == count));
        // Plain NVLink only on GPUs Fabric Manager does not partition.
        let nvlink = gpus["firstAvailable"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == "nvlink")
            .unwrap();
        assert_eq!(
            nvlink["selectors"][0]["cel"]["expression"],
            format!("!has(device.attributes[\"gpu.vp2p.io\"].fmPartition{count})")
        );
    }
    let first = &docs[0]["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"][0];
    assert_eq!(
        first["selectors"][0]["cel"]["expression"],
        "!has(device.attributes[\"gpu.vp2p.io\"].nvlinkDomain)"
    );
    let c = |d: &Value| -> Vec<(Vec<String>, String)> {
        d["spec"]["spec"]["devices"]["constraints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let r = c["requests"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_str().unwrap().to_string())
                    .collect();
                (r, c["matchAttribute"].as_str().unwrap().to_string())
            })
            .collect()
    };
    let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let a = |s: &str| format!("gpu.vp2p.io/{s}");
    let partition = |n: u8| (v(&["gpus/fm-partition"]), a(&format!("fmPartition{n}")));
    let levels = |n: u8| {
        vec![
            partition(n),
            (v(&["gpus/nvlink"]), a("nvlinkDomain")),
            (v(&["gpus/switch"]), a("cliquePix")),
            (v(&["gpus/switches"]), a("cliquePxb")),
            (v(&["gpus/root-complex"]), a("cliquePhb")),
            (v(&["gpus/numa-node"]), a("cliqueNode")),
        ]
    };
    let mut two = vec![(v(&["gpus/switch-no-nvlink"]), a("cliquePix"))];
    two.extend(levels(2));
    assert_eq!(c(&docs[0]), two);
    assert_eq!(c(&docs[2]), levels(8));
    assert_eq!(
        c(&docs[1]),
        vec![
            partition(4),
            (v(&["gpus/nvlink"]), a("nvlinkDomain")),
            (v(&["gpus/switch", "nic/switch"]), a("cliquePix")),
            (
                v(&["gpus/switch", "gpus/switches", "nic/switch", "nic/switches"]),
                a("cliquePxb")
            ),
            (
                v(&[
                    "gpus/switch",
                    "gpus/switches",
                    "gpus/root-complex",
                    "nic/switch",
                    "nic/switches",
                    "nic/root-complex"
                ]),
                a("cliquePhb")
            ),
            (
                v(&[
                    "gpus/fm-partition",
                    "gpus/nvlink",
                    "gpus/switch",
                    "gpus/switches",
                    "gpus/root-complex",
                    "gpus/numa-node",
                    "nic/switch",
                    "nic/switches",
                    "nic/root-complex",
                    "nic/numa-node"
                ]),
                a("cliqueNode")
            ),
        ]
    );
}
