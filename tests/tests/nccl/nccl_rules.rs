//! NCCL's rules on cases derived by hand from NCCL 2.28.3's source
//! (src/graph/paths.cc, topo.cc), the reasoning in a comment per case.
//! Bandwidths in the derivations: a PCIe link is width x per-lane speed / 80
//! GB/s (32 GT/s: 240, so x16 = 48 GB/s); a net is speed / 8000 (400 Gb/s =
//! 50 GB/s); Intel family 6 model 207 (>= 0xCF) joins CPUs at 40 GB/s
//! (ERP_QPI_BW).

use p2p_nccl::{effective, DriverP2p, PathType, Transport, VmFacts, VmFunction, VmNic};
use p2p_tests::nccl_explain::*;

/// A flat guest with no file: both GPUs hang from the CPU, so GPU-CPU-GPU is
/// PHB; NCCL's default level is PXB (Intel), so no P2P and SHM. The variables
/// move it: NCCL_P2P_LEVEL=PHB (or the old number 3) allows PHB; SHM
/// disabled leaves only the network.
#[test]
fn flat_guest_and_the_p2p_variables() {
    let vm = facts(intel(), &["0000:00:06.0", "0000:00:07.0"]);
    let p = run(None, &vm, &env(&[]), DriverP2p::Allowed);
    assert_eq!(
        pair(&p, "0000:00:06.0", "0000:00:07.0"),
        (PathType::Phb, Transport::Shm)
    );
    assert!(p.pairs[0].decided_by.is_empty());
    for level in ["PHB", "3", "SYS"] {
        let p = run(
            None,
            &vm,
            &env(&[("NCCL_P2P_LEVEL", level)]),
            DriverP2p::Allowed,
        );
        assert_eq!(
            pair(&p, "0000:00:06.0", "0000:00:07.0").1,
            Transport::P2p,
            "{level}"
        );
        assert_eq!(
            p.pairs[0].decided_by,
            vec![format!("NCCL_P2P_LEVEL={level} (environment)")]
        );
    }
    // PXB (old 2) keeps PHB out.
    let p = run(
        None,
        &vm,
        &env(&[("NCCL_P2P_LEVEL", "2")]),
        DriverP2p::Allowed,
    );
    assert_eq!(pair(&p, "0000:00:06.0", "0000:00:07.0").1, Transport::Shm);
    let p = run(
        None,
        &vm,
        &env(&[("NCCL_SHM_DISABLE", "1")]),
        DriverP2p::Allowed,
    );
    assert_eq!(pair(&p, "0000:00:06.0", "0000:00:07.0").1, Transport::Net);
}

/// NCCL 2.28 lifts the cutoff to SYS on AMD x86 with at most two GPUs: the
/// flat pair gets P2P there; with three GPUs the default PXB is back.
#[test]
fn amd_rule_depends_on_the_gpu_count() {
    let p = run(
        None,
        &facts(amd(), &["0000:00:06.0", "0000:00:07.0"]),
        &env(&[]),
        DriverP2p::Allowed,
    );
    assert_eq!(pair(&p, "0000:00:06.0", "0000:00:07.0").1, Transport::P2p);
    assert_eq!(p.pairs[0].p2p_level, PathType::Sys);
    assert!(p.pairs[0].decided_by[0].contains("AuthenticAMD with 2 GPU(s)"));
    let p = run(
        None,
        &facts(amd(), &["0000:00:06.0", "0000:00:07.0", "0000:00:08.0"]),
        &env(&[]),
        DriverP2p::Allowed,
    );
    assert_eq!(pair(&p, "0000:00:06.0", "0000:00:07.0").1, Transport::Shm);
    // The file's <cpu vendor> wins over the machine's: an Intel file on an AMD machine.
    let file = r#"<system version="1"><cpu numaid="-1" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="207"/></system>"#;
    let p = run(
        Some(file),
        &facts(amd(), &["0000:00:06.0", "0000:00:07.0"]),
        &env(&[]),
        DriverP2p::Allowed,
    );
    assert_eq!(pair(&p, "0000:00:06.0", "0000:00:07.0").1, Transport::Shm);
}

/// A two-socket mirror: socket 0 has a switch (upstream 10:00.0) with GPUs
/// 11:00.0 and 12:00.0 and NIC mlx5_0 (13:00.0, 400 Gb/s, GDR); socket 1 has
/// GPU 20:00.0 on its own root port and NIC mlx5_1 (21:00.0) likewise.
const TWO_SOCKET: &str = r#"<system version="1">
  <cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="207">
    <pci busid="0000:10:00.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">
      <pci busid="0000:11:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16"/>
      <pci busid="0000:12:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16"/>
      <pci busid="0000:13:00.0" class="0x020000" link_speed="32.0 GT/s PCIe" link_width="16"/>
    </pci>
  </cpu>
  <cpu numaid="1" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="207">
    <pci busid="0000:20:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16"/>
    <pci busid="0000:21:00.0" class="0x020000" link_speed="32.0 GT/s PCIe" link_width="16"/>
  </cpu>
</system>"#;

fn two_socket_vm() -> VmFacts {
    let nic = |name: &str, bus: &str, numa: i32| VmNic {
        name: name.into(),
        function: Some(VmFunction {
            busid: b(bus),
            class: 0x020000,
            numa,
            bridges: Vec::new(),
            link_speed: Some("32.0 GT/s PCIe".into()),
            link_width: Some(16),
        }),
        speed_mbps: 400_000,
        gdr: true,
    };
    VmFacts {
        cpu: intel(),
        gpus: ["0000:11:00.0", "0000:12:00.0", "0000:20:00.0"]
            .iter()
            .map(|g| flat_gpu(g))
            .collect(),
        nics: vec![
            nic("mlx5_0", "0000:13:00.0", 0),
            nic("mlx5_1", "0000:21:00.0", 1),
        ],
        nvlinks: Some(Vec::new()),
    }
}

#[test]
fn two_socket_mirror_pairs_and_nics() {
    let p = run(
        Some(TWO_SOCKET),
        &two_socket_vm(),
        &env(&[]),
        DriverP2p::Allowed,
    );
    // Same switch: PIX <= PXB, P2P.
    assert_eq!(
        pair(&p, "0000:11:00.0", "0000:12:00.0"),
        (PathType::Pix, Transport::P2p)
    );
    // Across sockets: SYS > PXB, SHM.
    assert_eq!(
        pair(&p, "0000:11:00.0", "0000:20:00.0"),
        (PathType::Sys, Transport::Shm)
    );
    let gpu = |bus: &str| p.gpus.iter().find(|g| g.gpu == b(bus)).unwrap();
    // GPU 11:00.0 and mlx5_0 share the switch: PIX, 48 GB/s (the 50 GB/s net
    // is wider than the x16 link), GDR within PXB; reads on too (SM 90 >= 80).
    let g = gpu("0000:11:00.0");
    assert_eq!(
        (g.net.as_deref(), g.path, g.gdr_write, g.gdr_read),
        (Some("mlx5_0"), Some(PathType::Pix), true, true)
    );
    // GPU 20:00.0: mlx5_1 through its CPU is PHB at 48 GB/s; mlx5_0 is SYS at
    // 40 GB/s (the CPU link). Widest first: mlx5_1, and PHB > PXB: no GDR.
    let g = gpu("0000:20:00.0");
    assert_eq!(
        (g.net.as_deref(), g.path, g.gdr_write),
        (Some("mlx5_1"), Some(PathType::Phb), false)
    );
    assert!(
        g.reasons
            .iter()
            .any(|r| r.contains("distance PHB beyond the GDR level PXB")),
        "{:?}",
        g.reasons
    );
    // NCCL_NET_GDR_LEVEL=PHB allows it, and says so.
    let p = run(
        Some(TWO_SOCKET),
        &two_socket_vm(),
        &env(&[("NCCL_NET_GDR_LEVEL", "PHB")]),
        DriverP2p::Allowed,
    );
    let g = p.gpus.iter().find(|g| g.gpu == b("0000:20:00.0")).unwrap();
    assert!(
        g.gdr_write && g.decided_by == vec!["NCCL_NET_GDR_LEVEL=PHB (environment)".to_string()],
        "{g:?}"
    );
    // NCCL_NET_GDR_READ=0: writes stay, reads go.
    let p = run(
        Some(TWO_SOCKET),
        &two_socket_vm(),
        &env(&[("NCCL_NET_GDR_READ", "0")]),
        DriverP2p::Allowed,
    );
    let g = p.gpus.iter().find(|g| g.gpu == b("0000:11:00.0")).unwrap();
    assert_eq!((g.gdr_write, g.gdr_read), (true, false));
    // Without nvidia-peermem the IB plugin reports no GDR: off for all.
    let mut vm = two_socket_vm();
    vm.nics.iter_mut().for_each(|n| n.gdr = false);
    let p = run(Some(TWO_SOCKET), &vm, &env(&[]), DriverP2p::Allowed);
    assert!(p.gpus.iter().all(|g| !g.gdr_write));
}

/// The driver's side: a file puts two PCIe GPUs under one switch (PIX) but
/// the driver refuses peer access (no clique from the hypervisor): NCCL asks
/// NVML, finds P2P disabled and uses SHM. Over NVLink the same refusal stops
/// NCCL unless NCCL_IGNORE_DISABLED_P2P is set.
#[test]
fn driver_refusal_and_nvlink_error() {
    let file = r#"<system version="1"><cpu numaid="-1" arch="x86_64" vendor="GenuineIntel">
      <pci busid="0000:ff:00.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">
        <pci busid="0000:00:06.0" class="0x030200"/><pci busid="0000:00:07.0" class="0x030200"/>
      </pci></cpu></system>"#;
    let vm = facts(intel(), &["0000:00:06.0", "0000:00:07.0"]);
    let p = run(Some(file), &vm, &env(&[]), DriverP2p::Refused);
    assert_eq!(
        pair(&p, "0000:00:06.0", "0000:00:07.0"),
        (PathType::Pix, Transport::Shm)
    );
    assert!(p.pairs[0].topology_allows_p2p);
    let mut nv = vm.clone();
    nv.nvlinks = Some(vec![(b("0000:00:06.0"), b("0000:00:07.0"), 18)]);
    let p = run(None, &nv, &env(&[]), DriverP2p::Refused);
    assert_eq!(
        pair(&p, "0000:00:06.0", "0000:00:07.0"),
        (PathType::Nvl, Transport::Error)
    );
    let p = run(
        None,
        &nv,
        &env(&[("NCCL_IGNORE_DISABLED_P2P", "1")]),
        DriverP2p::Refused,
    );
    assert_eq!(pair(&p, "0000:00:06.0", "0000:00:07.0").1, Transport::Shm);
}

/// A file naming bus ids the VM lacks: NCCL drops those nodes and places the
/// VM's GPUs from sysfs (flat: PHB), as if there were no file.
#[test]
fn file_for_another_vm_is_dropped_and_said() {
    let file = r#"<system version="1"><cpu numaid="-1">
      <pci busid="0000:ff:00.0" class="0x060400"><pci busid="0000:00:08.0" class="0x030200"/><pci busid="0000:00:09.0" class="0x030200"/></pci>
    </cpu></system>"#;
    let vm = facts(intel(), &["0000:00:06.0", "0000:00:07.0"]);
    let eff = effective(Some(&p2p_nccl::parse(file).unwrap()), &vm);
    assert!(
        eff.notes
            .iter()
            .any(|n| n.starts_with("0000:00:08.0: in the file but not a GPU of this VM")),
        "{:?}",
        eff.notes
    );
    assert!(eff
        .notes
        .iter()
        .any(|n| n.starts_with("0000:00:06.0: not in the file: placed from sysfs")));
    let p = run(Some(file), &vm, &env(&[]), DriverP2p::Allowed);
    assert_eq!(
        pair(&p, "0000:00:06.0", "0000:00:07.0"),
        (PathType::Phb, Transport::Shm)
    );
}
