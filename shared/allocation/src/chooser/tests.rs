//! Unit tests on hand-built topologies: one host bridge with two switches.

use super::*;
use p2p_test_support::topologies::function;
use p2p_topology::classify::PathClass;
use p2p_topology::pci::PciePortType;
use p2p_topology::topology::{HostBridge, PciFunction};

/// A function of `class` on host bridge pci0000:00 (NUMA 0).
fn func(
    bdf: &str,
    parent: Option<&str>,
    class: u32,
    port: Option<PciePortType>,
    group: Option<u32>,
) -> PciFunction {
    let mut f = function(b(bdf), "pci0000:00", parent.map(b), class, port);
    f.iommu_group = group.map(IommuGroup);
    f.numa_node = Some(0);
    f
}

/// Root port 00:01.0 -> switch A (up 01:00.0, downs 02:00..02.0) with GPUs
/// 03, 04, 05; root port 00:02.0 -> switch B (up 10:00.0, downs 11:00,01) with
/// GPUs 12 and 13. GPU 12 shares IOMMU group 40 with its audio function 12:00.1.
fn two_switches() -> Topology {
    use PciePortType::*;
    let gpu = 0x030200;
    let br = 0x060400;
    let mut fs = vec![
        func("00:01.0", None, br, Some(RootPort), Some(1)),
        func(
            "01:00.0",
            Some("00:01.0"),
            br,
            Some(SwitchUpstream),
            Some(2),
        ),
        func("00:02.0", None, br, Some(RootPort), Some(3)),
        func(
            "10:00.0",
            Some("00:02.0"),
            br,
            Some(SwitchUpstream),
            Some(4),
        ),
    ];
    for (i, bus) in [3u8, 4, 5].iter().enumerate() {
        let down = format!("02:{i:02x}.0");
        fs.push(func(
            &down,
            Some("01:00.0"),
            br,
            Some(SwitchDownstream),
            Some(10 + i as u32),
        ));
        fs.push(func(
            &format!("{bus:02x}:00.0"),
            Some(&down),
            gpu,
            Some(Endpoint),
            Some(20 + i as u32),
        ));
    }
    for (i, bus) in [0x12u8, 0x13].iter().enumerate() {
        let down = format!("11:{i:02x}.0");
        fs.push(func(
            &down,
            Some("10:00.0"),
            br,
            Some(SwitchDownstream),
            Some(30 + i as u32),
        ));
        fs.push(func(
            &format!("{bus:02x}:00.0"),
            Some(&down),
            gpu,
            Some(Endpoint),
            Some(40 + i as u32),
        ));
    }
    let mut audio = func(
        "12:00.1",
        Some("11:00.0"),
        0x040300,
        Some(PciePortType::Endpoint),
        Some(40),
    );
    audio.device = 0x22a3;
    fs.push(audio);
    let mut t = Topology {
        host_bridges: vec![HostBridge {
            name: "pci0000:00".into(),
            domain: 0,
            bus: 0,
            numa_node: Some(0),
        }],
        functions: fs,
        ..Topology::default()
    };
    t.sort();
    t
}

fn b(s: &str) -> Bdf {
    s.parse().unwrap()
}

fn all_gpus(t: &Topology) -> Vec<Bdf> {
    t.functions
        .iter()
        .filter(|f| GpuSelector::Nvidia.role(f) == Role::Gpu)
        .map(|f| f.bdf)
        .collect()
}

fn req(n: usize) -> Request {
    Request {
        gpus: n,
        nics: 0,
        must_include: Vec::new(),
        max_level: MaxLevel::new(PathClass::Pix).unwrap(),
        strict: false,
    }
}

#[test]
fn a_pair_comes_from_the_smaller_switch_to_keep_the_larger_whole() {
    // Both switches hold a PIX pair. Taking 12+13 leaves switch A's three GPUs
    // one block of 3; taking two of A leaves blocks of 2 and 1. So 12, 13,
    // with 12's audio function (same group 40) as a companion.
    let t = two_switches();
    let c = choose(&t, &GpuSelector::Nvidia, &all_gpus(&t), &req(2), None).unwrap();
    assert_eq!(c.gpus, vec![b("12:00.0"), b("13:00.0")]);
    assert!(c.one_clique);
    assert_eq!(c.worst_class, PathClass::Pix);
    assert_eq!(c.largest_free_block, 3);
    let comp: Vec<_> = c
        .devices
        .iter()
        .filter(|d| d.role == ChosenRole::Companion)
        .map(|d| d.bdf)
        .collect();
    assert_eq!(comp, vec![b("12:00.1")]);
    assert!(
        c.considered[0].why_not.contains("largest free block of 2"),
        "{:?}",
        c.considered
    );
}

#[test]
fn three_come_from_switch_a_and_four_split_only_when_not_strict() {
    let t = two_switches();
    let c = choose(&t, &GpuSelector::Nvidia, &all_gpus(&t), &req(3), None).unwrap();
    assert_eq!(c.gpus, vec![b("03:00.0"), b("04:00.0"), b("05:00.0")]);
    // Four at PIX: no clique that large (3 is the largest); the nearest set
    // is A's three plus one of B (PHB), lowest address 12.
    let c = choose(&t, &GpuSelector::Nvidia, &all_gpus(&t), &req(4), None).unwrap();
    assert!(!c.one_clique);
    assert_eq!(c.worst_class, PathClass::Phb);
    let mut strict = req(4);
    strict.strict = true;
    let e = choose(&t, &GpuSelector::Nvidia, &all_gpus(&t), &strict, None).unwrap_err();
    assert_eq!(
        e,
        ChooseError::NotOneClique {
            wanted: 4,
            level: strict.max_level,
            largest: 3
        }
    );
}

#[test]
fn must_include_and_bad_input() {
    let t = two_switches();
    let gpus = all_gpus(&t);
    let mut r = req(2);
    r.must_include = vec![b("05:00.0")];
    let c = choose(&t, &GpuSelector::Nvidia, &gpus, &r, None).unwrap();
    assert_eq!(c.gpus, vec![b("03:00.0"), b("05:00.0")]);
    assert_eq!(
        choose(&t, &GpuSelector::Nvidia, &gpus, &req(9), None).unwrap_err(),
        ChooseError::TooLarge {
            wanted: 9,
            available: 5
        }
    );
    assert_eq!(
        choose(&t, &GpuSelector::Nvidia, &[b("7f:00.0")], &req(1), None).unwrap_err(),
        ChooseError::UnknownDevice(b("7f:00.0"))
    );
    r.must_include = vec![b("05:00.0")];
    assert_eq!(
        choose(&t, &GpuSelector::Nvidia, &gpus[..2], &r, None).unwrap_err(),
        ChooseError::MustIncludeNotAvailable(b("05:00.0"))
    );
    assert_eq!(
        choose(&t, &GpuSelector::Nvidia, &gpus, &req(0), None).unwrap_err(),
        ChooseError::ZeroSize
    );
}

#[test]
fn fm_partitions_restrict_to_whole_free_partitions() {
    let text = r#"{
   "maxNumPartitions" : 31, "numPartitions" : 2, "version" : 16777240,
   "partitionInfo" : [
      { "partitionId" : 0, "isActive" : 1, "numGpus" : 2, "gpuInfo" : [
          { "physicalId" : 1, "pciBusId" : "00000000:03:00.0", "uuid" : "GPU-a", "maxNumNvLinks" : 18, "numNvLinksAvailable" : 18, "nvlinkLineRateMBps" : 50000 },
          { "physicalId" : 2, "pciBusId" : "00000000:04:00.0", "uuid" : "GPU-b", "maxNumNvLinks" : 18, "numNvLinksAvailable" : 18, "nvlinkLineRateMBps" : 50000 } ] },
      { "partitionId" : 5, "isActive" : 0, "numGpus" : 2, "gpuInfo" : [
          { "physicalId" : 3, "pciBusId" : "00000000:05:00.0", "uuid" : "GPU-c", "maxNumNvLinks" : 18, "numNvLinksAvailable" : 18, "nvlinkLineRateMBps" : 50000 },
          { "physicalId" : 4, "pciBusId" : "00000000:13:00.0", "uuid" : "GPU-d", "maxNumNvLinks" : 18, "numNvLinksAvailable" : 18, "nvlinkLineRateMBps" : 50000 } ] } ]
}"#;
    let parts = parse_fmpm_list(text).unwrap();
    assert_eq!(parts.len(), 2);
    assert!(parts[0].active && !parts[1].active);
    // Partition 0 is active; partition 5 (05 and 13, PHB over PCIe but one
    // NVSwitch fabric) is the only whole free pair.
    let t = two_switches();
    let c = choose(
        &t,
        &GpuSelector::Nvidia,
        &all_gpus(&t),
        &req(2),
        Some(&parts),
    )
    .unwrap();
    assert_eq!(c.gpus, vec![b("05:00.0"), b("13:00.0")]);
    assert_eq!(c.fm_partition, Some(5));
    assert!(c.one_clique);
    assert!(matches!(
        choose(
            &t,
            &GpuSelector::Nvidia,
            &all_gpus(&t),
            &req(3),
            Some(&parts)
        ),
        Err(ChooseError::NoPartition { wanted: 3, .. })
    ));
}

#[test]
fn the_nic_under_the_same_switch_comes_with_the_pair() {
    // Add an RDMA NIC below each switch: 06:00.0 under A (port 02:03.0) and
    // 14:00.0 under B (port 11:02.0). Two GPUs + one NIC: the pair is 12+13
    // (as without NICs), and 14:00.0 is PIX to them, 06:00.0 PHB.
    let mut t = two_switches();
    use PciePortType::*;
    for (down, up, nic, grp) in [
        ("02:03.0", "01:00.0", "06:00.0", 50),
        ("11:02.0", "10:00.0", "14:00.0", 51),
    ] {
        t.functions.push(func(
            down,
            Some(up),
            0x060400,
            Some(SwitchDownstream),
            Some(grp + 10),
        ));
        let mut f = func(nic, Some(down), 0x020000, Some(Endpoint), Some(grp));
        f.vendor = 0x15b3;
        f.rdma_devices = vec![format!("mlx5_{grp}")];
        t.functions.push(f);
    }
    t.sort();
    let mut free = all_gpus(&t);
    free.extend([b("06:00.0"), b("14:00.0")]);
    let mut r = req(2);
    r.nics = 1;
    let c = choose(&t, &GpuSelector::Nvidia, &free, &r, None).unwrap();
    assert_eq!(c.gpus, vec![b("12:00.0"), b("13:00.0")]);
    assert_eq!(c.nics, vec![b("14:00.0")]);
    let nic = c
        .devices
        .iter()
        .find(|d| d.role == ChosenRole::Nic)
        .unwrap();
    assert!(nic.reason.contains("PIX"), "{}", nic.reason);
    r.nics = 3;
    assert_eq!(
        choose(&t, &GpuSelector::Nvidia, &free, &r, None).unwrap_err(),
        ChooseError::NotEnoughNics {
            wanted: 3,
            available: 2
        }
    );
}
