//! Building the mirrored guest tree: the host's root complexes, root ports and
//! switches on the devices' paths, with pinned guest bus numbers.

use std::collections::{BTreeMap, BTreeSet};

use super::build::{
    by_slot, check_devices, device_ids, in_given_order, push_functions, VmDevice, FIRST_BUS,
    FIRST_CHASSIS,
};
use super::link::{max_or_current, qemu_width_valid};
use super::{
    FirstSlot, GuestDevice, GuestLayout, GuestLink, GuestNumaNode, GuestPort, GuestRootComplex,
    GuestTopology, LayoutError, PortKind,
};
use crate::bdf::Bdf;
use crate::pci::PciePortType;
use crate::topology::{LinkInfo, Topology};

/// A bridge of the host on some device's path, with what hangs below it.
#[derive(Debug, Default)]
struct HostPort {
    ports: BTreeMap<Bdf, HostPort>,
    devices: Vec<usize>,
}

/// One host root complex the VM uses.
#[derive(Debug, Default)]
struct HostRc {
    ports: BTreeMap<Bdf, HostPort>,
    /// Devices on the root complex's own bus (no root port above them).
    bare: Vec<usize>,
}

struct Placer<'a> {
    topo: &'a Topology,
    devices: &'a [VmDevice],
    ids: Vec<String>,
    next_bus: u16,
    next_chassis: u16,
    switches: usize,
    root_ports: usize,
    ports: Vec<GuestPort>,
    out: Vec<GuestDevice>,
    notes: Vec<String>,
}

/// The link a mirrored port carries: the host function's maximum, else current.
fn host_link(link: &LinkInfo) -> Option<GuestLink> {
    let (speed, width) = max_or_current(link);
    let (speed, width) = (speed?, width.filter(|w| qemu_width_valid(*w))?);
    Some(GuestLink { speed, width })
}

impl Placer<'_> {
    fn take_bus(&mut self) -> Result<u8, LayoutError> {
        let b = self.next_bus;
        if b > 0xff {
            return Err(LayoutError::OutOfBuses { first: FIRST_BUS });
        }
        self.next_bus += 1;
        Ok(b as u8)
    }

    fn take_chassis(&mut self) -> Result<u8, LayoutError> {
        let c = self.next_chassis;
        if c > 0xff {
            return Err(LayoutError::OutOfChassis);
        }
        self.next_chassis += 1;
        Ok(c as u8)
    }

    /// Ids: `ua-vp2p-rpN` and `ua-vp2p-swN` counted in the VM, a downstream
    /// port named after its switch and slot (`ua-vp2p-sw0d1`).
    fn new_id(&mut self, kind: PortKind, parent: &str, slot: u8) -> String {
        match kind {
            PortKind::RootPort => {
                self.root_ports += 1;
                format!("ua-vp2p-rp{}", self.root_ports - 1)
            }
            PortKind::SwitchUpstream => {
                self.switches += 1;
                format!("ua-vp2p-sw{}", self.switches - 1)
            }
            PortKind::SwitchDownstream => format!("{parent}d{slot}"),
        }
    }

    /// Notes a host bridge whose own port type differs from the one its
    /// position in the tree gives it.
    fn check_kind(&mut self, host: Bdf, kind: PortKind) {
        let Some(f) = self.topo.function(host) else {
            return;
        };
        let matches = match f.pcie_port_type {
            None => return,
            Some(PciePortType::RootPort) => kind == PortKind::RootPort,
            Some(PciePortType::SwitchUpstream) => kind == PortKind::SwitchUpstream,
            Some(PciePortType::SwitchDownstream) => kind == PortKind::SwitchDownstream,
            Some(_) => false,
        };
        if !matches {
            self.notes.push(format!(
                "{host}: host port type {:?} mirrored as {} by its place in the tree",
                f.pcie_port_type,
                kind.qemu_driver()
            ));
        }
    }

    /// Adds a port at `bus`:`slot` mirroring `host` (None: invented), whose
    /// link is that of `link_from`; returns its id and secondary bus.
    fn add_port(
        &mut self,
        kind: PortKind,
        host: Option<Bdf>,
        link_from: Bdf,
        parent: &str,
        (bus, slot): (u8, u8),
    ) -> Result<(String, u8), LayoutError> {
        let id = self.new_id(kind, parent, slot);
        let chassis = if kind.is_slot() {
            Some(self.take_chassis()?)
        } else {
            None
        };
        let secondary = self.take_bus()?;
        let link = self
            .topo
            .function(link_from)
            .and_then(|f| host_link(&f.link));
        self.ports.push(GuestPort {
            id: id.clone(),
            kind,
            host,
            parent: parent.to_string(),
            guest: Bdf {
                domain: 0,
                bus,
                device: slot,
                function: 0,
            },
            secondary_bus: secondary,
            chassis,
            link,
        });
        Ok((id, secondary))
    }

    /// Places a port (and everything below it) at `bus`:`slot`.
    fn port(
        &mut self,
        host: Bdf,
        node: &HostPort,
        kind: PortKind,
        parent: &str,
        bus: u8,
        slot: u8,
    ) -> Result<(), LayoutError> {
        self.check_kind(host, kind);
        let (id, secondary) = self.add_port(kind, Some(host), host, parent, (bus, slot))?;
        match kind {
            PortKind::SwitchUpstream => {
                if !node.devices.is_empty() {
                    let d = self.devices[node.devices[0]].host;
                    return Err(LayoutError::Unmirrorable {
                        bridge: host,
                        device: d,
                        why: "an endpoint on a switch's internal bus has no PCIe port to sit below"
                            .into(),
                    });
                }
                if node.ports.len() > 32 {
                    return Err(LayoutError::BusFull {
                        what: format!("switch {host}"),
                        items: "downstream ports",
                    });
                }
                for (j, (h, child)) in node.ports.iter().enumerate() {
                    self.port(
                        *h,
                        child,
                        PortKind::SwitchDownstream,
                        &id,
                        secondary,
                        j as u8,
                    )?;
                }
            }
            PortKind::RootPort | PortKind::SwitchDownstream => {
                let below = node.ports.len() + usize::from(!node.devices.is_empty());
                if below > 1 {
                    let d = node
                        .devices
                        .first()
                        .map(|&i| self.devices[i].host)
                        .unwrap_or(host);
                    return Err(LayoutError::Unmirrorable {
                        bridge: host,
                        device: d,
                        why: "a PCIe port leads to one device (slot 0), but the VM's devices \
                              below it are several"
                            .into(),
                    });
                }
                for (h, child) in &node.ports {
                    self.port(*h, child, PortKind::SwitchUpstream, &id, secondary, 0)?;
                }
                self.functions(&node.devices, &id, host, secondary)?;
            }
        }
        Ok(())
    }

    /// Places the functions below one port at slot 0 of `bus`.
    fn functions(
        &mut self,
        group: &[usize],
        parent: &str,
        port: Bdf,
        bus: u8,
    ) -> Result<(), LayoutError> {
        let slots = by_slot(self.devices, group.iter().copied());
        if slots.len() > 1 {
            let d = self.devices[group[1]].host;
            return Err(LayoutError::Unmirrorable {
                bridge: port,
                device: d,
                why: "devices of different slots below one PCIe port".into(),
            });
        }
        for g in slots.values() {
            push_functions(&mut self.out, self.devices, &self.ids, g, parent, bus, 0);
        }
        Ok(())
    }

    /// An invented root port for devices on their host bridge's own bus.
    fn bare(
        &mut self,
        group: &[usize],
        parent: &str,
        bus: u8,
        slot: u8,
    ) -> Result<(), LayoutError> {
        let first = self.devices[group[0]].host;
        let (id, secondary) =
            self.add_port(PortKind::RootPort, None, first, parent, (bus, slot))?;
        self.notes.push(format!(
            "{first}: on its host bridge's bus with no root port; given an invented root port {id}"
        ));
        push_functions(
            &mut self.out,
            self.devices,
            &self.ids,
            group,
            &id,
            secondary,
            0,
        );
        Ok(())
    }
}

/// The host's root complexes, root ports and switches on the devices' paths,
/// mirrored with pinned guest addresses; the expander buses from the default
/// first slot (0x10, [`FirstSlot::DEFAULT`]).
pub fn mirror(topo: &Topology, devices: &[VmDevice]) -> Result<GuestTopology, LayoutError> {
    mirror_from(topo, devices, FirstSlot::DEFAULT)
}

/// As [`mirror`], with one expander bus per slot of `pcie.0` from `first`.
pub fn mirror_from(
    topo: &Topology,
    devices: &[VmDevice],
    first: FirstSlot,
) -> Result<GuestTopology, LayoutError> {
    check_devices(topo, devices)?;
    // Host root complexes in (domain, bus) order, each with the bridges on paths.
    let mut rcs: BTreeMap<(u32, u8, String), HostRc> = BTreeMap::new();
    for (i, d) in devices.iter().enumerate() {
        let f = topo
            .function(d.host)
            .ok_or(LayoutError::UnknownDevice(d.host))?;
        let key = match topo.host_bridge(&f.host_bridge) {
            Some(h) => (h.domain, h.bus, h.name.clone()),
            None => (f.bdf.domain, 0, f.host_bridge.clone()),
        };
        let rc = rcs.entry(key).or_default();
        let mut chain = topo.ancestors(d.host);
        chain.reverse();
        let Some((top, rest)) = chain.split_first() else {
            rc.bare.push(i);
            continue;
        };
        let mut node = rc.ports.entry(*top).or_default();
        for b in rest {
            node = node.ports.entry(*b).or_default();
        }
        node.devices.push(i);
    }

    // Guest NUMA nodes: one per known host node, in host order.
    let host_node_of = |name: &str, first: usize| -> Option<u32> {
        topo.host_bridge(name)
            .and_then(|h| h.numa_node)
            .or_else(|| topo.numa_of(devices[first].host))
    };
    let mut host_nodes = BTreeSet::new();
    let mut rc_nodes = Vec::new();
    for ((_, _, name), rc) in &rcs {
        let first = rc
            .bare
            .first()
            .copied()
            .or_else(|| first_device(rc.ports.values()))
            .expect("a root complex is listed because a device sits below it");
        let n = host_node_of(name, first);
        if let Some(n) = n {
            host_nodes.insert(n);
        }
        rc_nodes.push(n);
    }
    let numa_nodes: Vec<GuestNumaNode> = host_nodes
        .iter()
        .enumerate()
        .map(|(g, &h)| GuestNumaNode {
            guest: g as u32,
            host: h,
            host_cpus: topo
                .numa_nodes
                .iter()
                .find(|n| n.id == h)
                .map(|n| n.cpulist.clone()),
        })
        .collect();
    let guest_node =
        |h: Option<u32>| h.and_then(|h| numa_nodes.iter().find(|n| n.host == h).map(|n| n.guest));

    let mut p = Placer {
        topo,
        devices,
        ids: device_ids(devices),
        next_bus: u16::from(FIRST_BUS),
        next_chassis: u16::from(FIRST_CHASSIS),
        switches: 0,
        root_ports: 0,
        ports: Vec::new(),
        out: Vec::new(),
        notes: Vec::new(),
    };
    let mut root_complexes = Vec::new();
    let full = LayoutError::MirrorFull {
        first: first.get(),
        max: first.room(),
        count: rcs.len(),
    };
    if rcs.len() > first.room() {
        return Err(full);
    }
    for (r, (((_, _, name), rc), host_node)) in rcs.iter().zip(rc_nodes).enumerate() {
        let id = format!("ua-vp2p-rc{r}");
        let bus_nr = p.take_bus()?;
        // Root ports in host order, then invented ones for bare devices.
        let bare = by_slot(devices, rc.bare.iter().copied());
        if rc.ports.len() + bare.len() > 32 {
            return Err(LayoutError::BusFull {
                what: format!("root complex {name}"),
                items: "root ports",
            });
        }
        for (s, (h, node)) in rc.ports.iter().enumerate() {
            p.port(*h, node, PortKind::RootPort, &id, bus_nr, s as u8)?;
        }
        for (s, group) in bare.values().enumerate() {
            p.bare(group, &id, bus_nr, (rc.ports.len() + s) as u8)?;
        }
        if host_node.is_none() {
            p.notes.push(format!(
                "{name}: the host does not know its NUMA node (-1); {id} gets none either"
            ));
        }
        root_complexes.push(GuestRootComplex {
            id,
            host: name.clone(),
            slot: first.nth(r).ok_or_else(|| full.clone())?,
            bus_nr,
            last_bus: (p.next_bus - 1) as u8,
            numa_node: guest_node(host_node),
        });
        // Leave the rest of a 16-bus block free, so adding a device below one
        // root complex does not renumber the next.
        p.next_bus = (p.next_bus + 0xf) & !0xf;
    }
    let mut out = p.out;
    in_given_order(&mut out, devices);
    Ok(GuestTopology {
        layout: GuestLayout::Mirror,
        numa_nodes,
        root_complexes,
        ports: p.ports,
        devices: out,
        notes: p.notes,
    })
}

fn first_device<'a>(mut ports: impl Iterator<Item = &'a HostPort>) -> Option<usize> {
    ports.find_map(|p| {
        p.devices
            .first()
            .copied()
            .or_else(|| first_device(p.ports.values()))
    })
}
