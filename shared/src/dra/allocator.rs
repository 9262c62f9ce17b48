//! A model of what Kubernetes' structured-parameters allocator does with one
//! claim of one-device requests under one claim-level `matchAttribute`
//! constraint (resource.k8s.io/v1 `DeviceConstraint`: every device of the
//! requests must have the attribute, of the same type and value; a device
//! serves one request), enumerating every allocation it could return. It
//! checks the clique attributes: each allocation must be one clique.
//!
//! Requests select by the `kind` attribute, which is what the DeviceClasses
//! `vp2p-gpu` and `vp2p-nic` select (their CEL is tested against this).

use std::collections::BTreeSet;

use super::{Device, DeviceKind};

/// One claim: how many one-device requests of each kind, and the attribute
/// every allocated device must share (fully qualified, `domain/id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// One-device requests for GPUs.
    pub gpus: usize,
    /// One-device requests for NICs.
    pub nics: usize,
    /// The `matchAttribute` of the claim's one constraint.
    pub match_attribute: String,
}

/// Every allocation of `claim` against `devices` (one node's pool), each as
/// the sorted device names; as sets, so request order does not multiply them.
pub fn allocations(driver: &str, devices: &[&Device], claim: &Claim) -> BTreeSet<Vec<String>> {
    let kind = |d: &Device, k: DeviceKind| {
        d.attribute(driver, &format!("{driver}/kind"))
            .and_then(|a| a.as_str())
            == Some(&k.to_string())
    };
    let gpus: Vec<&Device> = devices
        .iter()
        .copied()
        .filter(|d| kind(d, DeviceKind::Gpu))
        .collect();
    let nics: Vec<&Device> = devices
        .iter()
        .copied()
        .filter(|d| kind(d, DeviceKind::Nic))
        .collect();
    let mut out = BTreeSet::new();
    let mut chosen = Vec::new();
    search(driver, claim, &gpus, &nics, 0, 0, &mut chosen, &mut out);
    out
}

/// Depth first: GPUs in address order from `gi`, then NICs from `ni`,
/// pruning as soon as a device breaks the constraint (as the allocator does).
#[allow(clippy::too_many_arguments)]
fn search<'a>(
    driver: &str,
    claim: &Claim,
    gpus: &[&'a Device],
    nics: &[&'a Device],
    gi: usize,
    ni: usize,
    chosen: &mut Vec<&'a Device>,
    out: &mut BTreeSet<Vec<String>>,
) {
    let g_taken = chosen.len().min(claim.gpus);
    if chosen.len() == claim.gpus + claim.nics {
        let mut names: Vec<String> = chosen.iter().map(|d| d.name.clone()).collect();
        names.sort();
        out.insert(names);
        return;
    }
    let fits = |d: &Device, chosen: &[&Device]| {
        let Some(v) = d.attribute(driver, &claim.match_attribute) else {
            return false;
        };
        chosen
            .first()
            .is_none_or(|c| c.attribute(driver, &claim.match_attribute) == Some(v))
    };
    if g_taken < claim.gpus {
        for i in gi..gpus.len() {
            if fits(gpus[i], chosen) {
                chosen.push(gpus[i]);
                search(driver, claim, gpus, nics, i + 1, ni, chosen, out);
                chosen.pop();
            }
        }
    } else {
        for i in ni..nics.len() {
            if fits(nics[i], chosen) {
                chosen.push(nics[i]);
                search(driver, claim, gpus, nics, gi, i + 1, chosen, out);
                chosen.pop();
            }
        }
    }
}
