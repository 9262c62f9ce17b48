//! The chooser on every captured multi-GPU tree, with the sets expected worked
//! out by hand from the trees (`p2p-host topo` of each, quoted in comments),
//! and `plan --vm NAME=COUNT` / `allocate` end to end.

use std::path::Path;

use p2p_allocation::chooser::{choose, Choice, ChooseError, Request};
use p2p_allocation::clique::MaxLevel;
use p2p_host::nvlink::{self, NvLinkOptions};
use p2p_host::sysfs::{self, SysfsRoot};
use p2p_tests::{fixture_dir, run, unpack_fixture};
use p2p_topology::{Bdf, GpuSelector, PathClass, Role, Topology};
use serde_json::Value;

fn nvme() -> GpuSelector {
    GpuSelector::Class {
        prefix: "0108".parse().unwrap(),
    }
}

fn load(tree: &Path, sel: &GpuSelector, map: Option<&Path>) -> Topology {
    let root = SysfsRoot::new(tree).unwrap();
    let mut topo = sysfs::scan(&root).unwrap();
    let opts = NvLinkOptions {
        map: map.map(Path::to_path_buf),
        use_nvml: false,
    };
    nvlink::discover(&mut topo, sel, &opts).unwrap();
    topo
}

fn qemu(name: &str) -> Topology {
    load(&fixture_dir(name).join("sysfs"), &nvme(), None)
}

fn gpus(t: &Topology, sel: &GpuSelector) -> Vec<Bdf> {
    t.functions
        .iter()
        .filter(|f| sel.role(f) == Role::Gpu)
        .map(|f| f.bdf)
        .collect()
}

fn b(s: &str) -> Bdf {
    s.parse().unwrap()
}

fn bdfs(list: &[&str]) -> Vec<Bdf> {
    list.iter().map(|s| b(s)).collect()
}

fn req(n: usize) -> Request {
    Request {
        gpus: n,
        nics: 0,
        must_include: Vec::new(),
        max_level: MaxLevel::DEFAULT,
        strict: false,
    }
}

/// Two requests in a row, the second from what the first left.
fn two(t: &Topology, sel: &GpuSelector, n1: usize, n2: usize) -> (Choice, Choice) {
    let free = gpus(t, sel);
    let first = choose(t, sel, &free, &req(n1), None).unwrap();
    let rest: Vec<Bdf> = free
        .into_iter()
        .filter(|g| !first.gpus.contains(g))
        .collect();
    let second = choose(t, sel, &rest, &req(n2), None).unwrap();
    (first, second)
}

// qemu-11.1-two-socket-iommu-on, `p2p-host topo --gpu-class 0108`:
//   GPU0 01:00.0 (pci0000:00, NUMA unknown: SYS to all)
//   GPU1 23:00.0, GPU2 24:00.0 PIX (switch 21:00.0), GPU3 26:00.0 PHB to both (pci0000:20)
//   GPU4 41:00.0 NODE to GPU1-3 (pci0000:40, node 0)
//   GPU5 83:00.0, GPU6 84:00.0 PIX (node 1), SYS to the rest
// Every GPU in its own IOMMU group.

#[test]
fn two_socket_pairs_keep_the_three_gpu_block_free() {
    // Two PIX pairs exist: 23+24 and 83+84. Taking 83+84 leaves 23, 24, 26
    // one PHB block of 3; taking 23+24 would leave 26 alone (block of 2 at most:
    // 83+84). So the first pair is 83+84 and the second 23+24, each one clique.
    let t = qemu("qemu-11.1-two-socket-iommu-on");
    let (a, bb) = two(&t, &nvme(), 2, 2);
    assert_eq!(a.gpus, bdfs(&["0000:83:00.0", "0000:84:00.0"]));
    assert_eq!(bb.gpus, bdfs(&["0000:23:00.0", "0000:24:00.0"]));
    assert!(a.one_clique && bb.one_clique);
    assert_eq!(a.worst_class, PathClass::Pix);
    assert_eq!(a.numa_nodes, vec![1]);
    assert_eq!(a.largest_free_block, 3);
}

#[test]
fn fragmentation_the_second_request_does_not_take_the_firsts_clique() {
    // A pair then a triple: the pair must not take 23 or 24, which complete
    // the only three-GPU clique (23, 24, 26 under pci0000:20 at PHB).
    let t = qemu("qemu-11.1-two-socket-iommu-on");
    let (a, bb) = two(&t, &nvme(), 2, 3);
    assert!(a.gpus.iter().all(|g| !bb.gpus.contains(g)));
    assert_eq!(
        bb.gpus,
        bdfs(&["0000:23:00.0", "0000:24:00.0", "0000:26:00.0"])
    );
    assert!(bb.one_clique);
    // Had the pair been 23+24 (first in address order), three would not be one clique.
    let left: Vec<Bdf> = gpus(&t, &nvme())
        .into_iter()
        .filter(|g| !bdfs(&["0000:23:00.0", "0000:24:00.0"]).contains(g))
        .collect();
    let worse = choose(&t, &nvme(), &left, &req(3), None).unwrap();
    assert!(!worse.one_clique);
}

#[test]
fn a_request_larger_than_any_clique() {
    // Four at PHB: the largest clique is 23, 24, 26 (3). The nearest four add
    // 41 (NODE to the three); any set with 01, 83 or 84 has a SYS pair.
    let t = qemu("qemu-11.1-two-socket-iommu-on");
    let all = gpus(&t, &nvme());
    let c = choose(&t, &nvme(), &all, &req(4), None).unwrap();
    assert_eq!(
        c.gpus,
        bdfs(&[
            "0000:23:00.0",
            "0000:24:00.0",
            "0000:26:00.0",
            "0000:41:00.0"
        ])
    );
    assert!(!c.one_clique);
    assert_eq!(c.worst_class, PathClass::Node);
    assert!(
        c.reasons[0].contains("the largest has 3"),
        "{:?}",
        c.reasons
    );
    let mut strict = req(4);
    strict.strict = true;
    assert_eq!(
        choose(&t, &nvme(), &all, &strict, None).unwrap_err(),
        ChooseError::NotOneClique {
            wanted: 4,
            level: MaxLevel::DEFAULT,
            largest: 3
        }
    );
}

// qemu-11.1-nested-switch-iommu-on: GPU0 25:00.0 and GPU1 26:00.0 PIX and in
// one IOMMU group (9); GPU2 27:00.0 PXB to them (group 10); GPU3 28:00.0 PHB
// to all three (group 11); GPU4 81:00.0 on node 1, SYS to all (group 5).

#[test]
fn nested_switch_keeps_the_shared_group_whole() {
    // A pair: group 9 (25+26, PIX) is the nearest. Then 27+28 (PHB), the
    // only pair left within PHB (81 is SYS to both).
    let t = qemu("qemu-11.1-nested-switch-iommu-on");
    let (a, bb) = two(&t, &nvme(), 2, 2);
    assert_eq!(a.gpus, bdfs(&["0000:25:00.0", "0000:26:00.0"]));
    assert_eq!(bb.gpus, bdfs(&["0000:27:00.0", "0000:28:00.0"]));
    assert_eq!(bb.worst_class, PathClass::Phb);
    // One GPU: group 9 holds two, so neither of its GPUs alone. Of 27, 28 and
    // 81, taking 81 leaves 25..28 one PHB block of 4 (27 or 28 would leave 3).
    let all = gpus(&t, &nvme());
    let one = choose(&t, &nvme(), &all, &req(1), None).unwrap();
    assert_eq!(one.gpus, bdfs(&["0000:81:00.0"]));
    assert_eq!(one.largest_free_block, 4);
    // 25 without 26: group 9 cannot go whole, so three come from 27, 28, 81.
    let some = bdfs(&[
        "0000:25:00.0",
        "0000:27:00.0",
        "0000:28:00.0",
        "0000:81:00.0",
    ]);
    let c = choose(&t, &nvme(), &some, &req(2), None).unwrap();
    assert_eq!(c.gpus, bdfs(&["0000:27:00.0", "0000:28:00.0"]));
    assert!(
        c.reasons.iter().any(|r| r.contains("IOMMU group 9")),
        "{:?}",
        c.reasons
    );
    let mut must = req(1);
    must.must_include = vec![b("0000:25:00.0")];
    assert!(matches!(
        choose(&t, &nvme(), &all, &must, None),
        Err(ChooseError::GroupsDoNotFit { wanted: 1, .. })
    ));
}

#[test]
fn h200x4_nvlink_pairs_in_address_order() {
    // nvlink.json: NV18 between every pair of 00:06.0..00:09.0, no IOMMU in
    // the guest. Every pair is equal on every criterion, so the lowest
    // addresses first: 06+07, then 08+09.
    let dir = unpack_fixture("h200x4-passthrough-guest");
    let map = fixture_dir("h200x4-passthrough-guest").join("nvlink.json");
    let t = load(&dir.path().join("sysfs"), &GpuSelector::Nvidia, Some(&map));
    let (a, bb) = two(&t, &GpuSelector::Nvidia, 2, 2);
    assert_eq!(a.gpus, bdfs(&["0000:00:06.0", "0000:00:07.0"]));
    assert_eq!(bb.gpus, bdfs(&["0000:00:08.0", "0000:00:09.0"]));
    assert_eq!(a.worst_class, PathClass::Nv(Some(18)));
    assert!(a.one_clique && bb.one_clique);
}

fn plan_json(tree: &str, args: &[&str]) -> Value {
    let mut all = vec!["plan", "--sysfs-root", tree, "--json"];
    all.extend_from_slice(args);
    let r = run("p2p-host", &all);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    serde_json::from_str(&r.stdout).unwrap()
}

#[test]
fn plan_two_vms_by_count_on_the_captured_trees() {
    // The done-when: each VM one clique where the tree allows it, groups whole
    // (the plan's IOMMU check refuses a split group), the second VM not taking
    // the first's clique. Sets as worked out above; the vfio-user tree has the
    // two-socket shape with NVIDIA ids (23, 24 PIX and 25 PHB under pci0000:20,
    // 41 on pci0000:40, 83 and 84 PIX on node 1), so the same two pairs.
    let pairs = |a: [&'static str; 2], b: [&'static str; 2]| vec![a.to_vec(), b.to_vec()];
    type Case = (
        &'static str,
        &'static [&'static str],
        Vec<Vec<&'static str>>,
    );
    let cases: [Case; 3] = [
        (
            "qemu-11.1-two-socket-iommu-on",
            &["--gpu-class", "0108"],
            pairs(
                ["0000:83:00.0", "0000:84:00.0"],
                ["0000:23:00.0", "0000:24:00.0"],
            ),
        ),
        (
            "qemu-11.1-nested-switch-iommu-on",
            &["--gpu-class", "0108"],
            pairs(
                ["0000:25:00.0", "0000:26:00.0"],
                ["0000:27:00.0", "0000:28:00.0"],
            ),
        ),
        (
            "qemu-11.1-vfio-user-gpus",
            &["--no-nvml"],
            pairs(
                ["0000:83:00.0", "0000:84:00.0"],
                ["0000:23:00.0", "0000:24:00.0"],
            ),
        ),
    ];
    for (name, extra, want) in cases {
        let tree = fixture_dir(name).join("sysfs");
        let mut args = extra.to_vec();
        args.extend(["--vm", "a=2", "--vm", "b=2"]);
        let doc = plan_json(tree.to_str().unwrap(), &args);
        for (i, vm) in doc["vms"].as_array().unwrap().iter().enumerate() {
            let got: Vec<&str> = vm["assignments"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a["bdf"].as_str().unwrap())
                .collect();
            assert_eq!(got, want[i], "{name} VM {i}");
            assert_eq!(vm["cliques"].as_array().unwrap().len(), 1, "{name} VM {i}");
        }
        assert_eq!(doc["choices"].as_array().unwrap().len(), 2);
    }
}

#[test]
fn h200x2_both_gpus_with_their_nvlink() {
    // Two H200s, NV18 by the operator map: a request for two takes both.
    let dir = unpack_fixture("h200x2-passthrough-guest");
    let map = fixture_dir("h200x2-passthrough-guest").join("nvlink.json");
    let t = load(&dir.path().join("sysfs"), &GpuSelector::Nvidia, Some(&map));
    let all = gpus(&t, &GpuSelector::Nvidia);
    let c = choose(&t, &GpuSelector::Nvidia, &all, &req(2), None).unwrap();
    assert_eq!(c.gpus, bdfs(&["0000:00:06.0", "0000:00:07.0"]));
    assert_eq!(c.worst_class, PathClass::Nv(Some(18)));
}

#[test]
fn plan_count_and_address_forms_mix() {
    // a takes 23+24 by address; b=2 then gets 83+84 (the other PIX pair).
    let tree = fixture_dir("qemu-11.1-two-socket-iommu-on").join("sysfs");
    let doc = plan_json(
        tree.to_str().unwrap(),
        &[
            "--gpu-class",
            "0108",
            "--vm",
            "a=0000:23:00.0,0000:24:00.0",
            "--vm",
            "b=2",
        ],
    );
    assert_eq!(doc["choices"][0]["vm"], "b");
    assert_eq!(
        doc["choices"][0]["choice"]["gpus"],
        serde_json::json!(["0000:83:00.0", "0000:84:00.0"])
    );
}

#[test]
fn allocate_answers_and_refuses_with_exit_3() {
    let tree = fixture_dir("qemu-11.1-two-socket-iommu-on").join("sysfs");
    let tree = tree.to_str().unwrap();
    let base = ["allocate", "--sysfs-root", tree, "--gpu-class", "0108"];
    let avail = "0000:23:00.0,0000:24:00.0,0000:26:00.0,0000:41:00.0";
    let mut args = base.to_vec();
    args.extend([
        "--available",
        avail,
        "--size",
        "2",
        "--must-include",
        "0000:26:00.0",
    ]);
    let r = run("p2p-host", &args);
    // 26 with 23 or 24 (both PHB); equal on everything else, 23 has the lower address.
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.stdout.lines().next(), Some("0000:23:00.0,0000:26:00.0"));
    for (extra, msg) in [
        (
            ["--available", "0000:23:00.0,0000:99:00.0", "--size", "1"],
            "0000:99:00.0 is not a PCI function",
        ),
        (
            ["--available", "0000:23:00.0", "--size", "2"],
            "2 GPUs asked for, 1 available",
        ),
        (["--available", avail, "--size", "1"], ""),
    ] {
        let mut args = base.to_vec();
        args.extend(extra);
        if msg.is_empty() {
            args.extend(["--must-include", "0000:84:00.0"]);
        }
        let r = run("p2p-host", &args);
        assert_eq!(r.code, Some(3), "{args:?}: {}", r.stderr);
        let want = if msg.is_empty() {
            "0000:84:00.0 must be included but is not available"
        } else {
            msg
        };
        assert!(r.stderr.contains(want), "{}", r.stderr);
    }
}

#[test]
fn fm_partitions_on_the_h200x4_tree() {
    // A partition list in fmpm -l's shape for the four H200s: partition 0 all
    // four, 1 = 06+07, 2 = 08+09. With 2 active (in use), two GPUs can only be
    // partition 1, and four none: partition 0 holds 08 and 09, in use by 2.
    // With nothing active, four is partition 0.
    let dir = unpack_fixture("h200x4-passthrough-guest");
    let map = fixture_dir("h200x4-passthrough-guest").join("nvlink.json");
    let gpu = |slot: u8| {
        serde_json::json!({"physicalId": slot, "uuid": format!("GPU-{slot}"),
            "pciBusId": format!("00000000:00:{slot:02X}.0"), "numNvLinksAvailable": 18,
            "maxNumNvLinks": 18, "nvlinkLineRateMBps": 50000})
    };
    let part = |id: u32, active: u32, slots: &[u8]| {
        serde_json::json!({"partitionId": id, "isActive": active, "numGpus": slots.len(),
            "gpuInfo": slots.iter().map(|s| gpu(*s)).collect::<Vec<_>>()})
    };
    let list = serde_json::json!({"version": 16777240, "numPartitions": 3, "maxNumPartitions": 31,
        "partitionInfo": [part(0, 0, &[6, 7, 8, 9]), part(1, 0, &[6, 7]), part(2, 1, &[8, 9])]});
    let file = dir.path().join("fmpm-l.json");
    std::fs::write(&file, serde_json::to_string_pretty(&list).unwrap()).unwrap();
    let sysfs = dir.path().join("sysfs");
    let base = [
        "allocate",
        "--sysfs-root",
        sysfs.to_str().unwrap(),
        "--nvlink",
        map.to_str().unwrap(),
        "--fm-partitions",
        file.to_str().unwrap(),
        "--available",
        "0000:00:06.0,0000:00:07.0,0000:00:08.0,0000:00:09.0",
        "--json",
    ];
    let answer = |size: &str| {
        let mut args = base.to_vec();
        args.extend(["--size", size]);
        run("p2p-host", &args)
    };
    let r = answer("2");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let doc: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        doc["devices"],
        serde_json::json!(["0000:00:06.0", "0000:00:07.0"])
    );
    assert_eq!(doc["choice"]["fm_partition"], 1);
    let r = answer("4");
    assert_eq!(r.code, Some(3), "{}", r.stdout);
    assert!(
        r.stderr.contains("no Fabric Manager partition of 4 GPUs"),
        "{}",
        r.stderr
    );
    let idle = serde_json::json!({"version": 16777240, "numPartitions": 3, "maxNumPartitions": 31,
        "partitionInfo": [part(0, 0, &[6, 7, 8, 9]), part(1, 0, &[6, 7]), part(2, 0, &[8, 9])]});
    std::fs::write(&file, serde_json::to_string_pretty(&idle).unwrap()).unwrap();
    let r = answer("4");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let doc: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(doc["choice"]["fm_partition"], 0);
    assert_eq!(doc["devices"].as_array().unwrap().len(), 4);
    let mut args = base.to_vec();
    args.extend(["--size", "3"]);
    let r = run("p2p-host", &args);
    assert_eq!(r.code, Some(3));
    assert!(
        r.stderr.contains("no Fabric Manager partition of 3 GPUs"),
        "{}",
        r.stderr
    );
}
