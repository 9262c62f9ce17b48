//! p2p-fleet, the benchmark `scripts/fleet.sh` runs: a fleet of simulated nodes, drawn from captured sysfs
//! trees, on the real control plane (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler from Kubernetes' own code), with
//! VM pods of 2, 4 and 8 GPUs arriving until a share of the fleet's GPUs is
//! taken. The real kube-scheduler places each pod under each policy
//! ([`policy::Policy`]); the offline oracle places the same arrivals; the
//! figures say which class of GPU pair each admitted VM got.

pub mod arrivals;
pub mod cluster;
pub mod figures;
pub mod placement;
pub mod policy;
pub mod trees;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};

use arrivals::Vm;
use cluster::{Cluster, Outcome};
use figures::{Record, VmResult};
use placement::Placed;
use policy::Policy;
use trees::{Shape, Tree};

/// What a run is asked to do.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// The directory of trees.
    pub trees: PathBuf,
    /// Nodes in the fleet.
    pub nodes: usize,
    /// Loads to report, ascending (shares of the fleet's GPUs).
    pub loads: Vec<f64>,
    /// Seeds 1..=seeds.
    pub seeds: u64,
    /// Policies to compare.
    pub policies: Vec<Policy>,
    /// Total VMs to submit per run: after the top load, one VM leaves before
    /// each arrives (None: stop at the top load).
    pub pods: Option<usize>,
    /// Where the control plane, tree copies and logs go.
    pub work: PathBuf,
    /// The repository (shipped manifests).
    pub repo: PathBuf,
    /// `p2p-host`.
    pub p2p_host: PathBuf,
    /// The vp2p policy's claim templates ([`policy::TIERED`] unless `--templates`).
    pub vp2p_templates: PathBuf,
    /// The admin kubeconfig of a running control plane.
    pub kubeconfig: PathBuf,
}

/// A run's results: the trees used and skipped, and the records.
#[derive(Debug)]
pub struct FleetReport {
    /// (name, nodes drawn over all seeds) of the trees used.
    pub used: Vec<(String, usize)>,
    /// (name, reason) of the trees left out.
    pub skipped: Vec<(String, String)>,
    /// Every record.
    pub records: Vec<Record>,
    /// Per policy and seed, every pod of the run (churn included), as records
    /// at the top load: what `--pods` measures.
    pub whole: Vec<Record>,
    /// Per policy and seed: (pods submitted, seconds, pods per second).
    pub throughput: Vec<(String, u64, usize, f64)>,
    /// Fleet GPUs per seed.
    pub gpus: Vec<(u64, usize)>,
}

impl FleetReport {
    /// The `--json` document.
    pub fn to_json(&self, cfg: &FleetConfig) -> Value {
        json!({
            "schema": "vp2p.fleet/1",
            "nodes": cfg.nodes,
            "loads": cfg.loads,
            "seeds": (1..=cfg.seeds).collect::<Vec<_>>(),
            "mix": arrivals::MIX.iter().map(|(g, p, n)| json!({"vm_gpus": g, "percent": p, "nic": n})).collect::<Vec<_>>(),
            "trees": {
                "used": self.used.iter().map(|(n, c)| json!({"name": n, "nodes": c})).collect::<Vec<_>>(),
                "skipped": self.skipped.iter().map(|(n, r)| json!({"name": n, "reason": r})).collect::<Vec<_>>(),
            },
            "fleet_gpus": self.gpus.iter().map(|(s, g)| json!({"seed": s, "gpus": g})).collect::<Vec<_>>(),
            "throughput": self.throughput.iter().map(|(p, s, n, secs)| json!({
                "policy": p, "seed": s, "pods": n, "seconds": secs,
                "pods_per_second": if *secs > 0.0 { *n as f64 / secs } else { 0.0 }})).collect::<Vec<_>>(),
            "records": self.records,
            "whole_runs": self.whole,
        })
    }
}

/// Runs the benchmark.
pub fn run(cfg: &FleetConfig) -> Result<FleetReport, String> {
    let found = trees::discover(&cfg.trees, &cfg.work.join("trees"), &cfg.p2p_host)?;
    let mut shapes: Vec<Shape> = Vec::new();
    let mut skipped = Vec::new();
    for t in found {
        match t {
            Tree::Usable(s) => {
                eprintln!(
                    "fleet: tree {}: {} GPU(s), {} NIC(s)",
                    s.name,
                    s.gpus.len(),
                    s.nics.len()
                );
                shapes.push(s);
            }
            Tree::Skipped { name, reason } => {
                eprintln!("fleet: tree {name} skipped: {reason}");
                skipped.push((name, reason));
            }
        }
    }
    if shapes.is_empty() {
        return Err(format!("no usable tree in {}", cfg.trees.display()));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut used = vec![0usize; shapes.len()];
    let (mut records, mut throughput, mut gpus, mut whole) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for seed in 1..=cfg.seeds {
        let draw = arrivals::draw_nodes(seed, shapes.len(), cfg.nodes);
        for &d in &draw {
            used[d] += 1;
        }
        let nodes: Vec<&Shape> = draw.iter().map(|&i| &shapes[i]).collect();
        let total: usize = nodes.iter().map(|s| s.gpus.len()).sum();
        gpus.push((seed, total));
        eprintln!("fleet: seed {seed}: {} nodes, {total} GPUs", nodes.len());
        let top = cfg.loads.iter().copied().fold(0.0, f64::max);
        // Enough arrivals for any policy to reach the top load, rejections included.
        let stream = arrivals::stream(seed, cfg.pods.unwrap_or(0).max(total * 2));
        let kube_policies: Vec<Policy> = cfg
            .policies
            .iter()
            .copied()
            .filter(|p| *p != Policy::Oracle)
            .collect();
        if !kube_policies.is_empty() {
            rt.block_on(async {
                let ns = format!("fleet-seed-{seed}");
                let mut cl = Cluster::connect(&cfg.kubeconfig, &ns).await?;
                cl.delete_fleet_nodes().await?;
                let mut node_objects = Vec::new();
                for (i, s) in nodes.iter().enumerate() {
                    let name = format!("s{seed}-node-{i:03}");
                    let (mut slices, _) = trees::slices(&cfg.p2p_host, &s.slice_args, &name)?;
                    let cut = policy::nvidia_cut(&slices, &name);
                    slices.extend(cut);
                    node_objects.push((name, slices));
                }
                let t0 = Instant::now();
                let cla = Arc::new(cl);
                cla.add_nodes(node_objects, 16).await?;
                cl = Arc::try_unwrap(cla).map_err(|_| "the cluster is still shared".to_string())?;
                eprintln!(
                    "fleet: seed {seed}: nodes and slices in {:.1} s",
                    t0.elapsed().as_secs_f64()
                );
                for &p in &kube_policies {
                    let classes = policy::device_classes(&cfg.repo)?;
                    let tmpl = policy::templates(p, &cfg.vp2p_templates, &ns)?;
                    cl.apply_classes_and_templates(&classes, &tmpl).await?;
                    let started = Instant::now();
                    let (vms, snaps, submitted) = run_policy(
                        &mut cl, p, seed, &nodes, &stream, total, &cfg.loads, cfg.pods,
                    )
                    .await?;
                    let secs = started.elapsed().as_secs_f64();
                    throughput.push((p.name().to_string(), seed, submitted, secs));
                    for (load, upto) in snaps {
                        records.extend(figures::records(p.name(), load, seed, &vms[..upto]));
                    }
                    whole.extend(figures::records(p.name(), top, seed, &vms));
                    cl.clear().await?;
                    cl.drain_events();
                    eprintln!(
                        "fleet: seed {seed} {}: {submitted} pods in {secs:.1} s ({:.1} pods/s)",
                        p.name(),
                        submitted as f64 / secs
                    );
                }
                cl.delete_fleet_nodes().await?;
                Ok::<(), String>(())
            })?;
        }
        if cfg.policies.contains(&Policy::Oracle) {
            for &load in &cfg.loads {
                let want = (load * total as f64).ceil() as usize;
                let mut sum = 0;
                let upto = stream
                    .iter()
                    .position(|v| {
                        sum += v.gpus as usize;
                        sum >= want
                    })
                    .map_or(stream.len(), |i| i + 1);
                for size in [2u8, 4, 8] {
                    let (placed, rejected) = placement::oracle(&nodes, &stream[..upto], size);
                    let vms = oracle_results(&nodes, &placed, &rejected);
                    records.extend(
                        figures::records("oracle", load, seed, &vms)
                            .into_iter()
                            .filter(|r| r.vm_gpus == size),
                    );
                }
            }
        }
    }
    Ok(FleetReport {
        used: shapes
            .iter()
            .zip(used)
            .map(|(s, n)| (s.name.clone(), n))
            .collect(),
        skipped,
        records,
        whole,
        throughput,
        gpus,
    })
}

/// The oracle's placements as results, in arrival order.
fn oracle_results(nodes: &[&Shape], placed: &[Placed], rejected: &[Vm]) -> Vec<VmResult> {
    let mut all: Vec<(usize, VmResult)> = placed
        .iter()
        .map(|p| {
            (
                p.vm.index,
                VmResult {
                    gpus: p.vm.gpus,
                    admitted: Some(p.classes(nodes[p.node])),
                    tiers: Default::default(),
                    took_ms: None,
                    filter_timeouts: 0,
                },
            )
        })
        .chain(rejected.iter().map(|v| {
            (
                v.index,
                VmResult {
                    gpus: v.gpus,
                    admitted: None,
                    tiers: Default::default(),
                    took_ms: None,
                    filter_timeouts: 0,
                },
            )
        }))
        .collect();
    all.sort_by_key(|(i, _)| *i);
    all.into_iter().map(|(_, v)| v).collect()
}

/// One policy's run over `stream`: each VM's result in arrival order, the
/// (load, VMs so far) snapshots, and the pods submitted.
#[allow(clippy::too_many_arguments)]
async fn run_policy(
    cl: &mut Cluster,
    policy: Policy,
    seed: u64,
    nodes: &[&Shape],
    stream: &[Vm],
    total: usize,
    loads: &[f64],
    pods: Option<usize>,
) -> Result<(Vec<VmResult>, Vec<(f64, usize)>, usize), String> {
    let by_name: std::collections::BTreeMap<String, usize> = (0..nodes.len())
        .map(|i| (format!("s{seed}-node-{i:03}"), i))
        .collect();
    let mut results = Vec::new();
    let mut snaps = Vec::new();
    let mut taken = 0usize;
    let mut live: Vec<(String, usize)> = Vec::new(); // (pod, GPUs) admitted and not gone
    let mut churn = arrivals::Rng::new(seed ^ 0x4348_5552); // "CHUR"
    let mut next_load = 0;
    let top = loads.last().copied().unwrap_or(0.9);
    let started = Instant::now();
    for vm in stream {
        let full = next_load >= loads.len();
        if full {
            match pods {
                Some(n) if vm.index < n => {
                    // Keep the fleet at the top load: one VM leaves first.
                    if (taken as f64) >= top * total as f64 && !live.is_empty() {
                        let (name, g) = live.swap_remove(churn.below(live.len()));
                        cl.remove(&name).await?;
                        taken -= g;
                    }
                }
                _ => break,
            }
        }
        let name = format!("{}-vm-{:05}", policy.name(), vm.index);
        let r = cl
            .place(&name, vm.gpus, &policy.template_name(vm.gpus))
            .await?;
        let result = match r.outcome {
            Outcome::Bound {
                node,
                devices,
                took,
            } => {
                let (gpus, nic, tiers) = cluster::split_devices(&devices);
                let shape = by_name
                    .get(&node)
                    .map(|&i| nodes[i])
                    .ok_or_else(|| format!("pod {name} bound to {node}, not a fleet node"))?;
                let (worst, nic_class) = shape.vm_classes(&gpus, nic.as_deref());
                taken += vm.gpus as usize;
                live.push((name.clone(), vm.gpus as usize));
                VmResult {
                    gpus: vm.gpus,
                    admitted: Some((worst, nic_class)),
                    tiers,
                    took_ms: Some(took.as_secs_f64() * 1000.0),
                    filter_timeouts: r.filter_timeouts,
                }
            }
            Outcome::Rejected { why, took } => {
                cl.remove(&name).await?;
                if vm.index < 3 || r.filter_timeouts > 0 {
                    eprintln!("fleet: {name} ({} GPUs) not placed: {why}", vm.gpus);
                }
                VmResult {
                    gpus: vm.gpus,
                    admitted: None,
                    tiers: Default::default(),
                    took_ms: Some(took.as_secs_f64() * 1000.0),
                    filter_timeouts: r.filter_timeouts,
                }
            }
        };
        results.push(result);
        while next_load < loads.len() && taken as f64 >= loads[next_load] * total as f64 {
            snaps.push((loads[next_load], results.len()));
            next_load += 1;
        }
        if results.len() % 50 == 0 {
            eprintln!(
                "fleet: seed {seed} {}: {} VMs, load {:.0}%, {} rejected, {:.1} pods/s",
                policy.name(),
                results.len(),
                100.0 * taken as f64 / total as f64,
                results.iter().filter(|r| r.admitted.is_none()).count(),
                results.len() as f64 / started.elapsed().as_secs_f64()
            );
        }
    }
    if next_load < loads.len() {
        eprintln!(
            "fleet: seed {seed} {}: the arrivals ran out at load {:.0}%; the higher loads are reported at that point",
            policy.name(),
            100.0 * taken as f64 / total as f64
        );
        for &l in &loads[next_load..] {
            snaps.push((l, results.len()));
        }
    }
    let submitted = results.len();
    Ok((results, snaps, submitted))
}
