//! `p2p-host check`'s throughput items on trees a real guest kernel produced
//! under QEMU 11.1 with the settings set both ways (tests/fixtures/
//! qemu-11.1-pcie-costs-iommu-{on,off}, boot.sh topology `pcie-costs`).
//!
//! Every expectation comes from QEMU's command line (capture.txt) and the PCIe
//! Base Specification's register layout, never from vp2p's output:
//!
//! - `-device virtio-scsi-pci,...,ats=on` gives the function an ATS extended
//!   capability (ID 0x000F, QEMU's pcie_ats_init, control 0 at reset); without
//!   `ats=on` there is none. With `intel-iommu,...,device-iotlb=on` the IOMMU
//!   offers Device-TLBs and QEMU's DMAR table lists all root ports in an ATSR,
//!   so the guest kernel (intel_iommu=on) sets ATS Control bit 15 (Enable);
//!   with no IOMMU nothing enables it.
//! - `pcie-root-port,x-width=W,x-speed=S` writes W and S into the port's Link
//!   Capabilities (bits 9:4, 3:0); an emulated endpoint's Link Capabilities and
//!   Link Status are x1 2.5 GT/s (QEMU's pcie_cap_v1_fill), and a port's Link
//!   Status is the device's, capped by the port's capability
//!   (pcie_sync_bridge_lnk). So QEMU cannot show a link trained narrower than
//!   both ends: the FAIL side of link-width needs one edited register (the
//!   last test).
//! - Placement, from the command line and the guest's bus numbering (pxb0
//!   bus_nr=0x20, pxb1 0x80): rp0a 20:00.0 (x16, 16 GT/s) - switch sw0 21:00.0
//!   up, 22:00.0/22:01.0/22:02.0 down - dev0 23:00.0 (ats=on), dev1 24:00.0
//!   (ats=on), dev2 25:00.0; rp0b 20:01.0 (x4, 8 GT/s) - dev3 26:00.0 (ats=on);
//!   rp1a 80:00.0 (x1, 2.5 GT/s) - dev4 81:00.0 (ats=on); rp1b 80:01.0
//!   (defaults x32, 16 GT/s) - dev5 82:00.0. [`placed_as_on_the_command_line`]
//!   checks this against the kernel's sysfs links.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use p2p_tests::{fixture_dir, run, topo_route_cell};
use serde_json::Value;

const DEV0: &str = "0000:23:00.0";
const DEV1: &str = "0000:24:00.0";
const DEV2: &str = "0000:25:00.0";
const DEV3: &str = "0000:26:00.0";
const DEV4: &str = "0000:81:00.0";
const DEV5: &str = "0000:82:00.0";
const ALL: [&str; 6] = [DEV0, DEV1, DEV2, DEV3, DEV4, DEV5];
/// The functions QEMU was given `ats=on` for.
const WITH_ATS: [&str; 4] = [DEV0, DEV1, DEV3, DEV4];

/// (scope, check) -> (verdict, evidence).
type Items = BTreeMap<(String, String), (String, String)>;

fn tree(iommu: &str) -> PathBuf {
    fixture_dir(&format!("qemu-11.1-pcie-costs-iommu-{iommu}"))
}

/// `check --json` on `root` with the six virtio-scsi functions in one VM.
fn check(root: &Path) -> (Items, Option<i32>) {
    let vm = format!("vm0={}", ALL.join(","));
    let r = run(
        "p2p-host",
        &[
            "check",
            "--json",
            "--sysfs-root",
            root.to_str().unwrap(),
            "--vm",
            &vm,
            "--gpu-class",
            "0100",
        ],
    );
    let v: Value =
        serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", r.stdout, r.stderr));
    let items = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let s = |k: &str| i[k].as_str().unwrap_or_default().to_string();
            ((s("scope"), s("check")), (s("verdict"), s("evidence")))
        })
        .collect();
    (items, r.code)
}

fn get<'a>(m: &'a Items, scope: &str, check: &str) -> &'a (String, String) {
    m.get(&(scope.to_string(), check.to_string()))
        .unwrap_or_else(|| panic!("no {check} for {scope}: {m:#?}"))
}

fn config(root: &Path, bdf: &str) -> Vec<u8> {
    std::fs::read(root.join("sysfs/bus/pci/devices").join(bdf).join("config")).unwrap()
}

fn word(c: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([c[at], c[at + 1]])
}

fn dword(c: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([c[at], c[at + 1], c[at + 2], c[at + 3]])
}

/// The PCI Express capability (ID 0x10): the list starts at the pointer at
/// 0x34, each entry is ID (byte 0) and next pointer (byte 1).
fn pcie_cap(c: &[u8]) -> usize {
    let mut p = usize::from(c[0x34]);
    while p != 0 {
        if c[p] == 0x10 {
            return p;
        }
        p = usize::from(c[p + 1]);
    }
    panic!("no PCI Express capability")
}

/// The extended capability `id`: the list starts at 0x100, each header is
/// ID (bits 15:0), version (19:16) and next offset (31:20).
fn ext_cap(c: &[u8], id: u16) -> Option<usize> {
    let mut p = 0x100;
    while p != 0 && p + 4 <= c.len() {
        let h = dword(c, p);
        if h == 0 {
            return None;
        }
        if h as u16 == id {
            return Some(p);
        }
        p = (h >> 20) as usize;
    }
    None
}

#[test]
fn placed_as_on_the_command_line() {
    // The kernel's device links name the path from the host bridge down:
    // that is where the command line put each device (the header's map).
    let want = [
        (
            DEV0,
            "pci0000:20/0000:20:00.0/0000:21:00.0/0000:22:00.0/0000:23:00.0",
        ),
        (
            DEV1,
            "pci0000:20/0000:20:00.0/0000:21:00.0/0000:22:01.0/0000:24:00.0",
        ),
        (
            DEV2,
            "pci0000:20/0000:20:00.0/0000:21:00.0/0000:22:02.0/0000:25:00.0",
        ),
        (DEV3, "pci0000:20/0000:20:01.0/0000:26:00.0"),
        (DEV4, "pci0000:80/0000:80:00.0/0000:81:00.0"),
        (DEV5, "pci0000:80/0000:80:01.0/0000:82:00.0"),
    ];
    for iommu in ["on", "off"] {
        let root = tree(iommu);
        for (dev, path) in want {
            let l = std::fs::read_link(root.join("sysfs/bus/pci/devices").join(dev)).unwrap();
            assert!(
                l.to_string_lossy().ends_with(path),
                "{iommu}: {dev} -> {l:?}"
            );
        }
    }
}

#[test]
fn the_registers_are_what_qemu_and_the_kernel_set() {
    let (on, off) = (tree("on"), tree("off"));
    for dev in ALL {
        let ats = WITH_ATS.contains(&dev);
        for (root, enabled) in [(&on, ats), (&off, false)] {
            let c = config(root, dev);
            let at = ext_cap(&c, 0x000f);
            assert_eq!(at.is_some(), ats, "{dev}: ATS capability iff ats=on");
            if let Some(at) = at {
                // ATS Control is at +0x06; bit 15 is Enable.
                assert_eq!(word(&c, at + 6) & 0x8000 != 0, enabled, "{dev} {root:?}");
            }
            // Endpoint links: Link Capabilities (+0x0C) and Link Status
            // (+0x12) both x1 (bits 9:4 = 1) and 2.5 GT/s (bits 3:0 = 1).
            let p = pcie_cap(&c);
            assert_eq!(dword(&c, p + 0x0c) & 0x3ff, 0x011, "{dev} LnkCap");
            assert_eq!(word(&c, p + 0x12) & 0x3ff, 0x011, "{dev} LnkSta");
        }
    }
    // Root ports: Link Capabilities from x-width/x-speed (Max Link Speed 1 =
    // 2.5, 3 = 8, 4 = 16 GT/s); Link Status the device's x1 2.5 GT/s.
    for (port, width, speed) in [
        ("0000:20:00.0", 16, 4),
        ("0000:20:01.0", 4, 3),
        ("0000:80:00.0", 1, 1),
        ("0000:80:01.0", 32, 4),
    ] {
        let c = config(&on, port);
        let p = pcie_cap(&c);
        let cap = dword(&c, p + 0x0c);
        assert_eq!(
            ((cap >> 4) & 0x3f, cap & 0xf),
            (width, speed),
            "{port} LnkCap"
        );
        assert_eq!(word(&c, p + 0x12) & 0x3ff, 0x011, "{port} LnkSta");
    }
}

#[test]
fn ats_is_on_where_qemu_offered_it_and_the_iommu_translates() {
    let (m, _) = check(&tree("on"));
    for dev in ALL {
        let (v, e) = get(&m, dev, "ats");
        assert_eq!(v, "pass", "{dev}: {e}");
        if WITH_ATS.contains(&dev) {
            assert!(e.contains("enabled (ATS Control bit 15)"), "{dev}: {e}");
        } else {
            assert!(e.starts_with("no ATS capability (0x000F)"), "{dev}: {e}");
        }
    }
    let (m, _) = check(&tree("off"));
    for dev in WITH_ATS {
        let (v, e) = get(&m, dev, "ats");
        assert_eq!(v, "pass", "{dev}: {e}");
        assert!(
            e.contains("off (ATS Control bit 15 clear); no IOMMU"),
            "{dev}: {e}"
        );
    }
}

#[test]
fn each_pair_takes_the_route_its_ats_and_place_give_it() {
    let (m, code) = check(&tree("on"));
    let pair = |a: &str, b: &str| get(&m, &format!("{a} {b}"), "peer-path").clone();
    // Below switch sw0 (upstream port 21:00.0; xio3130 ports have no ACS):
    // ATS on at both ends, so translated requests turn in the switch.
    let (v, e) = pair(DEV0, DEV1);
    assert_eq!(v, "pass", "{e}");
    assert!(
        e.starts_with("direct through the switch at 0000:21:00.0"),
        "{e}"
    );
    // dev2 has no ATS: its untranslated requests turn in the switch too, with
    // guest I/O addresses decoded as bus addresses.
    for a in [DEV0, DEV1] {
        let (v, e) = pair(a, DEV2);
        assert_eq!(v, "warn", "{e}");
        assert!(
            e.starts_with(
                "turns in the switch at 0000:21:00.0 untranslated (ATS off on 0000:25:00.0"
            ),
            "{e}"
        );
    }
    // Different root ports of one host bridge: the root complex translates.
    for a in [DEV0, DEV1, DEV2] {
        let (v, e) = pair(a, DEV3);
        assert_eq!(v, "pass", "{e}");
        assert!(e.starts_with("through root complex pci0000:20"), "{e}");
    }
    let (v, e) = pair(DEV4, DEV5);
    assert_eq!(
        (v.as_str(), e.starts_with("through root complex pci0000:80")),
        ("pass", true),
        "{e}"
    );
    // pxb0 is on NUMA node 0, pxb1 on node 1: across root complexes.
    let (v, e) = pair(DEV3, DEV4);
    assert_eq!(
        (v.as_str(), e.as_str()),
        ("pass", "across root complexes, translated by the IOMMU")
    );
    // No FAIL anywhere (relaxed ordering and read requests warn): status 2.
    assert_eq!(code, Some(2));

    // Without the IOMMU nothing is translated, whatever ATS says.
    let (m, _) = check(&tree("off"));
    for (i, a) in ALL.iter().enumerate() {
        for b in &ALL[i + 1..] {
            let (v, e) = get(&m, &format!("{a} {b}"), "peer-path");
            assert_eq!(v, "pass", "{e}");
            assert!(e.starts_with("not translated: no IOMMU"), "{e}");
        }
    }
}

#[test]
fn narrowed_root_port_capabilities_are_no_narrowed_link() {
    // rp0b is x4 8 GT/s and rp1a x1 2.5 GT/s, rp0a x16 and rp1b x32 at
    // 16 GT/s, but every device below is an x1 2.5 GT/s endpoint: each link
    // runs at what its narrower, slower end can do, so no item may FAIL or
    // call the link slow.
    let (m, _) = check(&tree("on"));
    for dev in ALL {
        let (v, e) = get(&m, dev, "link-width");
        assert_eq!(v, "pass", "{dev}: {e}");
        let (v, e) = get(&m, dev, "link-speed");
        assert_eq!(
            (v.as_str(), e.as_str()),
            ("pass", "every link at the speed both ends can do"),
            "{dev}"
        );
    }
    assert!(get(&m, DEV3, "link-width")
        .1
        .contains("0000:26:00.0-0000:20:01.0 x1 2.5 GT/s"));
}

#[test]
fn an_endpoint_wider_than_its_narrowed_port_fails_against_the_port() {
    // The FAIL side, which QEMU cannot produce (see the header): on a copy,
    // dev3's Link Capabilities (PCIe capability + 0x0C) claim x8 (bits 9:4 =
    // 8, 0x481); Link Status stays x1. Both ends can do min(x8, rp0b's
    // captured x4) = x4, so the link is x1 of x4, and check exits 1.
    let dir = tempfile::tempdir().unwrap();
    let src = tree("on");
    let ok = Command::new("cp")
        .arg("-a")
        .arg(src.join("sysfs"))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(ok.success());
    let c = config(dir.path(), DEV3);
    let at = pcie_cap(&c) as u64 + 0x0c;
    let p = dir
        .path()
        .join("sysfs/bus/pci/devices")
        .join(DEV3)
        .join("config");
    let mut f = OpenOptions::new().write(true).open(&p).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&0x0000_0481u32.to_le_bytes()).unwrap();
    drop(f);
    let (m, code) = check(dir.path());
    let (v, e) = get(&m, DEV3, "link-width");
    assert_eq!(v, "fail", "{e}");
    assert!(e.contains("0000:26:00.0-0000:20:01.0 x1 of x4"), "{e}");
    assert_eq!(code, Some(1));
    // The untouched x1 endpoints still pass.
    assert_eq!(get(&m, DEV4, "link-width").0, "pass");
}

#[test]
fn topo_names_each_devices_ats_and_the_switch_turns_translation() {
    // `topo --json`: gpus[].ats per function, as QEMU and the kernel set it
    // (the header): enabled on the ats=on functions with the IOMMU on, the
    // capability present but off without it, absent elsewhere.
    for (iommu, with) in [("on", "enabled"), ("off", "disabled")] {
        let root = tree(iommu);
        let r = run(
            "p2p-host",
            &[
                "topo",
                "--json",
                "--sysfs-root",
                root.to_str().unwrap(),
                "--gpu-class",
                "0100",
            ],
        );
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        let v: Value = serde_json::from_str(&r.stdout).unwrap();
        for g in v["gpus"].as_array().unwrap() {
            let bdf = g["bdf"].as_str().unwrap();
            let want = if WITH_ATS.contains(&bdf) {
                with
            } else {
                "absent"
            };
            assert_eq!(g["ats"], want, "{iommu}: {bdf}");
        }
    }
    // The route column, IOMMU on: GPU0 (23:00.0) and GPU1 (24:00.0) turn in
    // the switch with ATS on at both; GPU2 (25:00.0) has none.
    let root = tree("on");
    let r = run(
        "p2p-host",
        &[
            "topo",
            "--sysfs-root",
            root.to_str().unwrap(),
            "--gpu-class",
            "0100",
        ],
    );
    assert_eq!(
        topo_route_cell(&r.stdout, "GPU0-GPU1"),
        "turns in switch at 0000:21:00.0 (below the root complex), ATS on at both (translated at the devices)"
    );
    assert_eq!(
        topo_route_cell(&r.stdout, "GPU0-GPU2"),
        "turns in switch at 0000:21:00.0 (below the root complex), ATS off at GPU2 (untranslated)"
    );
    assert_eq!(
        topo_route_cell(&r.stdout, "GPU0-GPU3"),
        "through root complex pci0000:20"
    );
    // Without the IOMMU nothing is translated: no ATS note.
    let root = tree("off");
    let r = run(
        "p2p-host",
        &[
            "topo",
            "--sysfs-root",
            root.to_str().unwrap(),
            "--gpu-class",
            "0100",
        ],
    );
    assert!(!r.stdout.contains("ATS"), "{}", r.stdout);
}
