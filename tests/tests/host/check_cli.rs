//! `p2p-host check` on captured trees and on this machine's live /sys, each
//! verdict derived by hand from what the tree holds (its capture.txt and
//! kernel/iommu_groups), not from the code under test.

use std::collections::BTreeMap;

use p2p_tests::{fixture_dir, run, unpack_fixture};
use serde_json::Value;

/// (scope, check) -> verdict of `p2p-host check --json ARGS`, and the exit status.
fn verdicts(args: &[&str]) -> (BTreeMap<(String, String), String>, Option<i32>, Value) {
    let mut all = vec!["check", "--json"];
    all.extend_from_slice(args);
    let r = run("p2p-host", &all);
    let v: Value =
        serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", r.stdout, r.stderr));
    let map = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                (
                    i["scope"].as_str().unwrap().to_string(),
                    i["check"].as_str().unwrap().to_string(),
                ),
                i["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    (map, r.code, v)
}

fn get<'a>(m: &'a BTreeMap<(String, String), String>, scope: &str, check: &str) -> &'a str {
    m.get(&(scope.to_string(), check.to_string()))
        .unwrap_or_else(|| panic!("no {check} for {scope}: {m:?}"))
}

#[test]
fn two_socket_with_iommu_warns_only() {
    let root = fixture_dir("qemu-11.1-two-socket-iommu-on");
    let (m, code, _) = verdicts(&[
        "--sysfs-root",
        root.to_str().unwrap(),
        "--gpu-class",
        "0108",
        "--vm",
        "vm0=0000:23:00.0,0000:24:00.0,0000:26:00.0",
    ]);
    // capture.txt: intel-iommu on, 20 groups; gpu0/gpu1 below switch sw0,
    // gpu2 on its own root port of the same pxb; NVMe stand-ins bound to nvme
    // with a 16 KiB non-prefetchable BAR0; NUMA node 0.
    assert_eq!(get(&m, "host", "iommu"), "pass");
    assert_eq!(
        get(&m, "host", "iommu-mode"),
        "warn",
        "a captured tree has no command line"
    );
    assert_eq!(get(&m, "host", "kvm"), "warn");
    for g in ["16", "17", "19"] {
        assert_eq!(get(&m, &format!("group {g}"), "iommu-group"), "pass");
    }
    for d in ["0000:23:00.0", "0000:24:00.0", "0000:26:00.0"] {
        assert_eq!(get(&m, d, "vfio-binding"), "warn");
        assert_eq!(get(&m, d, "numa"), "pass");
        assert_eq!(get(&m, d, "bars"), "warn");
    }
    assert_eq!(get(&m, "0000:23:00.0 0000:24:00.0", "route"), "pass");
    assert_eq!(get(&m, "0000:23:00.0 0000:26:00.0", "route"), "pass");
    assert_eq!(code, Some(2), "WARNs only: status 2");
}

#[test]
fn no_iommu_fails_and_cross_socket_warns() {
    let root = fixture_dir("qemu-11.1-two-socket-iommu-off");
    let (m, code, _) = verdicts(&[
        "--sysfs-root",
        root.to_str().unwrap(),
        "--gpu-class",
        "0108",
        "--vm",
        "vm0=0000:23:00.0,0000:83:00.0",
        "--vmm",
        "cloud-hypervisor",
    ]);
    assert_eq!(get(&m, "host", "iommu"), "fail");
    // gpu0 on node 0, gpu4 on node 1 (capture.txt): across sockets.
    assert_eq!(get(&m, "0000:23:00.0 0000:83:00.0", "route"), "warn");
    assert_eq!(get(&m, "host", "vmm-peer-mapping"), "warn", "vfio_p2p_dma");
    assert_eq!(code, Some(1));
}

#[test]
fn a_shared_group_fails_with_its_members_named() {
    // nested-switch: group 9 holds switch B's ports and gpu0/gpu1 (25, 26).
    let root = fixture_dir("qemu-11.1-nested-switch-iommu-on");
    let root = root.to_str().unwrap();
    let (m, code, v) = verdicts(&[
        "--sysfs-root",
        root,
        "--gpu-class",
        "0108",
        "--vm",
        "a=0000:25:00.0",
    ]);
    assert_eq!(get(&m, "group 9", "iommu-group"), "fail");
    assert_eq!(code, Some(1));
    let ev = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["scope"] == "group 9")
        .unwrap();
    assert!(
        ev["evidence"].as_str().unwrap().contains("0000:26:00.0"),
        "{ev}"
    );
    let (m, code, _) = verdicts(&[
        "--sysfs-root",
        root,
        "--gpu-class",
        "0108",
        "--vm",
        "a=0000:25:00.0",
        "--vm",
        "b=0000:26:00.0",
    ]);
    assert_eq!(get(&m, "host", "iommu-groups"), "fail");
    assert_eq!(code, Some(1));
}

#[test]
fn the_h200_vm_tree_has_no_iommu_but_nvlink_routes() {
    // Inside the Firecracker VM: no vIOMMU (no groups), GPUs bound to nvidia,
    // 64-bit prefetchable BARs, NVLink by the operator's map.
    let tree = unpack_fixture("h200x2-passthrough-guest");
    let map = fixture_dir("h200x2-passthrough-guest").join("nvlink.json");
    let (m, code, _) = verdicts(&[
        "--sysfs-root",
        tree.path().to_str().unwrap(),
        "--nvlink",
        map.to_str().unwrap(),
    ]);
    assert_eq!(get(&m, "host", "iommu"), "fail");
    assert_eq!(get(&m, "0000:00:06.0", "vfio-binding"), "warn");
    assert_eq!(get(&m, "0000:00:06.0", "bars"), "pass");
    assert_eq!(get(&m, "0000:00:06.0 0000:00:07.0", "route"), "pass");
    assert_eq!(code, Some(1));
}

#[test]
fn the_live_machine_reports_what_it_read() {
    // This machine: a Firecracker VM without GPUs; pick its first function.
    let first = std::fs::read_dir("/sys/bus/pci/devices")
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .min()
        .unwrap();
    let (m, _, v) = verdicts(&["--gpus", &first, "--no-nvml"]);
    let ev = |check: &str| {
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["scope"] == "host" && i["check"] == check)
            .unwrap()["evidence"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap();
    let want_mode = if cmdline.split_whitespace().any(|w| w == "iommu=pt") {
        "pass"
    } else {
        "warn"
    };
    assert_eq!(get(&m, "host", "iommu-mode"), want_mode);
    // The JSON keeps the whole line read; the evidence quotes its IOMMU
    // tokens (this machine has none of them).
    let item = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["scope"] == "host" && i["check"] == "iommu-mode")
        .unwrap();
    assert_eq!(item["input"].as_str(), Some(cmdline.trim()));
    let tokens: Vec<&str> = cmdline
        .split_whitespace()
        .filter(|w| w.starts_with("iommu=") || w.contains("_iommu="))
        .collect();
    if tokens.is_empty() {
        assert!(
            ev("iommu-mode").contains("no iommu=, intel_iommu= or amd_iommu="),
            "{}",
            ev("iommu-mode")
        );
    } else {
        assert!(
            ev("iommu-mode").contains(&tokens.join(" ")),
            "{}",
            ev("iommu-mode")
        );
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert!(ev("peer-bar-mapping").contains(release.trim()));
    // KVM: the verdict follows /dev/kvm.
    let kvm = get(&m, "host", "kvm");
    if std::path::Path::new("/dev/kvm").exists() {
        assert!(ev("kvm").contains("irqfd"), "{}", ev("kvm"));
    } else {
        assert_eq!(kvm, "fail");
    }
}

#[test]
fn a_long_command_line_is_quoted_by_its_iommu_tokens_and_no_line_passes_200_columns() {
    let root = fixture_dir("qemu-11.1-two-socket-iommu-on");
    let cmdline = fixture_dir("cmdlines").join("gpu-host-grub.txt");
    let full = std::fs::read_to_string(&cmdline).unwrap();
    assert!(
        full.len() > 500,
        "the fixture is the long line it claims to be"
    );
    let args = [
        "--sysfs-root",
        root.to_str().unwrap(),
        "--gpu-class",
        "0108",
        "--cmdline-from",
        cmdline.to_str().unwrap(),
    ];
    // The table: every line within 200 columns.
    let mut text_args = vec!["check"];
    text_args.extend_from_slice(&args);
    let r = run("p2p-host", &text_args);
    let widest = r
        .stdout
        .lines()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(0);
    assert!(widest <= 200, "a line of {widest} columns:\n{}", r.stdout);
    // The line holds iommu=pt (by hand: token 8 of the file), so iommu-mode
    // passes, and the evidence quotes the two IOMMU tokens, not the line.
    let (m, _, v) = verdicts(&args);
    assert_eq!(get(&m, "host", "iommu-mode"), "pass");
    let item = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["check"] == "iommu-mode")
        .unwrap();
    let evidence = item["evidence"].as_str().unwrap();
    assert!(evidence.contains("`intel_iommu=on iommu=pt`"), "{evidence}");
    assert!(!evidence.contains("BOOT_IMAGE"), "{evidence}");
    // JSON keeps the whole line.
    assert_eq!(item["input"].as_str(), Some(full.trim()));
    assert!(
        r.stdout.contains("iommu=pt on the kernel command line"),
        "{}",
        r.stdout
    );
}
