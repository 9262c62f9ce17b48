//! `p2p-host` on sysfs trees that a real Linux kernel built under QEMU
//! (`tests/fixtures/qemu-*`, captured by `scripts/qemu/capture-fixtures.sh`),
//! checked against expectations written from QEMU's command line
//! (`p2p_tests::qemu_expect`), and against what `p2p-host topo --json`
//! printed inside the same guest. No QEMU needed: the trees are committed.

use std::path::{Path, PathBuf};

use p2p_tests::fixture_dir;
use p2p_tests::qemu::{assert_no_errors, compare_guest_and_host, guest_report, scan_capture};
use p2p_tests::qemu_expect::{self, Expect};

/// Every committed QEMU fixture: directory, boot.sh topology, IOMMU on.
const FIXTURES: &[(&str, &str, bool)] = &[
    ("qemu-7.2-two-socket-iommu-on", "two-socket", true),
    ("qemu-7.2-two-socket-iommu-off", "two-socket", false),
    ("qemu-7.2-nested-switch-iommu-on", "nested-switch", true),
    ("qemu-11.1-two-socket-iommu-on", "two-socket", true),
    ("qemu-11.1-two-socket-iommu-off", "two-socket", false),
    ("qemu-11.1-nested-switch-iommu-on", "nested-switch", true),
];

fn dir(name: &str) -> PathBuf {
    let d = fixture_dir(name);
    assert!(
        d.join("sysfs/bus/pci/devices").is_dir(),
        "{} is missing; recapture with scripts/qemu/capture-fixtures.sh",
        d.display()
    );
    d
}

/// Scans the tree, checks it against the table, and checks that the guest's
/// own report agrees with our scan of its snapshot.
fn check_fixture(name: &str, topology: &str, iommu: bool) {
    let d = dir(name);
    let expect: &Expect = qemu_expect::by_name(topology);
    let serials = std::fs::read_to_string(d.join("nvme-serials.txt")).expect("nvme-serials.txt");
    assert_no_errors(
        &format!("{name}: NVMe serials vs the table"),
        &expect.check_serials(&serials),
    );

    let (topo, report) = scan_capture(&d);
    let errs = expect.check(&topo, &report, iommu);
    assert!(
        errs.is_empty(),
        "{name}: {} difference(s) from QEMU's command line:\n  - {}\n\n{}",
        errs.len(),
        errs.join("\n  - "),
        expect.class_table(&report)
    );

    let guest = guest_report(&d);
    assert_eq!(
        guest.sysfs_root, "/sys",
        "{name}: topo.json was printed in the guest"
    );
    assert_no_errors(
        &format!("{name}: guest topo.json vs our scan of the guest's snapshot"),
        &compare_guest_and_host(&guest, &report),
    );
    // And the guest's report meets the expectations by itself.
    assert_no_errors(
        &format!("{name}: guest topo.json vs QEMU's command line"),
        &expect.check(&topo, &guest, iommu),
    );
}

#[test]
fn tables_list_every_pair_once() {
    qemu_expect::TWO_SOCKET.check_table();
    qemu_expect::NESTED_SWITCH.check_table();
}

/// QEMU trees whose expectations live with another test: the vfio-user GPU
/// topology of the injection end-to-end test (tests/tests/guests/e2e_injection.rs),
/// the pcie-costs trees of tests/tests/host/check_pcie_costs.rs, and the fleet's
/// 8-GPU shapes (tests/fleet/tests/fleet/trees.rs, pairs as boot.sh lays them out; the
/// eight-gpu tree also in tests/tests/kubernetes/kube_dra.rs).
const TESTED_ELSEWHERE: [&str; 6] = [
    "qemu-11.1-vfio-user-gpus",
    "qemu-11.1-pcie-costs-iommu-on",
    "qemu-11.1-pcie-costs-iommu-off",
    "qemu-11.1-eight-gpu-iommu-on",
    "qemu-11.1-switch-pairs-iommu-on",
    "qemu-11.1-root-ports-iommu-on",
];

#[test]
fn every_qemu_fixture_is_tested_and_small() {
    let root = p2p_tests::repo_root().join("tests/fixtures");
    let mut found: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("qemu-"))
        .filter(|n| !TESTED_ELSEWHERE.contains(&n.as_str()))
        .collect();
    found.sort();
    let mut listed: Vec<String> = FIXTURES.iter().map(|f| f.0.to_string()).collect();
    listed.sort();
    assert_eq!(found, listed, "tests/fixtures/qemu-* and FIXTURES differ");

    fn bytes(p: &Path) -> u64 {
        let m = std::fs::symlink_metadata(p).unwrap();
        if m.is_dir() {
            std::fs::read_dir(p)
                .unwrap()
                .map(|e| bytes(&e.unwrap().path()))
                .sum()
        } else {
            m.len()
        }
    }
    for (name, _, _) in FIXTURES {
        let n = bytes(&dir(name));
        assert!(
            n < 512 * 1024,
            "{name} holds {n} bytes; keep fixtures well under 1 MB"
        );
    }
}

#[test]
fn qemu_7_2_two_socket_iommu_on() {
    check_fixture("qemu-7.2-two-socket-iommu-on", "two-socket", true);
}

#[test]
fn qemu_7_2_two_socket_iommu_off() {
    check_fixture("qemu-7.2-two-socket-iommu-off", "two-socket", false);
}

#[test]
fn qemu_7_2_nested_switch_iommu_on() {
    check_fixture("qemu-7.2-nested-switch-iommu-on", "nested-switch", true);
}

#[test]
fn qemu_11_1_two_socket_iommu_on() {
    check_fixture("qemu-11.1-two-socket-iommu-on", "two-socket", true);
}

#[test]
fn qemu_11_1_two_socket_iommu_off() {
    check_fixture("qemu-11.1-two-socket-iommu-off", "two-socket", false);
}

#[test]
fn qemu_11_1_nested_switch_iommu_on() {
    check_fixture("qemu-11.1-nested-switch-iommu-on", "nested-switch", true);
}

/// QEMU 7.2 and 11.1 build the same PCI topology from the same command line:
/// the reports (classes, routes, groups, ACS) are identical.
#[test]
fn qemu_7_2_and_11_1_agree() {
    for (a, b) in [
        (
            "qemu-7.2-two-socket-iommu-on",
            "qemu-11.1-two-socket-iommu-on",
        ),
        (
            "qemu-7.2-two-socket-iommu-off",
            "qemu-11.1-two-socket-iommu-off",
        ),
        (
            "qemu-7.2-nested-switch-iommu-on",
            "qemu-11.1-nested-switch-iommu-on",
        ),
    ] {
        let (_, ra) = scan_capture(&dir(a));
        let (_, rb) = scan_capture(&dir(b));
        assert_eq!(ra.links, rb.links, "{a} vs {b}: links");
        assert_eq!(ra.pairs, rb.pairs, "{a} vs {b}: pairs");
        assert_eq!(ra.bridges, rb.bridges, "{a} vs {b}: bridges");
    }
}

/// The IOMMU changes ACS control and groups, never the classes.
#[test]
fn iommu_changes_routing_facts_not_classes() {
    for q in ["7.2", "11.1"] {
        let (_, on) = scan_capture(&dir(&format!("qemu-{q}-two-socket-iommu-on")));
        let (_, off) = scan_capture(&dir(&format!("qemu-{q}-two-socket-iommu-off")));
        assert_eq!(on.links, off.links, "QEMU {q}");
        assert_eq!(on.matrix, off.matrix, "QEMU {q}");
        let routes = |r: &p2p_report::TopoReport| {
            r.pairs.iter().map(|p| p.route.clone()).collect::<Vec<_>>()
        };
        assert_eq!(
            routes(&on),
            routes(&off),
            "QEMU {q}: no ACS redirect below a switch either way"
        );
        assert!(on.pairs.iter().any(|p| p.via_iommu == Some(true)));
        assert!(off.pairs.iter().all(|p| p.via_iommu == Some(false)));
    }
}
