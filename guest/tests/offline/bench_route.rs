//! `bench`'s per-pair route as the guest knows it, from `probe` on the
//! vfio-user tree (the H200's config as a QEMU guest saw it), as captured
//! and with ATS made visible and enabled on two GPUs in a copy.

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use p2p_guest::bench::host_plan::HostRoutes;
use p2p_guest::bench::{route_of, route_with_host};
use p2p_guest::probe::{probe, ProbeOptions};
use p2p_topology::Bdf;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/qemu-11.1-vfio-user-gpus")
}

fn route(root: &Path, a: &str, b: &str) -> String {
    let (report, _) = probe(
        root,
        &ProbeOptions {
            use_driver: false,
            gpu_class: None,
        },
    )
    .unwrap();
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

#[test]
fn a_host_plan_names_the_host_route_after_the_guest_one() {
    // The pcie-costs tree as the guest sees it (no NVIDIA GPU: the guest
    // alone says `pcie`), and the host plan recorded from the same tree
    // (tests/fixtures/host-plans/pcie-costs-mirror.json): 23:00.0 and
    // 24:00.0 meet in switch 21:00.0, 26:00.0 is on another root port of
    // pxb0, pxb1's 81:00.0 is guest 31:00.0 in that mirrored layout.
    let tree = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/qemu-11.1-pcie-costs-iommu-on");
    let plan = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/host-plans/pcie-costs-mirror.json");
    let (report, _) = probe(
        &tree,
        &ProbeOptions {
            use_driver: false,
            gpu_class: None,
        },
    )
    .unwrap();
    let host = HostRoutes::load(&plan, None).unwrap();
    let r = |a: &str, b: &str, h: Option<&HostRoutes>| {
        route_with_host(&report, h, a.parse::<Bdf>().unwrap(), b.parse().unwrap())
    };
    assert_eq!(r("0000:23:00.0", "0000:24:00.0", None), "pcie");
    assert_eq!(
        r("0000:23:00.0", "0000:24:00.0", Some(&host)),
        "pcie-switch"
    );
    assert_eq!(
        r("0000:26:00.0", "0000:23:00.0", Some(&host)),
        "pcie-root-complex"
    );
    assert_eq!(
        r("0000:26:00.0", "0000:31:00.0", Some(&host)),
        "pcie-sockets"
    );
    // A pair the plan does not hold keeps the guest's own route.
    assert_eq!(r("0000:23:00.0", "0000:81:00.0", Some(&host)), "pcie");
}
