//! What an operator counts of one run over one arrival list: per VM size,
//! the VMs that arrived in the counted window, those placed (by the worst
//! class of their GPU pairs, and how many well placed), those refused; the
//! GPUs left stranded (free, but on a node where no VM size fits); and in
//! the churn regime the GPU-hours served against those asked. Counts, not
//! shares: every policy sees the same arrivals, so counts compare directly.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::arrivals::{Regime, Vm};
use super::figures::{class_counts, percentile};
use super::optimum::{well_placed, SIZES};
use super::trees::Class;

/// What became of one arrival.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The VM.
    pub vm: Vm,
    /// Its node's index and (worst GPU-pair class, GPU-to-NIC class) when placed.
    pub placed: Option<(usize, Class, Option<Class>)>,
    /// The alternative each request got ("gpus" -> "switch"), tiered claims only.
    pub tiers: BTreeMap<String, String>,
    /// From creating the pod to seeing it bound or refused (ms), when the scheduler placed it.
    pub took_ms: Option<f64>,
    /// Scheduling attempts that hit the DRA filter's timeout.
    pub filter_timeouts: u32,
}

/// One size's counts in one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SizeCount {
    /// VM size in GPUs.
    pub vm_gpus: u8,
    /// VMs of this size that arrived in the counted window.
    pub arrived: u32,
    /// Of those, placed.
    pub placed: u32,
    /// Those placed by worst GPU-pair class (all six keys); none for the
    /// optimum, which counts only well placed or not.
    pub by_class: Option<BTreeMap<String, u32>>,
    /// Of those placed, well placed (optimum::well_placed).
    pub well_placed: u32,
    /// Of those placed that asked for a NIC, by worst GPU-to-NIC class.
    pub nic_classes: Option<BTreeMap<String, u32>>,
    /// VMs of this size refused (no node found).
    pub refused: u32,
    /// Placed VMs by the alternative their GPUs got (tiered claims).
    pub gpu_tiers: BTreeMap<String, u32>,
    /// Placed VMs by their node's shape (where each size went: the room a
    /// policy leaves for the others).
    #[serde(default)]
    pub by_shape: BTreeMap<String, u32>,
    /// The scheduler's time per pod, create to bound or refused, median (ms).
    pub schedule_ms_p50: Option<f64>,
    /// The same, 99th percentile (ms).
    pub schedule_ms_p99: Option<f64>,
    /// Scheduling attempts that hit the DRA filter's 10 s timeout.
    pub filter_timeouts: u32,
}

/// One run's counts: a policy over one seed's arrivals in one regime.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunCount {
    /// `vp2p`, `nvidia`, `count`, `greedy`, `optimum` or `optimum-well`.
    pub policy: String,
    /// `fill` or `churn-<load %>`.
    pub regime: String,
    /// The seed of nodes and arrivals.
    pub seed: u64,
    /// The fleet's GPUs.
    pub fleet_gpus: u32,
    /// Per size, in [`SIZES`] order.
    pub sizes: Vec<SizeCount>,
    /// GPUs free on nodes where no VM size fits (fewer than two free): at the
    /// end of a fill run; in churn the mean over the window's arrivals. None
    /// for the optimum, whose program says how many VMs, not where.
    pub stranded_gpus: Option<f64>,
    /// Churn: GPU-hours (GPUs x mean lifetimes) the placed VMs ran inside the window.
    pub gpu_hours_served: Option<f64>,
    /// Churn: GPU-hours every arrival would have run inside the window.
    pub gpu_hours_asked: Option<f64>,
    /// Churn: every arrival of the list, warm-up included (what the bound
    /// over every arrival is compared with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_arrival: Option<EveryArrival>,
}

/// Counts over every arrival of a churn list, all sizes together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EveryArrival {
    /// VMs that arrived.
    pub arrived: u32,
    /// Of those, placed.
    pub placed: u32,
    /// Of those, well placed.
    pub well_placed: u32,
}

/// One solved optimum, as `--json` keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OptimumRecord {
    /// The seed.
    pub seed: u64,
    /// The regime.
    pub regime: String,
    /// `placed-then-well` or `well`.
    pub objective: String,
    /// Fill: the exact optimum of the count it maximised first (none in churn).
    pub count: Option<u32>,
    /// No policy's count exceeds it: the fill program's LP relaxation, or
    /// the churn bound (super::churn_bound). (`lp_bound` in files written
    /// before the churn bound.)
    #[serde(alias = "lp_bound")]
    pub bound: f64,
    /// Churn: the instants the bound checked the fleet at.
    pub instants: Option<usize>,
    /// Churn: the arrivals the bound counts, `window` (as the runs'
    /// counts) or `every` (warm-up included; compare `every_arrival`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Fill: whether `count` is proven the most (it meets the bound's
    /// floor, or branch and bound finished); false when it is only the best
    /// packing found (super::optimum::BRANCH_AND_BOUND_NODES).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact: Option<bool>,
}

/// Free GPUs on the nodes no VM size fits (the smallest VM takes two GPUs
/// and no NIC): a node's last free GPU.
pub fn stranded(free: &[usize]) -> usize {
    free.iter().filter(|&&f| f < 2).sum()
}

/// The counts of `outcomes` (in arrival order) of a run under `regime` on
/// nodes of the shapes `node_shapes` names (by node index); `stranded_gpus`
/// comes from whoever tracked the nodes.
pub fn count(
    policy: &str,
    regime: &Regime,
    seed: u64,
    node_shapes: &[&str],
    outcomes: &[Outcome],
    stranded_gpus: f64,
    fleet_gpus: usize,
) -> RunCount {
    let (from, to) = regime.window();
    let counted: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.vm.arrive >= from && o.vm.arrive < to)
        .collect();
    let sizes = SIZES
        .iter()
        .map(|&size| {
            let of: Vec<&&Outcome> = counted.iter().filter(|o| o.vm.gpus == size).collect();
            let placed: Vec<(Class, Option<Class>)> = of
                .iter()
                .filter_map(|o| o.placed.map(|(_, c, n)| (c, n)))
                .collect();
            let nic: Vec<Class> = placed.iter().filter_map(|(_, n)| *n).collect();
            let mut gpu_tiers = BTreeMap::new();
            let mut by_shape = BTreeMap::new();
            for o in of.iter() {
                let Some((node, _, _)) = o.placed else {
                    continue;
                };
                if let Some(t) = o.tiers.get("gpus") {
                    *gpu_tiers.entry(t.clone()).or_default() += 1;
                }
                let shape = node_shapes.get(node).copied().unwrap_or("?");
                *by_shape.entry(shape.to_string()).or_default() += 1;
            }
            let mut times: Vec<f64> = of.iter().filter_map(|o| o.took_ms).collect();
            times.sort_by(f64::total_cmp);
            SizeCount {
                vm_gpus: size,
                arrived: of.len() as u32,
                placed: placed.len() as u32,
                by_class: Some(class_counts(placed.iter().map(|(c, _)| c))),
                well_placed: placed.iter().filter(|(c, _)| well_placed(size, *c)).count() as u32,
                nic_classes: (!nic.is_empty()).then(|| class_counts(nic.iter())),
                refused: of.iter().filter(|o| o.placed.is_none()).count() as u32,
                gpu_tiers,
                by_shape,
                schedule_ms_p50: percentile(&times, 50.0),
                schedule_ms_p99: percentile(&times, 99.0),
                filter_timeouts: of.iter().map(|o| o.filter_timeouts).sum(),
            }
        })
        .collect();
    let hours = |o: &Outcome| {
        let run = (o.vm.leave.min(to) - o.vm.arrive.max(from)).max(0.0);
        f64::from(o.vm.gpus) * run
    };
    let churn = matches!(regime, Regime::Churn { .. });
    RunCount {
        policy: policy.to_string(),
        regime: regime.name(),
        seed,
        fleet_gpus: fleet_gpus as u32,
        sizes,
        stranded_gpus: Some(stranded_gpus),
        gpu_hours_served: churn.then(|| {
            outcomes
                .iter()
                .filter(|o| o.placed.is_some())
                .map(hours)
                .sum()
        }),
        gpu_hours_asked: churn.then(|| outcomes.iter().map(hours).sum()),
        every_arrival: churn.then(|| EveryArrival {
            arrived: outcomes.len() as u32,
            placed: outcomes.iter().filter(|o| o.placed.is_some()).count() as u32,
            well_placed: outcomes
                .iter()
                .filter(|o| o.placed.is_some_and(|(_, c, _)| well_placed(o.vm.gpus, c)))
                .count() as u32,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(gpus: u8, arrive: f64, leave: f64, placed: Option<Class>) -> Outcome {
        Outcome {
            vm: Vm {
                index: 0,
                gpus,
                nic: gpus == 4,
                arrive,
                leave,
            },
            placed: placed.map(|c| (0, c, None)),
            tiers: BTreeMap::new(),
            took_ms: Some(5.0),
            filter_timeouts: 0,
        }
    }

    #[test]
    fn churn_counts_only_the_window_and_its_gpu_hours() {
        let regime = Regime::Churn {
            load: 1.0,
            warmup: 1.0,
            window: 2.0,
        };
        let outs = [
            // Before the window, placed, runs 0.5 into it: 2 x 0.5 = 1.0.
            outcome(2, 0.5, 1.5, Some(Class::Pix)),
            // In it, placed, runs to its end: 4 x (3.0 - 2.0) = 4.0.
            outcome(4, 2.0, 9.0, Some(Class::Sys)),
            // In it, refused: asked 8 x (2.5 - 2.0) = 4.0, served nothing.
            outcome(8, 2.0, 2.5, None),
            // After it: not counted, no hours.
            outcome(2, 3.5, 4.0, Some(Class::Pix)),
        ];
        let c = count("vp2p", &regime, 1, &["two-socket"], &outs, 0.0, 16);
        assert_eq!(c.regime, "churn-100");
        let arrived: Vec<u32> = c.sizes.iter().map(|s| s.arrived).collect();
        assert_eq!(arrived, [0, 1, 1]);
        assert_eq!(c.sizes[1].by_class.as_ref().unwrap()["SYS"], 1);
        assert_eq!(c.sizes[1].well_placed, 0, "SYS is not within one NUMA node");
        assert_eq!(c.sizes[2].refused, 1);
        assert_eq!(c.sizes[1].by_shape["two-socket"], 1);
        assert!(
            c.sizes[2].by_shape.is_empty(),
            "the refused VM went nowhere"
        );
        assert_eq!(c.gpu_hours_served, Some(5.0));
        assert_eq!(c.gpu_hours_asked, Some(9.0));
        // Every arrival: four, three placed, of which the 2-GPU VMs on PIX
        // are well placed and the 4-GPU VM on SYS is not.
        let every = c.every_arrival.unwrap();
        assert_eq!((every.arrived, every.placed, every.well_placed), (4, 3, 2));
    }

    #[test]
    fn a_node_strands_its_last_free_gpu_only() {
        assert_eq!(stranded(&[0, 1, 2, 1, 7]), 2);
    }
}
