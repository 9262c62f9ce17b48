//! A claim's allocation resolved against this node: each device the
//! scheduler gave this driver found among the devices the node publishes
//! now, with its PCI address and IOMMU group. Reads only (the API server's
//! object is already in hand, sysfs is read here); nothing is held.

use std::collections::BTreeSet;

use p2p_allocation::dra::claim::{AllocatedDevice, ResourceClaim};
use p2p_allocation::dra::{Device, PCI_BUS_ID};
use p2p_topology::Bdf;

use super::claims::ClaimRef;
use super::prepare::ClaimError;
use super::Settings;

/// One device of a claim, resolved against this node's tree.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The allocation result naming it.
    pub alloc: AllocatedDevice,
    /// Its PCI address.
    pub bdf: Bdf,
    /// Its IOMMU group.
    pub group: u32,
    /// The device as the node's slices publish it (its attributes go into
    /// the device metadata).
    pub published: Device,
}

/// The devices of `object` allocated from driver `settings.driver_name`,
/// resolved; refused, naming the device, when one is not in this node's
/// pool, not published (with the reason it is left out), or has no address
/// or group.
pub fn resolve(
    s: &Settings,
    claim: &ClaimRef,
    object: &ResourceClaim,
) -> Result<Vec<Resolved>, ClaimError> {
    let ours: Vec<&AllocatedDevice> = object
        .results()
        .iter()
        .filter(|r| r.driver == s.driver_name)
        .collect();
    if ours.is_empty() {
        let others: BTreeSet<&str> = object.results().iter().map(|r| r.driver.as_str()).collect();
        return Err(ClaimError(if others.is_empty() {
            format!("{claim}: not allocated (no devices in its status)")
        } else {
            format!(
                "{claim}: no device of driver {} (its devices are of {})",
                s.driver_name,
                others.into_iter().collect::<Vec<_>>().join(", ")
            )
        }));
    }
    super::claims::check_path_names(claim, object, &s.driver_name).map_err(ClaimError)?;
    let (topo, publication) =
        super::build(s, 0).map_err(|e| ClaimError(format!("{claim}: this node's devices: {e}")))?;
    let mut out = Vec::new();
    for r in ours {
        if r.pool != s.node_name {
            return Err(ClaimError(format!(
                "{claim}: device {} is in pool {:?}, not this node's ({:?})",
                r.device, r.pool, s.node_name
            )));
        }
        let Some(d) = publication.devices().find(|d| d.name == r.device) else {
            let why = publication
                .left_out
                .iter()
                .find(|l| {
                    p2p_allocation::dra::names::device_name(&l.kind.to_string(), l.bdf) == r.device
                })
                .map(|l| format!(" ({} is left out: {})", l.bdf, l.reason))
                .unwrap_or_default();
            return Err(ClaimError(format!(
                "{claim}: unknown device {:?}: not one this node publishes{why}",
                r.device
            )));
        };
        let bdf: Bdf = d
            .attributes
            .get(PCI_BUS_ID)
            .and_then(|a| a.as_str())
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| ClaimError(format!("{claim}: device {} has no PCI address", d.name)))?;
        let group = topo
            .function(bdf)
            .and_then(|f| f.iommu_group)
            .ok_or_else(|| {
                ClaimError(format!(
                    "{claim}: device {} ({bdf}) has no IOMMU group",
                    d.name
                ))
            })?;
        out.push(Resolved {
            alloc: r.clone(),
            bdf,
            group,
            published: d.clone(),
        });
    }
    Ok(out)
}
