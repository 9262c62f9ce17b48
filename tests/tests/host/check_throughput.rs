//! `p2p-host check`'s throughput items (ATS, ACS Direct Translated P2P,
//! relaxed ordering, link width and speed, payload and read request sizes) on
//! the captured nested-switch tree as QEMU set it, and on copies of it with
//! single register bits edited (each edit listed in tests/fixtures/README.md,
//! "Edited copies"). Every expected verdict is derived by hand from the PCIe
//! Base Specification's register layout, cited where the bytes are written.
//!
//! The tree (qemu-11.1-nested-switch-iommu-on, capture.txt): root port
//! 20:00.0 - switch A (21:00.0 up, 22:00.0/22:01.0 down) - switch B (23:00.0
//! up, 24:00.0/24:01.0 down) - gpu0 25:00.0 and gpu1 26:00.0; gpu2 27:00.0
//! on switch A's 22:01.0. IOMMU on. The NVMe stand-ins' PCI Express
//! capability is at 0x80 (pointer chain from 0x34); the switch ports' extended
//! list holds AER alone at 0x100.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::process::Command;

use p2p_tests::{fixture_dir, run};
use serde_json::Value;

const GPU0: &str = "0000:25:00.0";
const GPU1: &str = "0000:26:00.0";
const GPU2: &str = "0000:27:00.0";
const VM: &str = "vm0=0000:25:00.0,0000:26:00.0,0000:27:00.0";

/// (scope, check) -> (verdict, evidence, fix) and the exit status.
type Items = BTreeMap<(String, String), (String, String, String)>;

fn check(root: &Path, vm: &str) -> (Items, Option<i32>) {
    check_class(root, vm, Some("0108"))
}

/// [`check`] selecting GPUs by class code `class` (None: NVIDIA's GPUs, the default).
fn check_class(root: &Path, vm: &str, class: Option<&str>) -> (Items, Option<i32>) {
    let mut args = vec![
        "check",
        "--json",
        "--sysfs-root",
        root.to_str().unwrap(),
        "--vm",
        vm,
    ];
    if let Some(c) = class {
        args.extend(["--gpu-class", c]);
    }
    let r = run("p2p-host", &args);
    let v: Value =
        serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", r.stdout, r.stderr));
    let items = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let s = |k: &str| i[k].as_str().unwrap_or_default().to_string();
            (
                (s("scope"), s("check")),
                (s("verdict"), s("evidence"), s("fix")),
            )
        })
        .collect();
    (items, r.code)
}

fn get<'a>(m: &'a Items, scope: &str, check: &str) -> &'a (String, String, String) {
    m.get(&(scope.to_string(), check.to_string()))
        .unwrap_or_else(|| panic!("no {check} for {scope}: {m:#?}"))
}

fn verdict<'a>(m: &'a Items, scope: &str, check: &str) -> &'a str {
    &get(m, scope, check).0
}

/// A copy of the captured tree (symlinks kept) to edit.
fn copy_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = fixture_dir("qemu-11.1-nested-switch-iommu-on").join("sysfs");
    let ok = Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(dir.path())
        .status()
        .unwrap()
        .success();
    assert!(ok, "cp -a {}", src.display());
    dir
}

/// Writes `bytes` (little-endian, as config space is) at `offset` of `bdf`'s config.
fn poke(tree: &Path, bdf: &str, offset: u64, bytes: &[u8]) {
    let p = tree.join("sysfs/bus/pci/devices").join(bdf).join("config");
    let mut f = OpenOptions::new().write(true).open(&p).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(bytes).unwrap();
}

/// The edits of "Edited copies" 1-6: relaxed ordering, read request and
/// payload sizes, ATS, a narrowed and a slow link.
fn edit_endpoints(tree: &Path) {
    // Device Control = PCIe cap 0x80 + 0x08 = 0x88. gpu0: 0x5010 = bit 4
    // (Enable Relaxed Ordering) and bits 14:12 = 5 (Max_Read_Request_Size
    // 4096 B); bits 7:5 stay 0 (Max_Payload_Size 128 B).
    poke(tree, GPU0, 0x88, &0x5010u16.to_le_bytes());
    // gpu1: 0x0030 = bit 4 (RO) and bits 7:5 = 1 (Max_Payload_Size 256 B),
    // larger than every other function's 128 B on its path.
    poke(tree, GPU1, 0x88, &0x0030u16.to_le_bytes());
    // ATS extended capability at 0x100 (the NVMe's extended list is empty):
    // header = ID 0x000F (bits 15:0), version 1 (bits 19:16), next 0
    // (bits 31:20); ATS Capability +4 = 0; ATS Control +6 bit 15 = Enable.
    for (gpu, control) in [(GPU0, 0x8000u16), (GPU1, 0x8000), (GPU2, 0x0000)] {
        poke(tree, gpu, 0x100, &0x0001_000fu32.to_le_bytes());
        poke(tree, gpu, 0x104, &0u16.to_le_bytes());
        poke(tree, gpu, 0x106, &control.to_le_bytes());
    }
    // Link Capabilities = cap + 0x0C = 0x8C, captured 0x411 (ASPM bits 11:10
    // = 1, Maximum Link Width bits 9:4 = 1, Max Link Speed bits 3:0 = 1).
    // gpu2: width 4 (0x441); Link Status (0x92) still says x1: narrowed.
    poke(tree, GPU2, 0x8c, &0x0000_0441u32.to_le_bytes());
    // gpu0: Max Link Speed 4 = 16 GT/s (0x414); Link Status speed 1 = 2.5 GT/s:
    // slower than both ends can do, as an idle GPU is.
    poke(tree, GPU0, 0x8c, &0x0000_0414u32.to_le_bytes());
}

/// Edit 7: ACS on switch B's downstream ports 24:00.0 and 24:01.0, the
/// ports just below where gpu0 and gpu1 meet. Their AER header at 0x100
/// (0x00020001) gets next = 0x148 (bits 31:20); at 0x148 an ACS header (ID
/// 0x000D, version 1), ACS Capability +4 = 0x5F (SV, TB, RR, CR, UF, DT) and
/// ACS Control +6 = `controls` (0x1D: SV bit 0, RR bit 2, CR bit 3, UF bit 4;
/// 0x5D adds Direct Translated P2P, bit 6).
fn edit_acs(tree: &Path, controls: [u16; 2]) {
    for (port, control) in ["0000:24:00.0", "0000:24:01.0"].into_iter().zip(controls) {
        poke(tree, port, 0x100, &0x1482_0001u32.to_le_bytes());
        poke(tree, port, 0x148, &0x0001_000du32.to_le_bytes());
        poke(tree, port, 0x14c, &0x005fu16.to_le_bytes());
        poke(tree, port, 0x14e, &control.to_le_bytes());
    }
}

#[test]
fn the_captured_tree_costs_relaxed_ordering_read_requests_and_untranslated_switching() {
    let root = fixture_dir("qemu-11.1-nested-switch-iommu-on");
    let (m, _) = check(&root, VM);
    for gpu in [GPU0, GPU1, GPU2] {
        // Device Control (0x88) reads 0x0000: bit 4 clear, bits 14:12 = 0 (128 B).
        assert_eq!(verdict(&m, gpu, "relaxed-ordering"), "warn");
        assert!(get(&m, gpu, "relaxed-ordering")
            .2
            .contains(&format!("setpci -s {gpu} CAP_EXP+8.w=0010:0010")));
        assert!(get(&m, gpu, "relaxed-ordering")
            .2
            .contains("NCCL_IB_PCI_RELAXED_ORDERING=1"));
        assert_eq!(verdict(&m, gpu, "max-read-request"), "warn");
        // 0x100 reads 0: no extended capability, so no ATS (0x000F).
        assert_eq!(verdict(&m, gpu, "ats"), "pass");
        // Link Status (0x92) 0x0011 = 2.5 GT/s x1; Link Capabilities 0x411 =
        // 2.5 GT/s x1; root port 20:00.0 can do x32 but switch A's upstream
        // port only x1, so x1 is all that link can train to.
        assert_eq!(verdict(&m, gpu, "link-width"), "pass");
        assert_eq!(verdict(&m, gpu, "link-speed"), "pass");
    }
    // Every function on the path has Device Control bits 7:5 = 0: 128 B.
    assert_eq!(
        verdict(&m, &format!("{GPU0} {GPU1}"), "max-payload"),
        "pass"
    );
    // Switch B's ports have no ACS, the NVMes no ATS, the IOMMU is on.
    let (v, e, _) = get(&m, &format!("{GPU0} {GPU1}"), "peer-path");
    assert_eq!(v, "warn");
    assert!(e.contains("untranslated"), "{e}");
}

#[test]
fn edited_bits_turn_each_item_both_ways() {
    let tree = copy_tree();
    edit_endpoints(tree.path());
    let (m, code) = check(&tree.path().join("sysfs"), VM);
    assert_eq!(verdict(&m, GPU0, "relaxed-ordering"), "pass");
    assert_eq!(verdict(&m, GPU0, "max-read-request"), "pass");
    assert_eq!(verdict(&m, GPU1, "relaxed-ordering"), "pass");
    assert_eq!(
        verdict(&m, GPU1, "max-read-request"),
        "warn",
        "bits 14:12 = 0"
    );
    assert_eq!(verdict(&m, GPU2, "relaxed-ordering"), "warn", "untouched");
    // 256 B at gpu1, 128 B at every bridge and gpu0: capped at 128.
    let (v, e, fix) = get(&m, &format!("{GPU0} {GPU1}"), "max-payload");
    assert_eq!(v, "warn");
    assert!(e.contains("capped at 128 B"), "{e}");
    assert!(fix.contains("pci=pcie_bus_safe"), "{fix}");
    // ATS Control bit 15 set on gpu0 and gpu1, clear on gpu2.
    assert_eq!(verdict(&m, GPU0, "ats"), "pass");
    assert_eq!(verdict(&m, GPU2, "ats"), "warn");
    // No ACS on switch B: the pair turns there, translated by ATS.
    let (v, e, _) = get(&m, &format!("{GPU0} {GPU1}"), "peer-path");
    assert_eq!(v, "pass");
    assert!(
        e.starts_with("direct through the switch at 0000:23:00.0"),
        "{e}"
    );
    assert_eq!(
        verdict(&m, &format!("{GPU0} {GPU2}"), "peer-path"),
        "warn",
        "ATS off on gpu2"
    );
    // gpu2: x4 capable, x1 trained, the port above reads no width: narrowed.
    assert_eq!(verdict(&m, GPU2, "link-width"), "fail");
    assert_eq!(code, Some(1));
    // gpu0: 16 GT/s capable, 2.5 trained: idle, not failed.
    let (v, e, fix) = get(&m, GPU0, "link-speed");
    assert_eq!(v, "pass");
    assert!(e.contains("16 GT/s"), "{e}");
    assert!(fix.starts_with("check under load"), "{fix}");
}

#[test]
fn acs_redirect_sends_the_pair_up_unless_direct_translated_is_on() {
    let tree = copy_tree();
    edit_endpoints(tree.path());
    // DT on 24:00.0 (gpu0's port) only.
    edit_acs(tree.path(), [0x5d, 0x1d]);
    let (m, _) = check(&tree.path().join("sysfs"), VM);
    let (v, e, fix) = get(&m, &format!("{GPU0} {GPU1}"), "peer-path");
    assert_eq!(v, "warn");
    assert!(e.starts_with("up to the root complex"), "{e}");
    assert!(e.contains("off on 0000:24:01.0"), "{e}");
    assert_eq!(fix, "setpci -s 0000:24:01.0 ECAP_ACS+6.w=0040:0040");
    // DT on both: ATS-translated requests go direct.
    edit_acs(tree.path(), [0x5d, 0x5d]);
    let (m, _) = check(&tree.path().join("sysfs"), VM);
    let (v, e, _) = get(&m, &format!("{GPU0} {GPU1}"), "peer-path");
    assert_eq!(v, "pass");
    assert!(e.contains("Direct Translated P2P"), "{e}");
}

#[test]
fn without_an_iommu_nothing_is_translated() {
    // capture.txt: no IOMMU, no groups; gpu0 and gpu1 below switch sw0.
    let root = fixture_dir("qemu-11.1-two-socket-iommu-off");
    let (m, _) = check(&root, "vm0=0000:23:00.0,0000:24:00.0");
    let (v, e, _) = get(&m, "0000:23:00.0 0000:24:00.0", "peer-path");
    assert_eq!(v, "pass");
    assert!(e.starts_with("not translated"), "{e}");
}

#[test]
fn topo_route_column_tells_direct_translated_apart() {
    let tree = copy_tree();
    let sysfs = tree.path().join("sysfs");
    let topo = || {
        let r = run(
            "p2p-host",
            &[
                "topo",
                "--sysfs-root",
                sysfs.to_str().unwrap(),
                "--gpu-class",
                "0108",
            ],
        );
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        r.stdout
    };
    // Edit 7 with ACS Control 0x1d: P2P Request Redirect (bit 2) on, Direct
    // Translated P2P (bit 6) off on both ports below 23:00.0.
    edit_acs(tree.path(), [0x1d, 0x1d]);
    let out = topo();
    assert!(
        out.contains("ACS ReqRedir on 0000:24:00.0,0000:24:01.0"),
        "{out}"
    );
    assert!(out.contains("(DirectTrans off)"), "{out}");
    // 0x5d: bit 6 on as well.
    edit_acs(tree.path(), [0x5d, 0x5d]);
    let out = topo();
    // The captured NVMe stand-ins have no ATS (empty extended list): with DT
    // on, their requests still go up to be translated.
    assert_eq!(
        p2p_tests::topo_route_cell(&out, "GPU0-GPU1"),
        "meets at 0000:23:00.0, ACS ReqRedir+DirectTrans on 0000:24:00.0,0000:24:01.0; ATS off at GPU0,GPU1: up to the root complex"
    );
    // Edit 3 (in edit_endpoints): ATS Control bit 15 on at gpu0 and gpu1.
    edit_endpoints(tree.path());
    let out = topo();
    assert_eq!(
        p2p_tests::topo_route_cell(&out, "GPU0-GPU1"),
        "meets at 0000:23:00.0, ACS ReqRedir+DirectTrans on 0000:24:00.0,0000:24:01.0; ATS on at both: direct"
    );
}

#[test]
fn real_h200s_pass_every_register_check() {
    // The two H200s of the Firecracker passthrough VM (real config spaces):
    // PCI Express capability at 0x60; Device Control (0x68) = 0x5134: bit 4
    // (RO) on, bits 7:5 = 1 (256 B), bits 14:12 = 5 (4096 B); Link Status
    // (0x72) and Link Capabilities (0x6c) both 32 GT/s x16. The flat guest
    // bus has no bridge and no IOMMU.
    let tree = p2p_tests::unpack_fixture("h200x2-passthrough-guest");
    let (m, _) = check_class(
        &tree.path().join("sysfs"),
        "vm0=0000:00:06.0,0000:00:07.0",
        None,
    );
    for gpu in ["0000:00:06.0", "0000:00:07.0"] {
        for c in [
            "relaxed-ordering",
            "max-read-request",
            "link-width",
            "link-speed",
            "ats",
        ] {
            assert_eq!(verdict(&m, gpu, c), "pass", "{gpu} {c}");
        }
        assert_eq!(get(&m, gpu, "link-speed").2, "", "no fix: at full speed");
    }
    let pair = "0000:00:06.0 0000:00:07.0";
    let (v, e, _) = get(&m, pair, "max-payload");
    assert_eq!(v, "pass");
    assert!(e.starts_with("256 B on all 2 functions"), "{e}");
    assert!(get(&m, pair, "peer-path").1.starts_with("not translated"));
}

#[test]
fn an_rdma_nic_gets_its_own_items_and_a_gpudirect_path() {
    // The two-socket tree's e1000e (25:00.0, below switch sw0's 22:02.0) with
    // an `infiniband/rxe0` entry added in a copy, as plan_mirror.rs does:
    // an RDMA NIC. gpu0 (23:00.0) sits below the same switch (22:00.0).
    let dir = tempfile::tempdir().unwrap();
    let src = fixture_dir("qemu-11.1-two-socket-iommu-on").join("sysfs");
    assert!(Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(dir.path())
        .status()
        .unwrap()
        .success());
    let nic = dir
        .path()
        .join("sysfs/devices/pci0000:20/0000:20:00.0/0000:21:00.0/0000:22:02.0/0000:25:00.0");
    std::fs::create_dir_all(nic.join("infiniband/rxe0")).unwrap();
    let (m, _) = check(&dir.path().join("sysfs"), "vm0=0000:23:00.0,0000:25:00.0");
    // The e1000e's PCI Express capability is at 0xe0; Device Control (0xe8)
    // reads 0: RO off (bit 4), 128 B read requests (bits 14:12 = 0). Its
    // extended list holds AER (0x100) and the serial number (0x140): no ATS.
    let (v, _, fix) = get(&m, "0000:25:00.0", "relaxed-ordering");
    assert_eq!(v, "warn");
    assert!(fix.ends_with("; NCCL_IB_PCI_RELAXED_ORDERING=1"), "{fix}");
    assert_eq!(verdict(&m, "0000:25:00.0", "max-read-request"), "warn");
    assert_eq!(verdict(&m, "0000:25:00.0", "ats"), "pass");
    // NIC and GPU meet in switch sw0 (21:00.0), whose ports have no ACS,
    // and neither has ATS, with the IOMMU on: untranslated in the switch.
    let (v, e, _) = get(&m, "0000:23:00.0 0000:25:00.0", "gpudirect-path");
    assert_eq!(v, "warn");
    assert!(
        e.starts_with("turns in the switch at 0000:21:00.0 untranslated"),
        "{e}"
    );
    assert!(!m.contains_key(&("0000:23:00.0 0000:25:00.0".into(), "peer-path".into())));
}

#[test]
fn a_port_without_direct_translated_capability_is_named() {
    let tree = copy_tree();
    edit_endpoints(tree.path());
    edit_acs(tree.path(), [0x5d, 0x1d]);
    // ACS Capability (+4) of 24:01.0 to 0x1f: bit 6 (Direct Translated P2P) clear.
    poke(tree.path(), "0000:24:01.0", 0x14c, &0x001fu16.to_le_bytes());
    let (m, _) = check(&tree.path().join("sysfs"), VM);
    let (v, _, fix) = get(&m, &format!("{GPU0} {GPU1}"), "peer-path");
    assert_eq!(v, "warn");
    assert!(
        fix.starts_with("0000:24:01.0 cannot do DT (ACS Capability bit 6 clear)"),
        "{fix}"
    );
}

#[test]
fn a_truncated_config_read_says_the_registers_are_unknown() {
    // What a non-root reader gets: the 64-byte header. The PCI Express
    // capability (0x80) lies past it, so Device Control cannot be read.
    let tree = copy_tree();
    let p = tree
        .path()
        .join("sysfs/bus/pci/devices")
        .join(GPU2)
        .join("config");
    let head = std::fs::read(&p).unwrap()[..64].to_vec();
    std::fs::write(&p, head).unwrap();
    let (m, _) = check(&tree.path().join("sysfs"), VM);
    assert_eq!(verdict(&m, GPU2, "ats"), "warn", "extended space not read");
    let (v, e, fix) = get(&m, GPU2, "pcie-registers");
    assert_eq!(v, "warn");
    assert!(e.contains("64 bytes"), "{e}");
    assert!(fix.starts_with("run as root"), "{fix}");
    assert!(!m.contains_key(&(GPU2.into(), "relaxed-ordering".into())));
}
