//! Where a VM landed, what it got, and the greedy heuristic: an offline
//! placer that sees every node's tree and the whole arrival list at once.
//! It places the VMs of one size first, then the others largest first;
//! each VM on the devices with the best worst-pair class (then the nearest
//! NIC, then the fullest node, then the set that leaves the best pairs
//! free). A heuristic beside the exact optimum (super::optimum), not a bound.

use super::arrivals::Vm;
use super::trees::{Class, Shape};

/// One admitted VM.
#[derive(Debug, Clone, PartialEq)]
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
        shape.vm_classes(&self.gpus, self.nic.as_deref())
    }
}

/// What is free on each node while the heuristic places: device indices of
/// the node's [`Shape::matrix`].
struct Free {
    gpus: Vec<usize>,
    nics: Vec<usize>,
}

/// The greedy placement of `vms` on `nodes` (shapes by node), VMs of
/// `first` GPUs placed first: the admitted VMs, and the VMs it could not
/// place anywhere.
pub fn greedy(nodes: &[&Shape], vms: &[Vm], first: u8) -> (Vec<Placed>, Vec<Vm>) {
    let mut free: Vec<Free> = nodes
        .iter()
        .map(|s| Free {
            gpus: s.gpus.keys().map(|n| s.index[n]).collect(),
            nics: s.nics.keys().map(|n| s.index[n]).collect(),
        })
        .collect();
    let mut order: Vec<&Vm> = vms.iter().collect();
    order.sort_by_key(|v| (v.gpus != first, std::cmp::Reverse(v.gpus), v.index));
    let (mut placed, mut rejected) = (Vec::new(), Vec::new());
    for vm in order {
        match best(nodes, &free, vm) {
            Some((node, set, nic)) => {
                let f = &mut free[node];
                f.gpus.retain(|g| !set.contains(g));
                if let Some(n) = nic {
                    f.nics.retain(|&x| x != n);
                }
                let names = names_by_index(nodes[node]);
                placed.push(Placed {
                    vm: *vm,
                    node,
                    gpus: set.iter().map(|&i| names[i].clone()).collect(),
                    nic: nic.map(|i| names[i].clone()),
                });
            }
            None => rejected.push(*vm),
        }
    }
    placed.sort_by_key(|p| p.vm.index);
    rejected.sort_by_key(|v| v.index);
    (placed, rejected)
}

/// Device names of `shape` by index.
fn names_by_index(shape: &Shape) -> Vec<String> {
    let mut names = vec![String::new(); shape.index.len()];
    for (n, &i) in &shape.index {
        names[i] = n.clone();
    }
    names
}

/// A place for a VM: (node, GPU indices, NIC index).
type Spot = (usize, Vec<usize>, Option<usize>);

/// The best place for `vm` now, by (worst
/// GPU class, NIC class, GPUs left free on the node, quality of the pairs
/// left free).
fn best(nodes: &[&Shape], free: &[Free], vm: &Vm) -> Option<Spot> {
    type Key = (Class, Option<Class>, usize, std::cmp::Reverse<u32>);
    let mut best: Option<(Key, Spot)> = None;
    let n = vm.gpus as usize;
    for (i, shape) in nodes.iter().enumerate() {
        let f = &free[i];
        if f.gpus.len() < n || (vm.nic && f.nics.is_empty()) {
            continue;
        }
        let m = &shape.matrix;
        for set in combinations(&f.gpus, n) {
            let worst = shape.worst_of(&set);
            let nic = if vm.nic {
                let (c, x) = f
                    .nics
                    .iter()
                    .map(|&x| (set.iter().map(|&g| m[g][x]).max().unwrap_or(Class::Sys), x))
                    .min()?;
                (Some(c), Some(x))
            } else {
                (None, None)
            };
            let left: Vec<usize> = f
                .gpus
                .iter()
                .copied()
                .filter(|g| !set.contains(g))
                .collect();
            let key = (
                worst,
                nic.0,
                left.len(),
                std::cmp::Reverse(pair_quality(m, &left)),
            );
            if best.as_ref().is_none_or(|(k, _)| key < *k) {
                best = Some((key, (i, set, nic.1)));
            }
        }
    }
    best.map(|(_, p)| p)
}

/// How good the pairs among `gpus` are: 5 for NVLink down to 0 for SYS, summed.
fn pair_quality(m: &[Vec<Class>], gpus: &[usize]) -> u32 {
    let mut q = 0;
    for (k, &a) in gpus.iter().enumerate() {
        for &b in &gpus[k + 1..] {
            q += 5 - m[a][b] as u32;
        }
    }
    q
}

/// Every `k`-subset of `items`, in lexicographic order of positions.
pub fn combinations<T: Copy>(items: &[T], k: usize) -> Vec<Vec<T>> {
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
    use std::collections::BTreeSet;

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
