//! The property that makes the clique attributes right, as a check any test
//! or benchmark can run on a publication: two devices have equal
//! `clique<L>` exactly when their PCIe class is within L, two GPUs share a
//! clique attribute, `nvlinkDomain` or an `fmPartition<N>` exactly when the
//! chooser allows them at L ([`crate::chooser::pair_allowed`]), and the
//! allocations of N one-device GPU requests under `matchAttribute:
//! clique<L>` ([`super::allocations`]) are exactly the sets of N published
//! GPUs that are one clique at L.

use std::collections::BTreeSet;

use super::{allocations, Claim, Device, Publication, CLIQUE_ATTRIBUTES, PCI_BUS_ID};
use crate::bdf::Bdf;
use crate::chooser::{pair_allowed, FmPartition};
use crate::classify::classify;
use crate::clique::MaxLevel;
use crate::topology::Topology;

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
