//! Scoring candidate sets: the pair classes among the free GPUs computed once,
//! candidate sets generated from IOMMU-group units, and the ordering key.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use crate::clique::MaxLevel;
use p2p_topology::bdf::Bdf;
use p2p_topology::classify::PathClass;
use p2p_topology::topology::Topology;

use super::{fm::FmPartition, pair_class};

/// Above this many enumerated sets, candidates come from greedy growth instead.
const EXHAUSTIVE_LIMIT: usize = 256;

/// Pair classes among the free GPUs, and from every free NIC to them.
pub(super) struct Matrix {
    index: BTreeMap<Bdf, usize>,
    /// 0 for NVLink or one FM partition, then PIX=1 .. SYS=5.
    rank: Vec<Vec<u8>>,
    class: Vec<Vec<PathClass>>,
    allowed: Vec<Vec<bool>>,
    /// `nic[k][i]`: rank and class from free NIC k to free GPU i.
    nic: Vec<Vec<(u8, PathClass)>>,
    nics: Vec<Bdf>,
}

/// Whether two GPUs sit in one Fabric Manager partition of the list.
pub(super) fn same_partition(partitions: Option<&[FmPartition]>, a: Bdf, b: Bdf) -> bool {
    partitions.is_some_and(|ps| {
        ps.iter()
            .any(|p| p.gpus.contains(&a) && p.gpus.contains(&b))
    })
}

/// The policy on one pair: NVLink or one partition (rank 0), or PCIe within the level.
pub(super) fn allows(rank: u8, pcie: PathClass, level: MaxLevel) -> bool {
    rank == 0 || pcie.within(level.class())
}

pub(super) fn rank_of(class: PathClass, pcie: PathClass) -> u8 {
    match class {
        PathClass::Nv(_) => 0,
        _ => pcie.pcie_rank().map_or(5, |r| r + 1),
    }
}

impl Matrix {
    /// Classifies every pair of `gpus` under `level`; GPUs of one FM partition
    /// count as NVLink-joined (the partition is one NVSwitch fabric).
    pub(super) fn new(
        topo: &Topology,
        gpus: &[Bdf],
        nics: &[Bdf],
        level: MaxLevel,
        partitions: Option<&[FmPartition]>,
    ) -> Self {
        let n = gpus.len();
        let index = gpus.iter().enumerate().map(|(i, b)| (*b, i)).collect();
        let mut rank = vec![vec![0; n]; n];
        let mut class = vec![vec![PathClass::X; n]; n];
        let mut allowed = vec![vec![true; n]; n];
        for i in 0..n {
            for j in i + 1..n {
                let (c, pcie) = pair_class(topo, gpus[i], gpus[j]);
                let r = if same_partition(partitions, gpus[i], gpus[j]) {
                    0
                } else {
                    rank_of(c, pcie)
                };
                let ok = allows(r, pcie, level);
                rank[i][j] = r;
                rank[j][i] = r;
                class[i][j] = c;
                class[j][i] = c;
                allowed[i][j] = ok;
                allowed[j][i] = ok;
            }
        }
        let nic = nics
            .iter()
            .map(|n| {
                gpus.iter()
                    .map(|g| {
                        let (c, pcie) = pair_class(topo, *n, *g);
                        (rank_of(c, pcie), c)
                    })
                    .collect()
            })
            .collect();
        Self {
            index,
            rank,
            class,
            allowed,
            nic,
            nics: nics.to_vec(),
        }
    }

    fn at(&self, b: Bdf) -> usize {
        self.index[&b]
    }

    /// The class between two free GPUs.
    pub(super) fn class(&self, a: Bdf, b: Bdf) -> PathClass {
        self.class[self.at(a)][self.at(b)]
    }

    /// GPUs in the largest block of `set` joined by allowed pairs.
    pub(super) fn largest_block(&self, set: &[Bdf]) -> usize {
        let idx: Vec<usize> = set.iter().map(|b| self.at(*b)).collect();
        let mut seen = vec![false; idx.len()];
        let mut largest = 0;
        for start in 0..idx.len() {
            if seen[start] {
                continue;
            }
            seen[start] = true;
            let (mut stack, mut size) = (vec![start], 0);
            while let Some(k) = stack.pop() {
                size += 1;
                for m in 0..idx.len() {
                    if !seen[m] && self.allowed[idx[k]][idx[m]] {
                        seen[m] = true;
                        stack.push(m);
                    }
                }
            }
            largest = largest.max(size);
        }
        largest
    }
}

/// The ordering key of a candidate: smaller is better, field by field.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Key {
    not_clique: bool,
    worst: u8,
    nic_cost: u32,
    numa_count: usize,
    free: Reverse<usize>,
    sum: u32,
    gpus: Vec<Bdf>,
}

impl Key {
    pub(super) fn one_clique(&self) -> bool {
        !self.not_clique
    }
}

/// One candidate set with what it is judged on.
pub(super) struct Candidate {
    pub(super) gpus: Vec<Bdf>,
    pub(super) nics: Vec<(Bdf, PathClass)>,
    pub(super) worst_class: PathClass,
    pub(super) numa: Vec<u32>,
    pub(super) largest_free: usize,
    pub(super) key: Key,
}

impl Candidate {
    /// Judges `gpus` (address order) against the other free GPUs and the NICs.
    pub(super) fn new(
        topo: &Topology,
        gpus: Vec<Bdf>,
        free_gpus: &[Bdf],
        want_nics: usize,
        m: &Matrix,
    ) -> Self {
        let (mut worst, mut worst_class, mut sum, mut clique) = (0u8, PathClass::X, 0u32, true);
        for (k, a) in gpus.iter().enumerate() {
            for b in &gpus[k + 1..] {
                let (i, j) = (m.at(*a), m.at(*b));
                sum += u32::from(m.rank[i][j]);
                clique &= m.allowed[i][j];
                if m.rank[i][j] >= worst {
                    worst = m.rank[i][j];
                    worst_class = m.class[i][j];
                }
            }
        }
        // Each NIC's distance is its nearest chosen GPU's; take the nearest NICs.
        let mut nic_rank: Vec<(u8, Bdf, PathClass)> = m
            .nics
            .iter()
            .zip(&m.nic)
            .map(|(n, row)| {
                gpus.iter()
                    .map(|g| (row[m.at(*g)].0, *n, row[m.at(*g)].1))
                    .min_by_key(|(r, _, _)| *r)
                    .unwrap_or((5, *n, PathClass::Sys))
            })
            .collect();
        if want_nics == 0 {
            nic_rank.clear();
        }
        nic_rank.sort_by_key(|(r, b, _)| (*r, *b));
        nic_rank.truncate(want_nics);
        let nic_cost = nic_rank.iter().map(|(r, _, _)| u32::from(*r)).sum();
        let mut nics: Vec<(Bdf, PathClass)> = nic_rank.iter().map(|(_, b, c)| (*b, *c)).collect();
        nics.sort_by_key(|(b, _)| *b);
        let numa_all: BTreeSet<Option<u32>> = gpus.iter().map(|g| topo.numa_of(*g)).collect();
        let numa: Vec<u32> = numa_all.iter().flatten().copied().collect();
        let left: Vec<Bdf> = free_gpus
            .iter()
            .filter(|g| !gpus.contains(g))
            .copied()
            .collect();
        let largest_free = m.largest_block(&left);
        let key = Key {
            not_clique: !clique,
            worst,
            nic_cost,
            numa_count: numa_all.len(),
            free: Reverse(largest_free),
            sum,
            gpus: gpus.clone(),
        };
        Self {
            gpus,
            nics,
            worst_class,
            numa,
            largest_free,
            key,
        }
    }
}

/// Why `other` lost to `best`: the first criterion that tells them apart.
pub(super) fn why_not(best: &Candidate, other: &Candidate, level: MaxLevel) -> String {
    let (b, o) = (&best.key, &other.key);
    if b.not_clique != o.not_clique {
        format!("not one clique under {level}")
    } else if b.worst != o.worst {
        format!(
            "worst pair {}, farther than {}",
            other.worst_class, best.worst_class
        )
    } else if b.nic_cost != o.nic_cost {
        "its nearest NICs are farther".to_string()
    } else if b.numa_count != o.numa_count {
        format!("spans {} NUMA nodes", o.numa_count)
    } else if b.free != o.free {
        format!(
            "leaves a largest free block of {} GPUs, not {}",
            other.largest_free, best.largest_free
        )
    } else if b.sum != o.sum {
        "its pairs are farther in sum".to_string()
    } else {
        "as good; the chosen set has lower addresses".to_string()
    }
}

/// Candidate GPU sets of exactly `n`: every unit holding a must-include GPU,
/// then other whole units. All combinations when they are few, else greedy
/// growth from every unit (nearest unit first).
pub(super) fn candidate_sets(
    units: &[Vec<Bdf>],
    must: &BTreeSet<Bdf>,
    n: usize,
    m: &Matrix,
) -> Vec<Vec<Bdf>> {
    let (base, others): (Vec<&Vec<Bdf>>, Vec<&Vec<Bdf>>) = units
        .iter()
        .partition(|u| u.iter().any(|g| must.contains(g)));
    let base: Vec<Bdf> = base.into_iter().flatten().copied().collect();
    if base.len() > n {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut pick = Vec::new();
    if enumerate(&others, 0, n - base.len(), &mut pick, &base, &mut out) {
        return finish(out);
    }
    out.clear();
    let mut seeds: Vec<Vec<Bdf>> = Vec::new();
    if base.is_empty() {
        seeds.extend(others.iter().map(|u| u.to_vec()));
    } else {
        seeds.push(base.clone());
    }
    for seed in seeds {
        if let Some(set) = grow(seed, &others, n, m) {
            out.push(set);
        }
    }
    finish(out)
}

fn finish(mut sets: Vec<Vec<Bdf>>) -> Vec<Vec<Bdf>> {
    for s in &mut sets {
        s.sort();
    }
    sets.sort();
    sets.dedup();
    sets
}

/// Every combination of units from `from` adding to `left` GPUs; false when
/// there are more than [`EXHAUSTIVE_LIMIT`].
fn enumerate<'a>(
    units: &[&'a Vec<Bdf>],
    from: usize,
    left: usize,
    pick: &mut Vec<&'a Vec<Bdf>>,
    base: &[Bdf],
    out: &mut Vec<Vec<Bdf>>,
) -> bool {
    if left == 0 {
        let set = base.iter().chain(pick.iter().copied().flatten()).copied();
        out.push(set.collect());
        return out.len() <= EXHAUSTIVE_LIMIT;
    }
    for k in from..units.len() {
        if units[k].len() <= left {
            pick.push(units[k]);
            let ok = enumerate(units, k + 1, left - units[k].len(), pick, base, out);
            pick.pop();
            if !ok {
                return false;
            }
        }
    }
    true
}

/// Grows `set` to `n` GPUs, each step adding the unit nearest the set (its
/// farthest pair to the set, then the sum, then its address).
fn grow(mut set: Vec<Bdf>, units: &[&Vec<Bdf>], n: usize, m: &Matrix) -> Option<Vec<Bdf>> {
    let mut used: Vec<bool> = units
        .iter()
        .map(|u| u.iter().all(|g| set.contains(g)))
        .collect();
    while set.len() < n {
        let mut best: Option<((u8, u32, Bdf), usize)> = None;
        for (k, u) in units.iter().enumerate() {
            if used[k] || set.len() + u.len() > n {
                continue;
            }
            let (mut far, mut sum) = (0u8, 0u32);
            for a in u.iter() {
                for b in &set {
                    let r = m.rank[m.at(*a)][m.at(*b)];
                    far = far.max(r);
                    sum += u32::from(r);
                }
            }
            let cost = (far, sum, u[0]);
            if best.as_ref().is_none_or(|(c, _)| cost < *c) {
                best = Some((cost, k));
            }
        }
        let (_, k) = best?;
        used[k] = true;
        set.extend(units[k].iter().copied());
    }
    Some(set)
}
