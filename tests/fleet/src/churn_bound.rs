//! An upper bound for the churn regime: no policy places more of the
//! counted arrivals (or places more of them well) than this.
//!
//! With VMs leaving, the exact offline optimum would decide each VM's node
//! and GPUs for its whole life; that program is far too large at 200 nodes.
//! The bound relaxes it twice, and each relaxation can only raise the value:
//! VMs may move between nodes at any moment (so only "do the VMs alive at
//! instant t fit the fleet?" is asked, with the fill optimum's packings of
//! [`super::optimum::signatures`]), that is asked only at some instants (the
//! arrival times of every k-th counted VM), and acceptance is fractional
//! (the linear relaxation). Every VM, warm-up ones included, may be refused,
//! so the bound is over every policy that sees the same list.

use std::collections::BTreeMap;

use good_lp::{
    constraint, microlp, variable, Expression, ProblemVariables, Solution, SolverModel, Variable,
};

use super::arrivals::{Regime, Vm};
use super::optimum::{signatures, Objective, Signature, SIZES};
use super::trees::Shape;

/// Which arrivals a bound counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The counted window's, as the runs' counts: a policy may refuse the
    /// warm-up VMs to make room, so with a window of about one lifetime the
    /// window's VMs alive at once fill well under the fleet and the bound is
    /// every one of them.
    Window,
    /// Every arrival of the list, warm-up included: at loads near or over
    /// the fleet the fleet's capacity binds.
    Every,
}

impl Scope {
    /// Its name in records.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Window => "window",
            Scope::Every => "every",
        }
    }
}

/// The bound for one objective.
#[derive(Debug, Clone, PartialEq)]
pub struct ChurnBound {
    /// What was bounded: VMs placed, or VMs well placed.
    pub objective: Objective,
    /// No policy's count of the window's arrivals exceeds this.
    pub bound: f64,
    /// The instants the fleet's capacity was checked at.
    pub instants: usize,
}

/// The bound of `objective` for `nodes` (one entry per node) and the churn
/// list `vms` under `regime`, over the arrivals of `scope`, the fleet
/// checked at most `instants` times (arrival times of the counted VMs).
pub fn bound(
    nodes: &[&Shape],
    vms: &[Vm],
    regime: &Regime,
    objective: Objective,
    instants: usize,
    scope: Scope,
) -> Result<ChurnBound, String> {
    let (from, to) = match scope {
        Scope::Window => regime.window(),
        Scope::Every => (f64::NEG_INFINITY, f64::INFINITY),
    };
    let counted: Vec<&Vm> = vms
        .iter()
        .filter(|v| v.arrive >= from && v.arrive < to)
        .collect();
    let step = counted.len().div_ceil(instants.max(1)).max(1);
    let times: Vec<f64> = counted.iter().step_by(step).map(|v| v.arrive).collect();
    let mut by_shape: BTreeMap<&str, (usize, &Shape)> = BTreeMap::new();
    for s in nodes {
        by_shape.entry(s.name.as_str()).or_insert((0, s)).0 += 1;
    }
    let mut packings: Vec<(&str, usize, Vec<Signature>)> = Vec::new();
    for (name, (count, shape)) in &by_shape {
        packings.push((name, *count, signatures(shape)?.into_iter().collect()));
    }
    let mut vars = ProblemVariables::new();
    // Accepted, and accepted well placed, per VM (fractions).
    let accept: Vec<Variable> = vms
        .iter()
        .map(|_| vars.add(variable().min(0).max(1)))
        .collect();
    let well: Vec<Variable> = vms
        .iter()
        .map(|_| vars.add(variable().min(0).max(1)))
        .collect();
    // Per instant, per shape, per packing: nodes packed so.
    let mut nodes_as: Vec<Vec<Vec<Variable>>> = Vec::new();
    for _ in &times {
        nodes_as.push(
            packings
                .iter()
                .map(|(_, count, sigs)| {
                    sigs.iter()
                        .map(|_| vars.add(variable().min(0).max(*count as f64)))
                        .collect()
                })
                .collect(),
        );
    }
    let objective_expr: Expression = counted
        .iter()
        .map(|v| match objective {
            Objective::PlacedThenWell => Expression::from(accept[v.index]),
            Objective::Well => Expression::from(well[v.index]),
        })
        .sum();
    let mut model = vars.maximise(objective_expr).using(microlp);
    for v in vms {
        model = model.with(constraint!(well[v.index] <= accept[v.index]));
    }
    for (k, &t) in times.iter().enumerate() {
        for (j, (_, count, _)) in packings.iter().enumerate() {
            let total: Expression = nodes_as[k][j].iter().map(|x| Expression::from(*x)).sum();
            model = model.with(constraint!(total == *count as f64));
        }
        let alive: Vec<&Vm> = vms
            .iter()
            .filter(|v| v.arrive <= t && t < v.leave)
            .collect();
        for (i, &size) in SIZES.iter().enumerate() {
            let of: Vec<&&Vm> = alive.iter().filter(|v| v.gpus == size).collect();
            if of.is_empty() {
                continue;
            }
            let capacity = |pick: &dyn Fn(&Signature) -> u32| -> Expression {
                packings
                    .iter()
                    .enumerate()
                    .flat_map(|(j, (_, _, sigs))| {
                        sigs.iter()
                            .enumerate()
                            .map(move |(p, sig)| (j, p, f64::from(pick(sig))))
                    })
                    .filter(|(_, _, c)| *c > 0.0)
                    .map(|(j, p, c)| c * nodes_as[k][j][p])
                    .sum()
            };
            let placed: Expression = of.iter().map(|v| Expression::from(accept[v.index])).sum();
            let placed_well: Expression = of.iter().map(|v| Expression::from(well[v.index])).sum();
            model = model.with(constraint!(placed <= capacity(&|s| s.placed[i])));
            model = model.with(constraint!(placed_well <= capacity(&|s| s.well[i])));
        }
    }
    let solution = model
        .solve()
        .map_err(|e| format!("the churn bound's program: {e}"))?;
    let bound = counted
        .iter()
        .map(|v| match objective {
            Objective::PlacedThenWell => solution.value(accept[v.index]),
            Objective::Well => solution.value(well[v.index]),
        })
        .sum();
    Ok(ChurnBound {
        objective,
        bound,
        instants: times.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optimum::tests::{switches, vms};

    /// Two-GPU VMs at the given (arrive, leave) times.
    fn timed(spans: &[(f64, f64)]) -> Vec<Vm> {
        let mut list = vms(&vec![2; spans.len()]);
        for (v, (a, l)) in list.iter_mut().zip(spans) {
            v.arrive = *a;
            v.leave = *l;
        }
        list
    }

    const REGIME: Regime = Regime::Churn {
        load: 1.0,
        warmup: 1.0,
        window: 10.0,
    };

    #[test]
    fn three_pairs_at_once_on_four_gpus_bound_two() {
        // One node of two PIX pairs; three 2-GPU VMs alive together from
        // t = 2: at most two fit, both well placed.
        let s = switches(4, 2, 0);
        let list = timed(&[(2.0, 9.0), (2.5, 9.0), (3.0, 9.0)]);
        for objective in [Objective::PlacedThenWell, Objective::Well] {
            let b = bound(&[&s], &list, &REGIME, objective, 10, Scope::Window).unwrap();
            assert!((b.bound - 2.0).abs() < 1e-6, "{b:?}");
        }
    }

    #[test]
    fn pairs_one_after_another_all_fit_and_warmup_vms_may_be_refused() {
        // A warm-up VM holding both pairs' worth (a 4-GPU VM needs a NIC, so
        // two 2-GPU VMs) until t = 5 does not lower the bound: a policy may
        // refuse them. Three VMs in the window, never two at once: 3.
        let s = switches(4, 2, 0);
        let list = timed(&[(0.5, 5.0), (0.6, 5.0), (2.0, 3.0), (3.0, 4.0), (4.0, 4.5)]);
        let b = bound(
            &[&s],
            &list,
            &REGIME,
            Objective::PlacedThenWell,
            10,
            Scope::Window,
        )
        .unwrap();
        assert!((b.bound - 3.0).abs() < 1e-6, "{b:?}");
        assert_eq!(b.instants, 3);
        // Over every arrival the two warm-up VMs count too, but each window
        // VM arrives while both are alive on the node's two pairs: one
        // warm-up VM must be refused to make room, the other four fit: 4.
        let every = bound(
            &[&s],
            &list,
            &REGIME,
            Objective::PlacedThenWell,
            10,
            Scope::Every,
        )
        .unwrap();
        assert!((every.bound - 4.0).abs() < 1e-6, "{every:?}");
    }
}
