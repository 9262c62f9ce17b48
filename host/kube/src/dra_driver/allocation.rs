//! A claim's allocation resolved against this node: each device the
//! scheduler gave this driver found among the devices the node last
//! published, with its PCI address and IOMMU group. The publication is the
//! one the publisher last built ([`LastBuilt`]); it is built again from
//! sysfs, once, only when none was built yet, when a claimed device is not
//! in it, or when sysfs no longer shows a claimed function in the group it
//! had; a device still absent then is refused with the reason it is left
//! out now. Reads only; nothing is held.

use std::collections::BTreeSet;

use p2p_allocation::dra::claim::{AllocatedDevice, ResourceClaim};
use p2p_allocation::dra::{Device, PCI_BUS_ID};
use p2p_topology::{Bdf, IommuGroup};

use super::publication::{Built, LastBuilt};
use super::vfio::PciBus;
use super::Settings;
use crate::kubelet_plugin::claims::check_path_names;
use crate::kubelet_plugin::{ClaimError, ClaimRef};

/// One device of a claim, resolved against this node's tree.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The allocation result naming it.
    pub alloc: AllocatedDevice,
    /// Its PCI address.
    pub bdf: Bdf,
    /// Its IOMMU group.
    pub group: IommuGroup,
    /// The device as the node's slices publish it (its attributes go into
    /// the device metadata).
    pub published: Device,
}

/// The devices of `object` allocated from driver `s`'s name, resolved
/// against the last publication of `last` (built when there is none, and
/// built again once when it lacks a device or `bus` shows a function
/// moved); refused, naming the device, when one is not in this node's pool,
/// not published (with the reason it is left out), or has no address or
/// group.
pub fn resolve(
    s: &Settings,
    bus: &PciBus,
    last: &LastBuilt,
    claim: &ClaimRef,
    object: &ResourceClaim,
) -> Result<Vec<Resolved>, ClaimError> {
    let driver = &s.plugin.driver_name;
    let ours: Vec<&AllocatedDevice> = object
        .results()
        .iter()
        .filter(|r| r.driver == *driver)
        .collect();
    if ours.is_empty() {
        let others: BTreeSet<&str> = object.results().iter().map(|r| r.driver.as_str()).collect();
        return Err(ClaimError(if others.is_empty() {
            format!("{claim}: not allocated (no devices in its status)")
        } else {
            format!(
                "{claim}: no device of driver {driver} (its devices are of {})",
                others.into_iter().collect::<Vec<_>>().join(", ")
            )
        }));
    }
    check_path_names(claim, object, driver).map_err(ClaimError)?;
    let build = || {
        last.build(s, 0)
            .map_err(|e| ClaimError(format!("{claim}: this node's devices: {e}")))
    };
    if let Some(built) = last.get() {
        match against(s, Some(bus), &built, claim, &ours) {
            Err(Miss::Stale) => {}
            Err(Miss::Refused(e)) => return Err(e),
            Ok(out) => return Ok(out),
        }
    }
    match against(s, None, &*build()?, claim, &ours) {
        Ok(out) => Ok(out),
        Err(Miss::Refused(e)) => Err(e),
        Err(Miss::Stale) => unreachable!("a fresh publication is checked without the bus"),
    }
}

/// Why a claim's devices did not resolve against one publication.
enum Miss {
    /// A device is not in it, or has moved since it was built: build it
    /// again.
    Stale,
    /// Refused for good.
    Refused(ClaimError),
}

/// `ours` resolved against `built`. With `live` (a publication built
/// earlier), a device it lacks, or whose function sysfs no longer shows in
/// the group it had, is [`Miss::Stale`]; without (one built just now), it is
/// refused.
fn against(
    s: &Settings,
    live: Option<&PciBus>,
    built: &Built,
    claim: &ClaimRef,
    ours: &[&AllocatedDevice],
) -> Result<Vec<Resolved>, Miss> {
    let refused = |m: String| Miss::Refused(ClaimError(m));
    let node = &s.plugin.node_name;
    let publication = &built.publication;
    let mut out = Vec::new();
    for r in ours {
        if r.pool != *node {
            return Err(refused(format!(
                "{claim}: device {} is in pool {:?}, not this node's ({node:?})",
                r.device, r.pool
            )));
        }
        let Some(d) = publication.devices().find(|d| d.name == r.device) else {
            if live.is_some() {
                return Err(Miss::Stale);
            }
            let why = publication
                .left_out
                .iter()
                .find(|l| {
                    p2p_allocation::dra::names::device_name(&l.kind.to_string(), l.bdf) == r.device
                })
                .map(|l| format!(" ({} is left out: {})", l.bdf, l.reason))
                .unwrap_or_default();
            return Err(refused(format!(
                "{claim}: unknown device {:?}: not one this node publishes{why}",
                r.device
            )));
        };
        let bdf: Bdf = d
            .attributes
            .get(PCI_BUS_ID)
            .and_then(|a| a.as_str())
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| refused(format!("{claim}: device {} has no PCI address", d.name)))?;
        let group = built
            .topo
            .function(bdf)
            .and_then(|f| f.iommu_group)
            .ok_or_else(|| {
                refused(format!(
                    "{claim}: device {} ({bdf}) has no IOMMU group",
                    d.name
                ))
            })?;
        if live.is_some_and(|bus| bus.iommu_group(bdf) != Some(group)) {
            return Err(Miss::Stale);
        }
        out.push(Resolved {
            alloc: (*r).clone(),
            bdf,
            group,
            published: d.clone(),
        });
    }
    Ok(out)
}
