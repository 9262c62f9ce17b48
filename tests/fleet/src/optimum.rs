//! The offline optimum of the fill regime: the most VMs of an arrival list
//! that the fleet can hold at once, and the most of them well placed, found
//! by an integer program solved to optimality (good_lp's model over microlp,
//! a pure-Rust simplex with branch and bound). No policy, online
//! or not, ends a fill run with more: the fill regime has no departures, so
//! whatever a policy holds at the end is one packing of a subset of the
//! arrivals, and the program maximises over every such packing.
//!
//! The program is small because nodes of one shape are interchangeable: a
//! node's packing matters only through its [`Signature`] (VMs of each size
//! it holds, and how many of them are well placed), so the variables are
//! "nodes of shape S packed as signature P" (Gilmore and Gomory's pattern
//! formulation of cutting stock, Operations Research 9(6), 1961), with one
//! row per shape (its nodes) and one per size (its arrivals). Its LP
//! relaxation is solved too and reported as the bound beside it.

use std::collections::{BTreeMap, BTreeSet};

use good_lp::{constraint, microlp, variable, Expression, ProblemVariables, Solution, SolverModel};

use super::arrivals::Vm;
use super::trees::{Class, Shape};

/// The VM sizes, in the order of a signature's counts.
pub const SIZES: [u8; 3] = [2, 4, 8];

/// Whether a VM of `gpus` whose worst GPU pair is `worst` is well placed:
/// a 2-GPU VM on a switch-local pair (NV, PIX, PXB), a 4-GPU VM within one
/// NUMA node (NV .. NODE), an 8-GPU VM wherever it fits (it takes a node).
pub fn well_placed(gpus: u8, worst: Class) -> bool {
    match gpus {
        2 => worst <= Class::Pxb,
        4 => worst <= Class::Node,
        _ => true,
    }
}

/// What one node's packing holds: per size (of [`SIZES`]) the VMs, and how
/// many of them are well placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Signature {
    /// VMs of each size.
    pub placed: [u32; 3],
    /// Of those, well placed.
    pub well: [u32; 3],
}

impl Signature {
    fn with(mut self, size: usize, well: bool) -> Self {
        self.placed[size] += 1;
        self.well[size] += u32::from(well);
        self
    }
}

/// Every signature a node of `shape` can hold (leaving GPUs idle included):
/// VMs on disjoint GPUs, each 4-GPU VM with a NIC of its own (the mix's
/// 4-GPU VMs ask for one).
pub fn signatures(shape: &Shape) -> Result<BTreeSet<Signature>, String> {
    let gpus = shape.gpus.len();
    if gpus > 16 {
        return Err(format!(
            "shape {}: {gpus} GPUs; the optimum enumerates packings of at most 16",
            shape.name
        ));
    }
    let mut memo = BTreeMap::new();
    let all = (1u32 << gpus) - 1;
    Ok(packings(shape, all, shape.nics.len(), &mut memo))
}

type Memo = BTreeMap<(u32, usize), BTreeSet<Signature>>;

/// The signatures of packings of the GPUs in `free` with `nics` NICs.
fn packings(shape: &Shape, free: u32, nics: usize, memo: &mut Memo) -> BTreeSet<Signature> {
    if free == 0 {
        return BTreeSet::from([Signature::default()]);
    }
    if let Some(s) = memo.get(&(free, nics)) {
        return s.clone();
    }
    let first = free.trailing_zeros() as usize;
    let rest = free & !(1 << first);
    // The first free GPU stays idle, or is in a VM of some size.
    let mut out = packings(shape, rest, nics, memo);
    let others: Vec<usize> = (0..32).filter(|i| rest & (1 << i) != 0).collect();
    for (size_index, size) in SIZES.iter().enumerate() {
        let k = usize::from(*size) - 1;
        let needs_nic = *size == 4;
        if k > others.len() || (needs_nic && nics == 0) {
            continue;
        }
        for set in super::placement::combinations(&others, k) {
            let mut members = set.clone();
            members.push(first);
            let worst = shape.worst_of(&members);
            let left = set.iter().fold(rest, |f, &g| f & !(1 << g));
            let nics_left = nics - usize::from(needs_nic);
            for s in packings(shape, left, nics_left, memo) {
                out.insert(s.with(size_index, well_placed(*size, worst)));
            }
        }
    }
    memo.insert((free, nics), out.clone());
    out
}

/// What the program maximises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Objective {
    /// VMs placed, then (among packings placing that many) VMs well placed.
    PlacedThenWell,
    /// VMs well placed, whatever is placed beside them.
    Well,
}

impl Objective {
    /// Its name in records.
    pub fn name(self) -> &'static str {
        match self {
            Objective::PlacedThenWell => "placed-then-well",
            Objective::Well => "well",
        }
    }
}

/// One solved program.
#[derive(Debug, Clone, PartialEq)]
pub struct Optimum {
    /// What was maximised.
    pub objective: Objective,
    /// VMs placed per size (of [`SIZES`]) in the best packing found.
    pub placed: [u32; 3],
    /// Of those, well placed.
    pub well: [u32; 3],
    /// The LP relaxation's maximum of the objective's leading count (VMs
    /// placed, or well placed): no packing exceeds it.
    pub lp_bound: f64,
    /// Whether the packing's leading count is proven the most any packing
    /// reaches: it meets the bound's floor, or branch and bound finished.
    pub exact: bool,
}

impl Optimum {
    /// The leading count the objective maximised.
    pub fn count(&self) -> u32 {
        lead_of(self.objective, &self.placed, &self.well)
    }
}

fn lead_of(objective: Objective, placed: &[u32; 3], well: &[u32; 3]) -> u32 {
    match objective {
        Objective::PlacedThenWell => placed.iter().sum(),
        Objective::Well => well.iter().sum(),
    }
}

/// Fleets of at most this many nodes whose rounded packing is not proven
/// optimal go to branch and bound; larger ones report the packing beside
/// the bound (microlp's branch and bound ran past three minutes on a
/// 200-node fleet).
pub const BRANCH_AND_BOUND_NODES: usize = 40;

/// The optimum of `objective` for nodes of `shapes` (one entry per node)
/// and the arrivals `vms` (their sizes; order and times do not matter when
/// nobody leaves).
///
/// The LP relaxation is solved first; its solution rounded down, with each
/// node left over given the best signature that still fits, is a packing.
/// When that packing's leading count meets the floor of the relaxation's
/// bound it is optimal; otherwise a fleet of at most
/// [`BRANCH_AND_BOUND_NODES`] is solved exactly, and a larger one reports
/// the packing with `exact` false.
pub fn solve(shapes: &[&Shape], vms: &[Vm], objective: Objective) -> Result<Optimum, String> {
    let mut by_shape: BTreeMap<&str, (usize, &Shape)> = BTreeMap::new();
    for s in shapes {
        by_shape.entry(s.name.as_str()).or_insert((0, s)).0 += 1;
    }
    let arrived: [u32; 3] = SIZES.map(|g| vms.iter().filter(|v| v.gpus == g).count() as u32);
    let mut columns = Vec::new();
    for (name, (count, shape)) in &by_shape {
        for sig in signatures(shape)? {
            columns.push((*name, *count, sig));
        }
    }
    // The leading count weighs more than every well-placed VM together.
    let weight = 1.0 + vms.len() as f64;
    let lead = |sig: &Signature| f64::from(lead_of(objective, &sig.placed, &sig.well));
    let value = |sig: &Signature| -> f64 {
        let well: u32 = sig.well.iter().sum();
        match objective {
            Objective::PlacedThenWell => weight * lead(sig) + f64::from(well),
            Objective::Well => f64::from(well),
        }
    };
    let bound_lp = run(&columns, &by_shape, &arrived, &lead, false)?;
    let lp_bound: f64 = columns
        .iter()
        .zip(&bound_lp)
        .map(|((_, _, sig), y)| y * lead(sig))
        .sum();
    let relaxed = run(&columns, &by_shape, &arrived, &value, false)?;
    let mut y = rounded(&columns, &by_shape, &arrived, &relaxed, &value);
    let packing = |y: &[f64]| {
        let (mut placed, mut well) = ([0u32; 3], [0u32; 3]);
        for ((_, _, sig), n) in columns.iter().zip(y) {
            let n = n.round() as u32;
            for i in 0..3 {
                placed[i] += n * sig.placed[i];
                well[i] += n * sig.well[i];
            }
        }
        (placed, well)
    };
    let (placed, well) = packing(&y);
    let mut exact = f64::from(lead_of(objective, &placed, &well)) >= (lp_bound + 1e-6).floor();
    if !exact && shapes.len() <= BRANCH_AND_BOUND_NODES {
        y = run(&columns, &by_shape, &arrived, &value, true)?;
        exact = true;
    }
    let (placed, well) = packing(&y);
    Ok(Optimum {
        objective,
        placed,
        well,
        lp_bound,
        exact,
    })
}

/// A packing from a relaxed solution: each column rounded down, then each
/// node left over given the signature of most value that fits the arrivals
/// left (the empty one always does).
fn rounded(
    columns: &[(&str, usize, Signature)],
    by_shape: &BTreeMap<&str, (usize, &Shape)>,
    arrived: &[u32; 3],
    relaxed: &[f64],
    value: &dyn Fn(&Signature) -> f64,
) -> Vec<f64> {
    let mut y: Vec<f64> = relaxed
        .iter()
        .map(|v| (v + 1e-6).floor().max(0.0))
        .collect();
    let mut left = *arrived;
    let mut nodes_left: BTreeMap<&str, usize> =
        by_shape.iter().map(|(n, (c, _))| (*n, *c)).collect();
    for ((name, _, sig), n) in columns.iter().zip(&y) {
        let n = *n as u32;
        for (l, p) in left.iter_mut().zip(sig.placed) {
            *l = l.saturating_sub(n * p);
        }
        if let Some(c) = nodes_left.get_mut(name) {
            *c = c.saturating_sub(n as usize);
        }
    }
    for (name, count) in nodes_left {
        for _ in 0..count {
            let best = columns
                .iter()
                .enumerate()
                .filter(|(_, (n, _, sig))| *n == name && (0..3).all(|i| sig.placed[i] <= left[i]))
                .max_by(|(_, a), (_, b)| value(&a.2).total_cmp(&value(&b.2)));
            if let Some((j, (_, _, sig))) = best {
                y[j] += 1.0;
                for (l, p) in left.iter_mut().zip(sig.placed) {
                    *l -= p;
                }
            }
        }
    }
    y
}

/// Solves the pattern program (integral or its relaxation): each column's
/// number of nodes.
fn run(
    columns: &[(&str, usize, Signature)],
    by_shape: &BTreeMap<&str, (usize, &Shape)>,
    arrived: &[u32; 3],
    value: &dyn Fn(&Signature) -> f64,
    integral: bool,
) -> Result<Vec<f64>, String> {
    let mut vars = ProblemVariables::new();
    let cols: Vec<_> = columns
        .iter()
        .map(|(_, count, _)| {
            let v = variable().min(0).max(*count as f64);
            vars.add(if integral { v.integer() } else { v })
        })
        .collect();
    let objective: Expression = columns
        .iter()
        .zip(&cols)
        .map(|((_, _, sig), c)| value(sig) * *c)
        .sum();
    let mut model = vars.maximise(objective).using(microlp);
    for (name, (count, _)) in by_shape {
        let nodes: Expression = columns
            .iter()
            .zip(&cols)
            .filter(|((n, _, _), _)| n == name)
            .map(|(_, c)| Expression::from(*c))
            .sum();
        model = model.with(constraint!(nodes == *count as f64));
    }
    for (i, a) in arrived.iter().enumerate() {
        let placed: Expression = columns
            .iter()
            .zip(&cols)
            .map(|((_, _, sig), c)| f64::from(sig.placed[i]) * *c)
            .sum();
        model = model.with(constraint!(placed <= f64::from(*a)));
    }
    let solution = model
        .solve()
        .map_err(|e| format!("the fill optimum's program: {e}"))?;
    Ok(cols.iter().map(|c| solution.value(*c)).collect())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::arrivals::Vm;

    /// A shape of `gpus` GPUs in switches of `per_switch` (PIX within one,
    /// PHB across) and `nics` NICs: classes by hand.
    pub(crate) fn switches(gpus: usize, per_switch: usize, nics: usize) -> Shape {
        let n = gpus + nics;
        let mut matrix = vec![vec![Class::Phb; n]; n];
        for (a, row) in matrix.iter_mut().enumerate() {
            for (b, c) in row.iter_mut().enumerate() {
                if a < gpus && b < gpus && a / per_switch == b / per_switch {
                    *c = Class::Pix;
                }
            }
        }
        let name = |i: usize| format!("d{i}");
        Shape {
            name: format!("switches-{gpus}-{per_switch}-{nics}"),
            root: Default::default(),
            slice_args: Vec::new(),
            gpus: (0..gpus)
                .map(|i| (name(i), "0000:00:00.0".parse().unwrap()))
                .collect(),
            nics: (gpus..n)
                .map(|i| (name(i), "0000:00:00.0".parse().unwrap()))
                .collect(),
            index: (0..n).map(|i| (name(i), i)).collect(),
            pcie: matrix.clone(),
            matrix,
            partitions: Vec::new(),
        }
    }

    pub(crate) fn vms(sizes: &[u8]) -> Vec<Vm> {
        sizes
            .iter()
            .enumerate()
            .map(|(index, &gpus)| Vm {
                index,
                gpus,
                nic: gpus == 4,
                arrive: 0.0,
                leave: f64::INFINITY,
            })
            .collect()
    }

    fn sig(placed2: u32, well2: u32) -> Signature {
        Signature {
            placed: [placed2, 0, 0],
            well: [well2, 0, 0],
        }
    }

    #[test]
    fn four_gpus_in_two_switches_without_a_nic_pack_as_derived_by_hand() {
        // Pairs 0-1 and 2-3 are PIX (well placed), the four across PHB.
        // Two disjoint pairs: {01, 23} both well, {02, 13} and {03, 12}
        // neither; no 4-GPU VM without a NIC.
        let got = signatures(&switches(4, 2, 0)).unwrap();
        let want = BTreeSet::from([sig(0, 0), sig(1, 0), sig(1, 1), sig(2, 0), sig(2, 2)]);
        assert_eq!(got, want);
    }

    #[test]
    fn an_eight_gpu_node_with_one_nic_holds_one_four_gpu_vm_and_two_pairs() {
        // Two switches of four, one NIC. Arrivals: two 4-GPU VMs (each asks
        // the NIC) and three 2-GPU VMs. At most three VMs: the NIC bounds the
        // 4-GPU VMs to one, and one 4-GPU VM leaves room for two pairs (1 + 2),
        // as three pairs alone leave two GPUs no 4-GPU VM can use (3 + 0).
        // All three well placed: the 4-GPU VM on one switch, a pair each on
        // the other.
        let s = switches(8, 4, 1);
        let o = solve(&[&s], &vms(&[4, 4, 2, 2, 2]), Objective::PlacedThenWell).unwrap();
        assert_eq!(o.placed.iter().sum::<u32>(), 3, "{o:?}");
        assert_eq!(o.well.iter().sum::<u32>(), 3, "{o:?}");
        assert!(o.lp_bound >= 3.0 - 1e-9, "{o:?}");
    }

    #[test]
    fn a_fleet_too_large_for_branch_and_bound_gets_the_packing_derived_by_hand() {
        // 50 nodes of two 4-GPU switches and one NIC: each holds one 4-GPU
        // VM on one switch and a pair on each half of the other, so 100
        // pairs and 50 4-GPU VMs all fit, all well placed; the 8-GPU VMs
        // would each take a node that holds three VMs.
        let s = switches(8, 4, 1);
        let nodes = vec![&s; 50];
        let mut sizes = vec![2u8; 100];
        sizes.extend([4u8; 50]);
        sizes.extend([8u8; 10]);
        assert!(nodes.len() > BRANCH_AND_BOUND_NODES);
        let o = solve(&nodes, &vms(&sizes), Objective::PlacedThenWell).unwrap();
        assert_eq!((o.placed, o.well), ([100, 50, 0], [100, 50, 0]), "{o:?}");
        assert!(o.exact, "{o:?}");
        assert!((o.lp_bound - 150.0).abs() < 1e-6, "{o:?}");
    }

    #[test]
    fn the_optimum_matches_a_brute_force_search_over_every_nodes_packing() {
        // Three nodes of two shapes; every combination of their signatures
        // within the arrivals, searched exhaustively.
        let (a, b) = (switches(4, 2, 0), switches(8, 4, 2));
        let nodes = [&a, &b, &b];
        let arrivals = vms(&[2, 2, 2, 2, 2, 4, 4, 4, 8]);
        let limit = [5u32, 3, 1];
        let sigs: Vec<Vec<Signature>> = nodes
            .iter()
            .map(|s| signatures(s).unwrap().into_iter().collect())
            .collect();
        let (mut best_placed, mut best_well) = ((0u32, 0u32), 0u32);
        for x in &sigs[0] {
            for y in &sigs[1] {
                for z in &sigs[2] {
                    let fits = (0..3).all(|i| x.placed[i] + y.placed[i] + z.placed[i] <= limit[i]);
                    if !fits {
                        continue;
                    }
                    let placed: u32 = [x, y, z].iter().map(|s| s.placed.iter().sum::<u32>()).sum();
                    let well: u32 = [x, y, z].iter().map(|s| s.well.iter().sum::<u32>()).sum();
                    best_placed = best_placed.max((placed, well));
                    best_well = best_well.max(well);
                }
            }
        }
        let o = solve(&nodes, &arrivals, Objective::PlacedThenWell).unwrap();
        assert_eq!(
            (o.placed.iter().sum::<u32>(), o.well.iter().sum::<u32>()),
            best_placed
        );
        let w = solve(&nodes, &arrivals, Objective::Well).unwrap();
        assert_eq!(w.count(), best_well);
        assert!(w.lp_bound + 1e-9 >= f64::from(best_well));
    }
}
