//! One policy's run on the real scheduler: the arrival list in order, each
//! VM's pod created once the one before was bound or refused, and in churn
//! the VMs whose time is up leaving first; what each arrival got, and the
//! GPUs left stranded.

use std::time::Instant;

use super::arrivals::{Regime, Vm};
use super::cluster::{self, Cluster, Outcome as Scheduled};
use super::figures;
use super::policy::Policy;
use super::tally::{self, Outcome};
use super::trees::Shape;

/// A VM the scheduler placed and that has not left.
struct Live {
    pod: String,
    claim: String,
    node: usize,
    gpus: usize,
    leave: f64,
}

/// One policy's run over `list` under `regime`: each arrival's outcome in
/// arrival order, and the stranded GPUs (at the end of a fill run; in churn
/// the mean over the counted window's arrivals). In churn every VM whose
/// time is up leaves (its pod deleted, its claim gone) before the next
/// arrival.
pub async fn run(
    cl: &mut Cluster,
    policy: Policy,
    seed: u64,
    regime: &Regime,
    nodes: &[&Shape],
    list: &[Vm],
) -> Result<(Vec<Outcome>, f64), String> {
    let by_name: std::collections::BTreeMap<String, usize> = (0..nodes.len())
        .map(|i| (super::node_name(seed, i), i))
        .collect();
    let mut free: Vec<usize> = nodes.iter().map(|s| s.gpus.len()).collect();
    let total: usize = free.iter().sum();
    let (from, to) = regime.window();
    let mut outcomes = Vec::with_capacity(list.len());
    let mut live: Vec<Live> = Vec::new();
    let mut stranded_seen = Vec::new();
    let started = Instant::now();
    for vm in list {
        live.sort_by(|a, b| b.leave.total_cmp(&a.leave));
        while live.last().is_some_and(|l| l.leave <= vm.arrive) {
            let l = live.pop().expect("a live VM");
            cl.leave(&l.pod, &l.claim).await?;
            free[l.node] += l.gpus;
        }
        if vm.arrive >= from && vm.arrive < to {
            stranded_seen.push(tally::stranded(&free) as f64);
        }
        let name = format!("{}-vm-{:05}", policy.name(), vm.index);
        let r = cl
            .place(
                &name,
                vm.gpus,
                &policy.template_name(vm.gpus),
                policy.name(),
            )
            .await?;
        let outcome = match r.outcome {
            Scheduled::Bound {
                node,
                claim,
                devices,
                took,
            } => {
                let (gpus, nic, tiers) = cluster::split_devices(&devices);
                let i = *by_name
                    .get(&node)
                    .ok_or_else(|| format!("pod {name} bound to {node}, not a fleet node"))?;
                let (worst, nic_class) = nodes[i].vm_classes(&gpus, nic.as_deref());
                free[i] -= usize::from(vm.gpus);
                live.push(Live {
                    pod: name.clone(),
                    claim,
                    node: i,
                    gpus: usize::from(vm.gpus),
                    leave: vm.leave,
                });
                Outcome {
                    vm: *vm,
                    placed: Some((i, worst, nic_class)),
                    tiers,
                    took_ms: Some(took.as_secs_f64() * 1000.0),
                    filter_timeouts: r.filter_timeouts,
                }
            }
            Scheduled::Rejected { why, took } => {
                cl.remove(&name).await?;
                if vm.index < 3 || r.filter_timeouts > 0 {
                    eprintln!("fleet: {name} ({} GPUs) not placed: {why}", vm.gpus);
                }
                Outcome {
                    vm: *vm,
                    placed: None,
                    tiers: Default::default(),
                    took_ms: Some(took.as_secs_f64() * 1000.0),
                    filter_timeouts: r.filter_timeouts,
                }
            }
        };
        outcomes.push(outcome);
        if outcomes.len() % 100 == 0 {
            eprintln!(
                "fleet: seed {seed} {} {}: {} of {} arrivals, {:.0}% of the GPUs taken, {} refused, {:.1} pods/s",
                regime.name(),
                policy.name(),
                outcomes.len(),
                list.len(),
                100.0 * (total - free.iter().sum::<usize>()) as f64 / total as f64,
                outcomes.iter().filter(|o| o.placed.is_none()).count(),
                outcomes.len() as f64 / started.elapsed().as_secs_f64()
            );
        }
    }
    let stranded = match regime {
        Regime::Fill { .. } => tally::stranded(&free) as f64,
        Regime::Churn { .. } => figures::mean_sd(&stranded_seen).map_or(0.0, |m| m.0),
    };
    Ok((outcomes, stranded))
}
