//! A *model* of Kubernetes' structured-parameters allocator, and the clique
//! property checked with it. The model takes one claim of one-device requests
//! under one claim-level `matchAttribute` constraint (resource.k8s.io/v1
//! `DeviceConstraint`: every device of the requests must have the attribute,
//! of the same type and value; a device serves one request) and enumerates
//! every allocation it could return ([`allocations`]); [`verify_cliques`]
//! checks a publication's clique attributes with it: each allocation must be
//! one clique, and each clique an allocation.
//!
//! It is kept only as a fast property check over many generated trees and
//! every captured one (tests/tests/kubernetes/dra.rs, dra_property.rs). It is not the
//! truth: the real kube-scheduler is, and the Kubernetes tests exercise it
//! against a real control plane.
//!
//! Requests select by the `kind` attribute, which is what the DeviceClasses
//! `vp2p-gpu` and `vp2p-nic` select (their CEL is tested against this).
//!
//! The property, on a publication: two devices have equal `clique<L>`
//! exactly when their PCIe class is within L, two GPUs share a clique
//! attribute, `nvlinkDomain` or an `fmPartition<N>` exactly when the chooser
//! allows them at L ([`p2p_allocation::chooser::pair_allowed`]), and the
//! allocations of N one-device GPU requests under `matchAttribute:
//! clique<L>` are exactly the sets of N published GPUs that are one clique
//! at L.

use std::collections::BTreeSet;

use p2p_allocation::chooser::{pair_allowed, FmPartition};
use p2p_allocation::clique::MaxLevel;
use p2p_allocation::dra::{Device, DeviceKind, Publication, CLIQUE_ATTRIBUTES, PCI_BUS_ID};
use p2p_topology::classify;
use p2p_topology::{Bdf, Topology};

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

/// Every violation of the property on `p` (built from `topo` with
/// `partitions`), in words; empty when it holds. Allocations are checked for
/// 1 to `max_n` GPUs.
pub fn verify_cliques(
    topo: &Topology,
    p: &Publication,
    partitions: Option<&[FmPartition]>,
    max_n: usize,
) -> Vec<String> {
    let mut bad = Vec::new();
    let devs: Vec<&Device> = p.devices().collect();
    let bdf = |d: &Device| -> Option<Bdf> { d.attributes.get(PCI_BUS_ID)?.as_str()?.parse().ok() };
    let own = |d: &Device, id: &str| d.attributes.get(&p.attribute_name(id)).cloned();
    let is_gpu = |d: &Device| {
        own(d, "kind").and_then(|a| a.as_str().map(str::to_string)) == Some("gpu".into())
    };
    let eq = |x: &Device, y: &Device, id: &str| {
        let a = own(x, id);
        a.is_some() && a == own(y, id)
    };
    let fm_ids: BTreeSet<String> = devs
        .iter()
        .flat_map(|d| d.attributes.keys())
        .filter_map(|k| k.strip_prefix(&format!("{}/", p.driver)))
        .filter(|k| k.starts_with("fmPartition"))
        .map(str::to_string)
        .collect();
    let exact = !p.notes.iter().any(|n| n.contains("not fully connected"));
    let class = |x: &Device, y: &Device| {
        let (a, b) = (bdf(x)?, bdf(y)?);
        classify(topo, a, b).ok().map(|c| c.pcie_class)
    };
    for (i, x) in devs.iter().enumerate() {
        for y in &devs[i + 1..] {
            let Some(pcie) = class(x, y) else {
                bad.push(format!(
                    "{} or {} has no pciBusID of the topology",
                    x.name, y.name
                ));
                continue;
            };
            for (level, id) in CLIQUE_ATTRIBUTES {
                if eq(x, y, id) != pcie.within(level) {
                    bad.push(format!(
                        "{} and {}: {id} {} but their PCIe class is {pcie}",
                        x.name,
                        y.name,
                        if eq(x, y, id) { "equal" } else { "differs" }
                    ));
                }
            }
            if !(is_gpu(x) && is_gpu(y)) {
                continue;
            }
            let (Some(a), Some(b)) = (bdf(x), bdf(y)) else {
                continue;
            };
            for (level, id) in CLIQUE_ATTRIBUTES {
                let Ok(max) = MaxLevel::new(level) else {
                    continue;
                };
                let allowed = pair_allowed(topo, a, b, max, partitions);
                let equal =
                    eq(x, y, id) || eq(x, y, "nvlinkDomain") || fm_ids.iter().any(|f| eq(x, y, f));
                if (exact && equal != allowed) || (equal && !allowed) {
                    bad.push(format!(
                        "{} and {} at {level}: chooser allows {allowed}, attributes equal {equal}",
                        x.name, y.name
                    ));
                }
            }
        }
    }
    let gpus: Vec<&Device> = devs.iter().copied().filter(|d| is_gpu(d)).collect();
    for (level, id) in CLIQUE_ATTRIBUTES {
        for n in 1..=max_n.min(gpus.len()) {
            let claim = Claim {
                gpus: n,
                nics: 0,
                match_attribute: p.attribute_name(id),
            };
            let got = allocations(&p.driver, &devs, &claim);
            let mut want = BTreeSet::new();
            subsets(&gpus, n, &mut Vec::new(), 0, &mut |set: &[&Device]| {
                let clique = set.iter().enumerate().all(|(i, a)| {
                    set[i + 1..]
                        .iter()
                        .all(|c| class(a, c).is_some_and(|k| k.within(level)))
                });
                // A set is one clique at L only where its GPUs carry clique<L>
                // (a lone GPU without a switch above it has no cliquePix).
                let has = set.iter().all(|d| own(d, id).is_some());
                if clique && has {
                    let mut names: Vec<String> = set.iter().map(|d| d.name.clone()).collect();
                    names.sort();
                    want.insert(names);
                }
            });
            if got != want {
                let extra: Vec<_> = got.difference(&want).collect();
                let missing: Vec<_> = want.difference(&got).collect();
                bad.push(format!(
                    "{n} GPUs under matchAttribute {id}: not cliques {extra:?}, cliques not allocated {missing:?}"
                ));
            }
        }
    }
    bad
}

fn subsets<'a>(
    items: &[&'a Device],
    n: usize,
    cur: &mut Vec<&'a Device>,
    from: usize,
    f: &mut dyn FnMut(&[&'a Device]),
) {
    if cur.len() == n {
        f(cur);
        return;
    }
    for i in from..items.len() {
        cur.push(items[i]);
        subsets(items, n, cur, i + 1, f);
        cur.pop();
    }
}
