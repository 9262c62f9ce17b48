//! `bench`'s per-pair route as the guest knows it, from `probe` on the
//! vfio-user tree (the H200's config as a QEMU guest saw it), as captured
//! and with ATS made visible and enabled on two GPUs in a copy.

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use p2p_guest::bench::route_of;
use p2p_guest::probe::{probe, ProbeOptions};
use p2p_shared::Bdf;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/qemu-11.1-vfio-user-gpus")
}

fn route(root: &Path, a: &str, b: &str) -> String {
    let (report, _) = probe(root, &ProbeOptions { use_driver: false }).unwrap();
    route_of(&report, a.parse::<Bdf>().unwrap(), b.parse().unwrap())
}

#[test]
fn ats_visible_and_on_at_both_gpus_makes_the_route_pcie_ats() {
    // As captured: the extended header at 0x100 reads ID 0 (hidden), so
    // the guest sees no ATS: `pcie`.
    assert_eq!(route(&fixture(), "0000:23:00.0", "0000:24:00.0"), "pcie");

    let dir = std::env::temp_dir().join(format!("vp2p-bench-route-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    assert!(Command::new("cp")
        .arg("-a")
        .arg(fixture().join("sysfs"))
        .arg(&dir)
        .status()
        .unwrap()
        .success());
    for gpu in ["0000:23:00.0", "0000:24:00.0"] {
        let p = dir.join("sysfs/bus/pci/devices").join(gpu).join("config");
        let mut f = OpenOptions::new().write(true).open(&p).unwrap();
        // 0x100: ID 0x000F (ATS, bits 15:0), version 1 (bits 19:16), next
        // 0x12c kept (bits 31:20); ATS Control (+6) bit 15, Enable.
        f.seek(SeekFrom::Start(0x100)).unwrap();
        f.write_all(&0x12c1_000fu32.to_le_bytes()).unwrap();
        f.seek(SeekFrom::Start(0x106)).unwrap();
        f.write_all(&0x8000u16.to_le_bytes()).unwrap();
    }
    let root = dir.join("sysfs");
    assert_eq!(route(&root, "0000:23:00.0", "0000:24:00.0"), "pcie-ats");
    // 25:00.0 kept its hidden header: one side without ATS is `pcie`.
    assert_eq!(route(&root, "0000:23:00.0", "0000:25:00.0"), "pcie");
    std::fs::remove_dir_all(&dir).unwrap();
}
