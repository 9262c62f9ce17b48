//! The mirrored layout in an existing domain: vp2p's controllers (added, or
//! rewritten when they differ), the NUMA cells their expander buses need, and
//! each passed-through device's guest address below its port.

use std::collections::{BTreeMap, BTreeSet};

use p2p_topology::guest_layout::GuestTopology;

use super::domain::{Controller, Domain, GuestAddress};
use super::edits::{lines_at, Edits};
use super::patch::PatchError;
use super::{controller_elements, controller_indexes};

/// Controllers, NUMA cells and guest addresses of the mirrored layout.
pub(super) fn place_mirrored(
    domain: &Domain,
    guest: &GuestTopology,
    edits: &mut Edits,
) -> Result<(), PatchError> {
    let ours: BTreeSet<&str> = guest
        .root_complexes
        .iter()
        .map(|r| r.id.as_str())
        .chain(guest.ports.iter().map(|p| p.id.as_str()))
        .collect();
    let present: BTreeMap<&str, &Controller> = domain
        .controllers
        .iter()
        .filter_map(|c| {
            c.alias
                .as_deref()
                .filter(|a| ours.contains(a))
                .map(|a| (a, c))
        })
        .collect();
    let others: Vec<u32> = domain
        .controllers
        .iter()
        .filter(|c| !c.alias.as_deref().is_some_and(|a| ours.contains(a)))
        .map(|c| c.index)
        .collect();
    // Keep vp2p's numbering when its controllers are there (KubeVirt defines
    // the domain twice, libvirt adding controllers in between); else number
    // after every other controller.
    let span = ours.len() as u32;
    let first = present
        .values()
        .map(|c| c.index)
        .min()
        .filter(|f| *f >= 1 && !others.iter().any(|i| (*f..*f + span).contains(i)))
        .unwrap_or_else(|| others.iter().map(|i| i + 1).max().unwrap_or(1).max(1));
    let idx = controller_indexes(guest, first);
    for rc in &guest.root_complexes {
        if let Some(cell) = rc.numa_node {
            if !domain.numa_cells.contains(&cell) {
                let node = guest.numa_nodes.iter().find(|n| n.guest == cell);
                return Err(PatchError::NumaCell {
                    rc: rc.id.clone(),
                    cell,
                    host: node.map_or(cell, |n| n.host),
                    cpus: node
                        .and_then(|n| n.host_cpus.clone())
                        .map_or(String::new(), |c| format!(", pinned to host CPUs {c}")),
                });
            }
        }
    }
    let indent = &domain.devices.child_indent;
    let mut added = String::new();
    for (id, element) in controller_elements(guest, &idx) {
        let styled = edits.styled(element.trim_end());
        match present.get(id.as_str()) {
            // vp2p owns its controllers: rewritten when they differ.
            Some(c) => {
                let want = styled
                    .lines()
                    .collect::<Vec<_>>()
                    .join(&format!("\n{indent}"));
                if domain.text[c.range.clone()] != want {
                    edits.replace(c.range.clone(), want);
                    edits.changes.push(format!("controller {id}: rewritten"));
                }
            }
            None => added.push_str(&element),
        }
    }
    if !added.is_empty() {
        edits.changes.push(format!(
            "{} mirrored controller(s) from index {first}",
            added.matches("<controller ").count()
        ));
        match domain.last_controller_end {
            Some(at) => {
                let block = lines_at(indent, &edits.styled(added.trim_end()));
                edits.insert(at, block);
            }
            None => edits.append_child(&domain.devices, added.trim_end()),
        }
    }
    for d in &guest.devices {
        let h = domain
            .hostdev(d.host)
            .ok_or(PatchError::NotInDomain(d.host))?;
        let want = GuestAddress {
            bus: idx.get(&d.parent).copied().unwrap_or(0),
            slot: d.guest.device,
            function: d.guest.function,
            multifunction: d.multifunction,
        };
        let element =
            edits.styled(&format!(
            "<address type='pci' domain='0x0000' bus='{:#04x}' slot='{:#04x}' function='{:#x}'{}/>",
            want.bus,
            want.slot,
            want.function,
            if want.multifunction { " multifunction='on'" } else { "" }
        ));
        match &h.guest {
            Some((have, _)) if *have == want => {}
            Some((have, range)) => {
                edits.replace(range.clone(), element);
                edits.changes.push(format!(
                    "{}: guest address bus {:#04x} slot {:#04x} (was bus {:#04x} slot {:#04x})",
                    d.host, want.bus, want.slot, have.bus, have.slot
                ));
            }
            None => {
                let at = h.alias_end.unwrap_or(h.source_end);
                edits.insert(at, format!("\n{}{element}", h.child_indent));
                edits.changes.push(format!(
                    "{}: guest address bus {:#04x} slot {:#04x}",
                    d.host, want.bus, want.slot
                ));
            }
        }
    }
    Ok(())
}
