//! Hand-built topologies that mirror real server layouts, shared by the tests.

#![allow(dead_code)]

use p2p_topology::pci::{Acs, AcsFlags, PciePortType};
use p2p_topology::topology::{AcsState, HostBridge, LinkInfo, PciFunction, Topology};
use p2p_topology::Bdf;

pub fn bdf(s: &str) -> Bdf {
    s.parse().unwrap()
}

pub fn func(addr: &str, hb: &str, parent: Option<&str>, port: PciePortType) -> PciFunction {
    let is_bridge = port != PciePortType::Endpoint;
    PciFunction {
        bdf: bdf(addr),
        vendor: 0x10de,
        device: 0x2335,
        subsystem_vendor: None,
        subsystem_device: None,
        class: if is_bridge { 0x060400 } else { 0x030200 },
        is_bridge,
        host_bridge: hb.into(),
        parent: parent.map(bdf),
        pcie_port_type: Some(port),
        acs: AcsState::Absent,
        iommu_group: None,
        numa_node: None,
        cpu_affinity: None,
        driver: None,
        link: LinkInfo::default(),
        config_len: 4096,
        interfaces: vec![],
        rdma_devices: vec![],
    }
}

pub fn acs_rr(on: bool) -> AcsState {
    let caps = AcsFlags::from_bits(0x1f);
    AcsState::Present(Acs {
        offset: 0x148,
        capability: caps,
        control: if on { caps } else { AcsFlags::default() },
    })
}

pub fn host_bridge(name: &str, bus: u8, node: Option<u32>) -> HostBridge {
    HostBridge {
        name: name.into(),
        domain: 0,
        bus,
        numa_node: node,
    }
}

/// Socket 0: pci0000:00 with root port 00:01.0 -> switch 01:00.0 -> DSPs 02:00.0,
/// 02:01.0, 02:02.0; GPUs 03:00.0 and 04:00.0 below the first two; below the third a
/// second switch 05:00.0 -> DSP 06:00.0 -> GPU 07:00.0. Root port 00:02.0 -> GPU 08:00.0.
/// pci0000:20 (also socket 0): root port 20:01.0 -> GPU 21:00.0.
/// Socket 1: pci0000:80, root port 80:01.0 -> GPU 81:00.0.
pub fn server() -> Topology {
    use PciePortType::*;
    let mut t = Topology {
        host_bridges: vec![
            host_bridge("pci0000:00", 0x00, Some(0)),
            host_bridge("pci0000:20", 0x20, Some(0)),
            host_bridge("pci0000:80", 0x80, Some(1)),
        ],
        functions: vec![
            func("0000:00:01.0", "pci0000:00", None, RootPort),
            func(
                "0000:01:00.0",
                "pci0000:00",
                Some("0000:00:01.0"),
                SwitchUpstream,
            ),
            func(
                "0000:02:00.0",
                "pci0000:00",
                Some("0000:01:00.0"),
                SwitchDownstream,
            ),
            func(
                "0000:02:01.0",
                "pci0000:00",
                Some("0000:01:00.0"),
                SwitchDownstream,
            ),
            func(
                "0000:02:02.0",
                "pci0000:00",
                Some("0000:01:00.0"),
                SwitchDownstream,
            ),
            func("0000:03:00.0", "pci0000:00", Some("0000:02:00.0"), Endpoint),
            func("0000:04:00.0", "pci0000:00", Some("0000:02:01.0"), Endpoint),
            func(
                "0000:05:00.0",
                "pci0000:00",
                Some("0000:02:02.0"),
                SwitchUpstream,
            ),
            func(
                "0000:06:00.0",
                "pci0000:00",
                Some("0000:05:00.0"),
                SwitchDownstream,
            ),
            func("0000:07:00.0", "pci0000:00", Some("0000:06:00.0"), Endpoint),
            func("0000:00:02.0", "pci0000:00", None, RootPort),
            func("0000:08:00.0", "pci0000:00", Some("0000:00:02.0"), Endpoint),
            func("0000:20:01.0", "pci0000:20", None, RootPort),
            func("0000:21:00.0", "pci0000:20", Some("0000:20:01.0"), Endpoint),
            func("0000:80:01.0", "pci0000:80", None, RootPort),
            func("0000:81:00.0", "pci0000:80", Some("0000:80:01.0"), Endpoint),
        ],
        ..Default::default()
    };
    t.sort();
    t
}
