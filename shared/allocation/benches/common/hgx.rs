//! The generated HGX-like host of the benches (chooser_scale here, and
//! p2p-tests' dra_scale, which includes this file by path): 2 sockets (NUMA
//! 0, 1) x 2 host bridges x 2 PCIe switches, each switch with 2 GPUs and 2
//! RDMA NICs on its own downstream ports, every endpoint in its own IOMMU
//! group. So GPU pairs are PIX (one switch), PHB (one host bridge), NODE and
//! SYS.

#![allow(dead_code)]

use p2p_topology::pci::PciePortType;
use p2p_topology::topology::{AcsState, HostBridge, LinkInfo, PciFunction, Topology};
use p2p_topology::Bdf;

fn func(
    bdf: Bdf,
    hb: &str,
    parent: Option<Bdf>,
    class: u32,
    port: PciePortType,
    group: u32,
    numa: u32,
) -> PciFunction {
    PciFunction {
        bdf,
        vendor: 0x10de,
        device: 0x2335,
        subsystem_vendor: None,
        subsystem_device: None,
        class,
        is_bridge: class >> 8 == 0x0604,
        host_bridge: hb.to_string(),
        parent,
        pcie_port_type: Some(port),
        acs: AcsState::Absent,
        iommu_group: Some(group),
        numa_node: Some(numa),
        cpu_affinity: None,
        driver: None,
        link: LinkInfo::default(),
        config_len: 256,
        interfaces: Vec::new(),
        rdma_devices: Vec::new(),
    }
}

/// The 16-GPU, 16-NIC host of the module comment.
pub fn host() -> Topology {
    host_of(2, 2)
}

/// `sockets` x `bridges` host bridges, each with two switches of two GPUs and
/// two RDMA NICs: 8 GPUs for (1, 2), 16 for (2, 2).
pub fn host_of(sockets: u8, bridges: u8) -> Topology {
    use PciePortType::*;
    let mut t = Topology::default();
    let mut group = 0;
    let mut next_group = || {
        group += 1;
        group
    };
    for socket in 0..sockets {
        for hbi in 0..bridges {
            let root_bus = socket * 0x80 + hbi * 0x40;
            let hb = format!("pci0000:{root_bus:02x}");
            t.host_bridges.push(HostBridge {
                name: hb.clone(),
                domain: 0,
                bus: root_bus,
                numa_node: Some(u32::from(socket)),
            });
            for sw in 0..2u8 {
                let base = root_bus + 1 + sw * 0x10;
                let rp = Bdf::new(0, root_bus, 1 + sw, 0).unwrap();
                let up = Bdf::new(0, base, 0, 0).unwrap();
                let n = u32::from(socket);
                t.functions
                    .push(func(rp, &hb, None, 0x060400, RootPort, next_group(), n));
                t.functions.push(func(
                    up,
                    &hb,
                    Some(rp),
                    0x060400,
                    SwitchUpstream,
                    next_group(),
                    n,
                ));
                for port in 0..4u8 {
                    let down = Bdf::new(0, base + 1, port, 0).unwrap();
                    let ep = Bdf::new(0, base + 2 + port, 0, 0).unwrap();
                    t.functions.push(func(
                        down,
                        &hb,
                        Some(up),
                        0x060400,
                        SwitchDownstream,
                        next_group(),
                        n,
                    ));
                    let mut f = if port < 2 {
                        func(ep, &hb, Some(down), 0x030200, Endpoint, next_group(), n)
                    } else {
                        let mut f = func(ep, &hb, Some(down), 0x020000, Endpoint, next_group(), n);
                        f.vendor = 0x15b3;
                        f.rdma_devices = vec![format!("mlx5_{}", t.functions.len())];
                        f
                    };
                    f.numa_node = Some(n);
                    t.functions.push(f);
                }
            }
        }
    }
    t.sort();
    t
}
