//! Building the flat guest tree, and the pieces both layouts share: device
//! ids, slot grouping and function placement.

use std::collections::{BTreeMap, BTreeSet};

use super::{DeviceRole, FirstSlot, GuestDevice, GuestLayout, GuestTopology, LayoutError};
use crate::bdf::Bdf;
use crate::topology::Topology;

/// Guest bus number of the first expander bus; buses below it stay free for
/// the root ports the VM already has on `pcie.0`.
pub const FIRST_BUS: u8 = 0x20;
/// First `chassis` number given to mirrored slot ports, far above the small
/// numbers VMMs and libvirt give their own root ports.
pub const FIRST_CHASSIS: u8 = 128;

/// A device the VM receives: a GPU with its clique, or an RDMA NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmDevice {
    /// Host address of the function passed through.
    pub host: Bdf,
    /// Whether it is a GPU or an RDMA NIC.
    pub role: DeviceRole,
    /// P2P clique id for a GPU (from the clique plan); None for NICs.
    pub clique: Option<u8>,
}

/// The id of the `n`-th device of `role` in a VM, valid as a QEMU id and as
/// a libvirt user alias (letters, digits, '-'; libvirt wants the "ua-" prefix).
pub fn device_id(role: DeviceRole, n: usize) -> String {
    match role {
        DeviceRole::Gpu => format!("ua-vp2p-gpu{n}"),
        DeviceRole::Nic => format!("ua-vp2p-nic{n}"),
    }
}

/// QEMU ids and libvirt aliases: GPUs and NICs numbered in the order given.
pub(super) fn device_ids(devices: &[VmDevice]) -> Vec<String> {
    let (mut g, mut n) = (0, 0);
    devices
        .iter()
        .map(|d| {
            let count = match d.role {
                DeviceRole::Gpu => &mut g,
                DeviceRole::Nic => &mut n,
            };
            *count += 1;
            device_id(d.role, *count - 1)
        })
        .collect()
}

pub(super) fn check_devices(topo: &Topology, devices: &[VmDevice]) -> Result<(), LayoutError> {
    let mut seen = BTreeSet::new();
    for d in devices {
        topo.function(d.host)
            .ok_or(LayoutError::UnknownDevice(d.host))?;
        if !seen.insert(d.host) {
            return Err(LayoutError::Duplicate(d.host));
        }
    }
    Ok(())
}

/// Groups device indexes by host slot (domain, bus, device): the functions of
/// one physical device stay together in the guest, renumbered from 0.
pub(super) fn by_slot(
    devices: &[VmDevice],
    idx: impl Iterator<Item = usize>,
) -> BTreeMap<Bdf, Vec<usize>> {
    let mut slots: BTreeMap<Bdf, Vec<usize>> = BTreeMap::new();
    for i in idx {
        let h = devices[i].host;
        let key = Bdf { function: 0, ..h };
        slots.entry(key).or_default().push(i);
    }
    for v in slots.values_mut() {
        v.sort_by_key(|&i| devices[i].host);
    }
    slots
}

pub(super) fn push_functions(
    out: &mut Vec<GuestDevice>,
    devices: &[VmDevice],
    ids: &[String],
    group: &[usize],
    parent: &str,
    bus: u8,
    slot: u8,
) {
    for (f, &i) in group.iter().enumerate() {
        out.push(GuestDevice {
            id: ids[i].clone(),
            role: devices[i].role,
            host: devices[i].host,
            guest: Bdf {
                domain: 0,
                bus,
                device: slot,
                function: f as u8,
            },
            parent: parent.to_string(),
            clique: devices[i].clique,
            multifunction: f == 0 && group.len() > 1,
        });
    }
}

/// Sorts placed devices into the order the caller gave them (GPU0 first).
pub(super) fn in_given_order(out: &mut [GuestDevice], devices: &[VmDevice]) {
    out.sort_by_key(|d| devices.iter().position(|v| v.host == d.host));
}

/// Every device on `pcie.0`, one slot per host device from the default first
/// slot (0x10, [`FirstSlot::DEFAULT`]).
pub fn flat(topo: &Topology, devices: &[VmDevice]) -> Result<GuestTopology, LayoutError> {
    flat_from(topo, devices, FirstSlot::DEFAULT)
}

/// Every device on `pcie.0`, one slot per host device from `first`, in the
/// order the devices were given; the functions of one host device share a
/// slot. Refused when the slots from `first` through 0x1e are too few.
pub fn flat_from(
    topo: &Topology,
    devices: &[VmDevice],
    first: FirstSlot,
) -> Result<GuestTopology, LayoutError> {
    check_devices(topo, devices)?;
    let ids = device_ids(devices);
    let slots = by_slot(devices, 0..devices.len());
    if slots.len() > first.room() {
        return Err(LayoutError::FlatFull {
            first: first.get(),
            max: first.room(),
            count: slots.len(),
        });
    }
    let mut out = Vec::new();
    // Slots follow the order the devices were given, so GPU0 is the first slot.
    let mut order: Vec<&Vec<usize>> = slots.values().collect();
    order.sort_by_key(|g| g[0]);
    for (s, group) in order.into_iter().enumerate() {
        let slot = first.nth(s).ok_or(LayoutError::FlatFull {
            first: first.get(),
            max: first.room(),
            count: slots.len(),
        })?;
        push_functions(&mut out, devices, &ids, group, "pcie.0", 0, slot);
    }
    in_given_order(&mut out, devices);
    Ok(GuestTopology {
        layout: GuestLayout::Flat,
        numa_nodes: Vec::new(),
        root_complexes: Vec::new(),
        ports: Vec::new(),
        devices: out,
        notes: Vec::new(),
    })
}
