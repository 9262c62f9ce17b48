//! Where a VM landed, what it got, and the offline oracle: a placer that sees
//! every node's tree and the whole arrival list at once, places the largest
//! VMs first, each on the devices with the best worst-pair class (then the
//! nearest NIC, then the fullest node, then the set that leaves the best
//! pairs free). It is the reference the scheduler's figures are measured
//! against: no scheduler that places VMs one at a time in arrival order has
//! that knowledge. It is a greedy bound, not a proven optimum.

use std::collections::BTreeSet;

use super::arrivals::Vm;
use super::trees::{Class, Shape};

/// One admitted VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// The VM.
    pub vm: Vm,
    /// The node's index in the fleet.
    pub node: usize,
    /// Its GPUs' device names.
    pub gpus: Vec<String>,
    /// Its NIC's device name, when it asked for one.
    pub nic: Option<String>,
}

impl Placed {
    /// The worst class among its GPUs, and between its GPUs and its NIC.
    pub fn classes(&self, shape: &Shape) -> (Class, Option<Class>) {
        let g: Vec<&str> = self.gpus.iter().map(String::as_str).collect();
        (
            shape.worst(&g),
            self.nic.as_deref().map(|n| shape.nic_class(&g, n)),
        )
    }
}

/// What is free on each node while the oracle places.
struct Free {
    gpus: BTreeSet<String>,
    nics: BTreeSet<String>,
}

/// The oracle's placement of `vms` on `nodes` (shapes by node): the admitted
/// VMs, and the VMs it could not place anywhere.
pub fn oracle(nodes: &[&Shape], vms: &[Vm]) -> (Vec<Placed>, Vec<Vm>) {
    let mut free: Vec<Free> = nodes
        .iter()
        .map(|s| Free {
            gpus: s.gpus.keys().cloned().collect(),
            nics: s.nics.keys().cloned().collect(),
        })
        .collect();
    let mut order: Vec<&Vm> = vms.iter().collect();
    order.sort_by_key(|v| (std::cmp::Reverse(v.gpus), v.index));
    let (mut placed, mut rejected) = (Vec::new(), Vec::new());
    for vm in order {
        match best(nodes, &free, vm) {
            Some(p) => {
                let f = &mut free[p.node];
                for g in &p.gpus {
                    f.gpus.remove(g);
                }
                if let Some(n) = &p.nic {
                    f.nics.remove(n);
                }
                placed.push(p);
            }
            None => rejected.push(*vm),
        }
    }
    placed.sort_by_key(|p| p.vm.index);
    rejected.sort_by_key(|v| v.index);
    (placed, rejected)
}

/// The best place for `vm` now, by (worst GPU class, NIC class, GPUs left
/// free on the node, quality of the pairs left free).
fn best(nodes: &[&Shape], free: &[Free], vm: &Vm) -> Option<Placed> {
    type Key = (Class, Option<Class>, usize, std::cmp::Reverse<u32>);
    let mut best: Option<(Key, Placed)> = None;
    let n = vm.gpus as usize;
    for (i, shape) in nodes.iter().enumerate() {
        let f = &free[i];
        if f.gpus.len() < n || (vm.nic && f.nics.is_empty()) {
            continue;
        }
        let pool: Vec<&str> = f.gpus.iter().map(String::as_str).collect();
        for set in combinations(&pool, n) {
            let worst = shape.worst(&set);
            let nic = if vm.nic {
                f.nics
                    .iter()
                    .map(|c| (shape.nic_class(&set, c), c))
                    .min()
                    .map(|(c, name)| (Some(c), Some(name.clone())))
            } else {
                Some((None, None))
            };
            let Some((nic_class, nic_name)) = nic else { continue };
            let left: Vec<&str> = pool.iter().copied().filter(|g| !set.contains(g)).collect();
            let key = (
                worst,
                nic_class,
                left.len(),
                std::cmp::Reverse(pair_quality(shape, &left)),
            );
            if best.as_ref().is_none_or(|(k, _)| key < *k) {
                best = Some((
                    key,
                    Placed {
                        vm: *vm,
                        node: i,
                        gpus: set.iter().map(|s| s.to_string()).collect(),
                        nic: nic_name,
                    },
                ));
            }
        }
    }
    best.map(|(_, p)| p)
}

/// How good the pairs among `gpus` are: 5 for NVLink down to 0 for SYS, summed.
fn pair_quality(shape: &Shape, gpus: &[&str]) -> u32 {
    let mut q = 0;
    for (i, a) in gpus.iter().enumerate() {
        for b in &gpus[i + 1..] {
            q += 5 - shape.class(a, b) as u32;
        }
    }
    q
}

/// Every `k`-subset of `items`, in lexicographic order of positions.
pub fn combinations<'a>(items: &[&'a str], k: usize) -> Vec<Vec<&'a str>> {
    let mut out = Vec::new();
    if k > items.len() {
        return out;
    }
    let mut idx: Vec<usize> = (0..k).collect();
    loop {
        out.push(idx.iter().map(|&i| items[i]).collect());
        let Some(pos) = (0..k).rev().find(|&p| idx[p] != p + items.len() - k) else {
            return out;
        };
        idx[pos] += 1;
        for j in pos + 1..k {
            idx[j] = idx[j - 1] + 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combinations_count_is_the_binomial_coefficient() {
        let items = ["a", "b", "c", "d", "e", "f", "g", "h"];
        for (k, want) in [(1, 8), (2, 28), (4, 70), (8, 1), (9, 0)] {
            let c = combinations(&items, k);
            assert_eq!(c.len(), want, "C(8,{k})");
            let distinct: BTreeSet<_> = c.iter().cloned().collect();
            assert_eq!(distinct.len(), want);
        }
    }
}
