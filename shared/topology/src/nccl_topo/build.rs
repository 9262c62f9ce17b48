//! Building the NCCL tree: from a planned guest layout on the host, or from
//! the cliques the guest reads in its GPUs' capabilities.

use std::collections::BTreeMap;

use super::{NcclCpu, NcclPci, NcclSystem, BRIDGE_CLASS};
use crate::bdf::Bdf;
use crate::guest_layout::{max_or_current, GuestLayout, GuestTopology, LinkSpeed, PortKind};
use crate::pci::PciePortType;
use crate::topology::{LinkInfo, PciFunction, Topology};

/// Bus ids for switches that exist only in the file: bus `bus`, one device
/// number each, then the bus below.
fn invented_busid(bus: u8, k: usize) -> Bdf {
    Bdf {
        domain: 0,
        bus: bus.saturating_sub((k / 32) as u8),
        device: (k % 32) as u8,
        function: 0,
    }
}

fn link_of(link: &LinkInfo) -> (Option<String>, Option<u8>) {
    let (speed, width) = max_or_current(link);
    (speed.map(|s| s.sysfs().to_string()), width)
}

/// An endpoint node with the host function's ids and link.
fn endpoint(busid: Bdf, f: &PciFunction) -> NcclPci {
    let (link_speed, link_width) = link_of(&f.link);
    NcclPci {
        busid,
        class: f.class,
        vendor: Some(f.vendor),
        device: Some(f.device),
        subsystem_vendor: f.subsystem_vendor,
        subsystem_device: f.subsystem_device,
        link_speed,
        link_width,
        children: Vec::new(),
    }
}

/// A switch node standing for the host switch whose upstream port is `f`.
fn switch(busid: Bdf, f: Option<&PciFunction>, children: Vec<NcclPci>) -> NcclPci {
    let (link_speed, link_width) = f.map(|f| link_of(&f.link)).unwrap_or((None, None));
    NcclPci {
        busid,
        class: BRIDGE_CLASS,
        vendor: f.map(|f| f.vendor),
        device: f.map(|f| f.device),
        subsystem_vendor: f.and_then(|f| f.subsystem_vendor),
        subsystem_device: f.and_then(|f| f.subsystem_device),
        link_speed,
        link_width,
        children,
    }
}

fn cpu(numaid: i32, pci: Vec<NcclPci>) -> NcclCpu {
    NcclCpu {
        numaid,
        affinity: None,
        arch: None,
        vendor: None,
        familyid: None,
        modelid: None,
        pci,
    }
}

fn numaid(n: Option<u32>) -> i32 {
    n.map_or(-1, |n| n as i32)
}

/// The NCCL tree of a planned VM, keyed by guest bus ids.
///
/// Mirrored: a `<cpu>` per guest NUMA node, a `<pci>` per mirrored switch at
/// its guest upstream port's address, the host's ids and links. Flat: the same
/// structure, the switches at invented bus ids counted down from bus 0xff (a
/// flat VM has no buses that high), each device below the `<cpu>` of the guest
/// node its host node maps to.
pub fn from_guest(topo: &Topology, guest: &GuestTopology) -> NcclSystem {
    match guest.layout {
        GuestLayout::Mirror => mirrored(topo, guest),
        GuestLayout::Flat => flat(topo, guest),
    }
}

fn mirrored(topo: &Topology, guest: &GuestTopology) -> NcclSystem {
    fn below(topo: &Topology, guest: &GuestTopology, id: &str) -> Vec<NcclPci> {
        let (ports, devices) = guest.children_of(id);
        let mut out = Vec::new();
        for p in ports {
            match p.kind {
                // NCCL skips root and downstream ports: their children hang
                // from the level above.
                PortKind::RootPort | PortKind::SwitchDownstream => {
                    out.extend(below(topo, guest, &p.id))
                }
                PortKind::SwitchUpstream => {
                    let host = p.host.and_then(|h| topo.function(h));
                    out.push(switch(p.guest, host, below(topo, guest, &p.id)));
                }
            }
        }
        for d in devices {
            if let Some(f) = topo.function(d.host) {
                out.push(endpoint(d.guest, f));
            }
        }
        out
    }
    let mut cpus: BTreeMap<i32, Vec<NcclPci>> = BTreeMap::new();
    for rc in &guest.root_complexes {
        cpus.entry(numaid(rc.numa_node))
            .or_default()
            .extend(below(topo, guest, &rc.id));
    }
    NcclSystem {
        cpus: cpus.into_iter().map(|(n, pci)| cpu(n, pci)).collect(),
    }
}

/// The host switches above `bdf`, top down: upstream ports by port type, or
/// by position (root port, upstream, downstream, upstream, ...) when unknown.
fn host_switches(topo: &Topology, bdf: Bdf) -> Vec<Bdf> {
    let mut chain = topo.ancestors(bdf);
    chain.reverse();
    chain
        .iter()
        .enumerate()
        .filter(
            |(i, b)| match topo.function(**b).and_then(|f| f.pcie_port_type) {
                Some(t) => t == PciePortType::SwitchUpstream,
                None => i % 2 == 1,
            },
        )
        .map(|(_, b)| *b)
        .collect()
}

fn flat(topo: &Topology, guest: &GuestTopology) -> NcclSystem {
    // Guest NUMA ids: host nodes in order, as the mirrored layout numbers them.
    let mut host_nodes: Vec<u32> = guest
        .devices
        .iter()
        .filter_map(|d| topo.numa_of(d.host))
        .collect();
    host_nodes.sort_unstable();
    host_nodes.dedup();
    let guest_node = |h: Option<u32>| h.and_then(|h| host_nodes.iter().position(|n| *n == h));

    // A tree per cpu: nested maps from host switch to what lies below.
    #[derive(Default)]
    struct Level {
        switches: BTreeMap<Bdf, Level>,
        devices: Vec<(Bdf, Bdf)>,
    }
    let mut cpus: BTreeMap<i32, Level> = BTreeMap::new();
    for d in &guest.devices {
        let node = guest_node(topo.numa_of(d.host)).map_or(-1, |n| n as i32);
        let mut level = cpus.entry(node).or_default();
        for s in host_switches(topo, d.host) {
            level = level.switches.entry(s).or_default();
        }
        level.devices.push((d.host, d.guest));
    }
    fn emit(topo: &Topology, level: &Level, next: &mut usize) -> Vec<NcclPci> {
        let mut out = Vec::new();
        for (host, below) in &level.switches {
            let busid = invented_busid(0xff, *next);
            *next += 1;
            let children = emit(topo, below, next);
            out.push(switch(busid, topo.function(*host), children));
        }
        for (host, guest) in &level.devices {
            if let Some(f) = topo.function(*host) {
                out.push(endpoint(*guest, f));
            }
        }
        out
    }
    let mut next = 0;
    NcclSystem {
        cpus: cpus
            .iter()
            .map(|(n, level)| cpu(*n, emit(topo, level, &mut next)))
            .collect(),
    }
}

/// A GPU as the guest sees it, with the clique its capability names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliqueGpu {
    /// The GPU's guest PCI address.
    pub busid: Bdf,
    /// 24-bit PCI class code of the GPU.
    pub class: u32,
    /// PCI vendor ID (0x10de for NVIDIA).
    pub vendor: u16,
    /// PCI device ID.
    pub device: u16,
    /// Subsystem vendor ID; None when sysfs lacks it.
    pub subsystem_vendor: Option<u16>,
    /// Subsystem device ID; None when sysfs lacks it.
    pub subsystem_device: Option<u16>,
    /// The GPU's PCIe link as the guest's sysfs reports it.
    pub link: LinkInfo,
    /// Guest NUMA node; None when sysfs says -1.
    pub numa_node: Option<u32>,
    /// None when the GPU carries no capability.
    pub clique: Option<u8>,
}

/// An NCCL tree in which the GPUs of one clique share an invented switch (PIX:
/// NCCL enables PCIe P2P) and different cliques, or GPUs without a
/// capability, meet only at the CPU (PHB: NCCL's default level keeps P2P off),
/// so NCCL agrees with the driver. A clique's switch hangs below the NUMA node
/// of its first GPU. Switch bus ids start at `free_bus` (a bus the guest does
/// not use), one device number per clique.
pub fn from_cliques(gpus: &[CliqueGpu], free_bus: u8) -> NcclSystem {
    let mut by_clique: BTreeMap<u8, Vec<&CliqueGpu>> = BTreeMap::new();
    let mut loose: BTreeMap<i32, Vec<NcclPci>> = BTreeMap::new();
    for g in gpus {
        match g.clique {
            Some(c) => by_clique.entry(c).or_default().push(g),
            None => loose.entry(numaid(g.numa_node)).or_default().push(leaf(g)),
        }
    }
    // Switches first, in clique order, then the GPUs without a clique.
    let mut cpus: BTreeMap<i32, Vec<NcclPci>> = BTreeMap::new();
    for (c, members) in by_clique {
        // The switch's uplink is as fast as its fastest member.
        let best = members
            .iter()
            .map(|g| link_of(&g.link))
            .max_by_key(|(s, w)| (s.as_deref().and_then(LinkSpeed::from_sysfs), w.unwrap_or(0)))
            .unwrap_or((None, None));
        let node = numaid(members[0].numa_node);
        let sw = NcclPci {
            busid: invented_busid(free_bus, usize::from(c)),
            class: BRIDGE_CLASS,
            vendor: None,
            device: None,
            subsystem_vendor: None,
            subsystem_device: None,
            link_speed: best.0,
            link_width: best.1,
            children: members.iter().map(|g| leaf(g)).collect(),
        };
        cpus.entry(node).or_default().push(sw);
    }
    for (n, leaves) in loose {
        cpus.entry(n).or_default().extend(leaves);
    }
    NcclSystem {
        cpus: cpus.into_iter().map(|(n, pci)| cpu(n, pci)).collect(),
    }
}

fn leaf(g: &CliqueGpu) -> NcclPci {
    let (link_speed, link_width) = link_of(&g.link);
    NcclPci {
        busid: g.busid,
        class: g.class,
        vendor: Some(g.vendor),
        device: Some(g.device),
        subsystem_vendor: g.subsystem_vendor,
        subsystem_device: g.subsystem_device,
        link_speed,
        link_width,
        children: Vec::new(),
    }
}
