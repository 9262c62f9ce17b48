//! p2p-fleet, the benchmark `scripts/fleet.sh` runs: a fleet of simulated
//! nodes, drawn from captured sysfs trees, on the real control plane (etcd,
//! kube-apiserver, kube-controller-manager, kube-scheduler from Kubernetes'
//! own code), and one arrival list per seed and regime ([`arrivals`]) that
//! every policy sees: VM pods of 2, 4 and 8 GPUs that the real
//! kube-scheduler places under each policy's attributes and claims
//! ([`policy::Policy`]), and that a greedy heuristic and the exact optimum
//! ([`optimum`]) place offline in the fill regime. What is counted, per
//! arrival, is in [`tally`].

pub mod arrivals;
pub mod churn_bound;
pub mod cluster;
pub mod figures;
pub mod grading;
pub mod optimum;
pub mod placement;
pub mod policy;
pub mod scheduled;
pub mod tally;
pub mod trees;
pub mod tuning;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};

use arrivals::{Regime, Vm};
use cluster::Cluster;
use optimum::{Objective, SIZES};
use policy::Policy;
use tally::{OptimumRecord, Outcome, RunCount, SizeCount};
use trees::{Shape, Tree};

/// What a run is asked to do.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// The directory of trees.
    pub trees: PathBuf,
    /// Nodes in the fleet.
    pub nodes: usize,
    /// The regimes, each with an arrival list of its own per seed.
    pub regimes: Vec<Regime>,
    /// How many seeds, counted from `first_seed`.
    pub seeds: u64,
    /// The first seed: seeds 1..=10 are the tuning set templates are chosen
    /// on, and reported figures come from 11 on (the test set).
    pub first_seed: u64,
    /// Policies to compare.
    pub policies: Vec<Policy>,
    /// Where the control plane, tree copies and logs go.
    pub work: PathBuf,
    /// The repository (shipped manifests).
    pub repo: PathBuf,
    /// `p2p-host`.
    pub p2p_host: PathBuf,
    /// The vp2p policy's claim templates ([`policy::TIERED`] unless `--templates`).
    pub vp2p_templates: PathBuf,
    /// The nvidia policy's claim templates when not the generated ones
    /// (`--nvidia-templates`).
    pub nvidia_templates: Option<PathBuf>,
    /// The admin kubeconfig of a running control plane.
    pub kubeconfig: PathBuf,
    /// Churn: the instants the optimum's bound checks the fleet at.
    pub bound_instants: usize,
    /// The mix of VM sizes.
    pub mix: arrivals::Mix,
    /// Shapes' weights in the draw of nodes (a shape not named weighs 1).
    pub shape_weights: Vec<(String, u32)>,
    /// The kube-scheduler settings the run was given (`--scheduler-profile`);
    /// None: the scheduler's defaults.
    pub scheduler_profile: Option<PathBuf>,
    /// The order vp2p's slices list GPUs in (`p2p-host dra slices
    /// --device-order`); the NVIDIA cut keeps address order.
    pub device_order: p2p_allocation::dra::DeviceOrder,
    /// vp2p's scheduler extender's weight, when the run has one.
    pub extender: Option<u32>,
    /// The sizes the extender keeps room for (its `--keep`).
    pub extender_keep: Vec<String>,
    /// Where the counts so far are written after each seed (the `--json`
    /// file; `seeds_done` says how far it got).
    pub checkpoint: Option<PathBuf>,
}

impl FleetConfig {
    /// The seeds run, in order.
    pub fn seed_list(&self) -> Vec<u64> {
        (self.first_seed..self.first_seed + self.seeds).collect()
    }

    /// The weight of shape `name` in the draw.
    pub fn weight(&self, name: &str) -> u32 {
        self.shape_weights
            .iter()
            .find(|(n, _)| n == name)
            .map_or(1, |(_, w)| *w)
    }
}

/// A run's results: the trees used and skipped, and the counts.
#[derive(Debug)]
pub struct FleetReport {
    /// (name, nodes drawn over all seeds) of the trees used.
    pub used: Vec<(String, usize)>,
    /// (name, reason) of the trees left out.
    pub skipped: Vec<(String, String)>,
    /// Every run's counts.
    pub runs: Vec<RunCount>,
    /// Every optimum solved, with its bound.
    pub optima: Vec<OptimumRecord>,
    /// Per policy, regime and seed: (pods submitted, seconds).
    pub throughput: Vec<(String, String, u64, usize, f64)>,
    /// Fleet GPUs per seed.
    pub gpus: Vec<(u64, usize)>,
}

impl FleetReport {
    /// The `--json` document.
    pub fn to_json(&self, cfg: &FleetConfig) -> Value {
        json!({
            "schema": "vp2p.fleet/2",
            "nodes": cfg.nodes,
            "regimes": cfg.regimes.iter().map(|r| match r {
                Regime::Fill { demand } => json!({"name": r.name(), "demand": demand}),
                Regime::Churn { load, warmup, window } => json!({"name": r.name(), "load": load, "warmup": warmup, "window": window}),
            }).collect::<Vec<_>>(),
            "seeds": cfg.seed_list(),
            "scheduler_profile": cfg.scheduler_profile.as_ref().map(|p| p.strip_prefix(&cfg.repo).unwrap_or(p)),
            "device_order": cfg.device_order.name(),
            "extender": cfg.extender.map(|w| json!({"weight": w, "keep": cfg.extender_keep})),
            "templates": {
                "vp2p": cfg.vp2p_templates.strip_prefix(&cfg.repo).unwrap_or(&cfg.vp2p_templates),
                "nvidia": cfg.nvidia_templates.as_ref().map_or("generated".into(), |p| p.display().to_string()),
            },
            "mix": cfg.mix.0.iter().map(|e| json!({"vm_gpus": e.gpus, "percent": e.percent, "nic": e.nic})).collect::<Vec<_>>(),
            "shape_weights": self.used.iter().map(|(n, _)| json!({"name": n, "weight": cfg.weight(n)})).collect::<Vec<_>>(),
            "trees": {
                "used": self.used.iter().map(|(n, c)| json!({"name": n, "nodes": c})).collect::<Vec<_>>(),
                "skipped": self.skipped.iter().map(|(n, r)| json!({"name": n, "reason": r})).collect::<Vec<_>>(),
            },
            "fleet_gpus": self.gpus.iter().map(|(s, g)| json!({"seed": s, "gpus": g})).collect::<Vec<_>>(),
            "throughput": self.throughput.iter().map(|(p, r, s, n, secs)| json!({
                "policy": p, "regime": r, "seed": s, "pods": n, "seconds": secs,
                "pods_per_second": if *secs > 0.0 { *n as f64 / secs } else { 0.0 }})).collect::<Vec<_>>(),
            "runs": self.runs,
            "optima": self.optima,
        })
    }

    /// Writes the `--json` document to `path`; `seeds_done` marks a run
    /// still under way (the seeds it finished).
    pub fn write(
        &self,
        cfg: &FleetConfig,
        path: &std::path::Path,
        seeds_done: Option<u64>,
    ) -> Result<(), String> {
        let mut doc = self.to_json(cfg);
        if let Some(seed) = seeds_done {
            doc["seeds_done"] = json!(seed);
        }
        let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())? + "\n";
        std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
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
    for (name, _) in &cfg.shape_weights {
        if !shapes.iter().any(|s| &s.name == name) {
            return Err(format!(
                "--shape-weights: {name} is not a usable tree of {}",
                cfg.trees.display()
            ));
        }
    }
    let weights: Vec<u32> = shapes.iter().map(|s| cfg.weight(&s.name)).collect();
    if weights.iter().all(|w| *w == 0) {
        return Err("--shape-weights: every usable shape weighs 0".into());
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut used = vec![0usize; shapes.len()];
    let (mut runs, mut optima, mut throughput, mut gpus) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let scheduled: Vec<Policy> = cfg
        .policies
        .iter()
        .copied()
        .filter(|p| p.scheduled())
        .collect();
    for seed in cfg.seed_list() {
        let draw = arrivals::draw_nodes(seed, &weights, cfg.nodes);
        for &d in &draw {
            used[d] += 1;
        }
        let nodes: Vec<&Shape> = draw.iter().map(|&i| &shapes[i]).collect();
        let node_shapes: Vec<&str> = nodes.iter().map(|s| s.name.as_str()).collect();
        let total: usize = nodes.iter().map(|s| s.gpus.len()).sum();
        gpus.push((seed, total));
        eprintln!("fleet: seed {seed}: {} nodes, {total} GPUs", nodes.len());
        let lists: Vec<(Regime, Vec<Vm>)> = cfg
            .regimes
            .iter()
            .map(|r| (*r, arrivals::arrivals(seed, *r, total, &cfg.mix)))
            .collect();
        for (regime, list) in &lists {
            eprintln!(
                "fleet: seed {seed} {}: {} arrivals",
                regime.name(),
                list.len()
            );
        }
        // The offline references first: a slow solve shows before the
        // scheduling hours, not after them.
        for (regime, list) in &lists {
            if matches!(regime, Regime::Churn { .. }) {
                if cfg.policies.contains(&Policy::Optimum) {
                    for scope in [churn_bound::Scope::Window, churn_bound::Scope::Every] {
                        for objective in [Objective::PlacedThenWell, Objective::Well] {
                            let t = Instant::now();
                            let b = churn_bound::bound(
                                &nodes,
                                list,
                                regime,
                                objective,
                                cfg.bound_instants,
                                scope,
                            )?;
                            eprintln!(
                                "fleet: seed {seed} {}: bound on {} ({} arrivals): {:.1} ({} instants) in {:.1} s",
                                regime.name(),
                                objective.name(),
                                scope.name(),
                                b.bound,
                                b.instants,
                                t.elapsed().as_secs_f64()
                            );
                            optima.push(OptimumRecord {
                                seed,
                                regime: regime.name(),
                                objective: objective.name().to_string(),
                                count: None,
                                bound: b.bound,
                                instants: Some(b.instants),
                                scope: Some(scope.name().to_string()),
                                exact: None,
                            });
                        }
                    }
                }
                continue;
            }
            if cfg.policies.contains(&Policy::Greedy) {
                let (outcomes, free) = greedy(&nodes, list);
                runs.push(tally::count(
                    Policy::Greedy.name(),
                    regime,
                    seed,
                    &node_shapes,
                    &outcomes,
                    tally::stranded(&free) as f64,
                    total,
                ));
            }
            if cfg.policies.contains(&Policy::Optimum) {
                for (objective, name) in [
                    (Objective::PlacedThenWell, "optimum"),
                    (Objective::Well, "optimum-well"),
                ] {
                    let t = Instant::now();
                    let o = optimum::solve(&nodes, list, objective)?;
                    eprintln!(
                        "fleet: seed {seed} {}: {name}: {} ({}, LP bound {:.1}) in {:.2} s",
                        regime.name(),
                        o.count(),
                        if o.exact { "proven" } else { "best found" },
                        o.lp_bound,
                        t.elapsed().as_secs_f64()
                    );
                    optima.push(OptimumRecord {
                        seed,
                        regime: regime.name(),
                        objective: objective.name().to_string(),
                        count: Some(o.count()),
                        bound: o.lp_bound,
                        instants: None,
                        scope: None,
                        exact: Some(o.exact),
                    });
                    runs.push(optimum_run(name, regime, seed, total, list, &o));
                }
            }
        }
        if !scheduled.is_empty() {
            rt.block_on(async {
                let ns = format!("fleet-seed-{seed}");
                let mut cl = Cluster::connect(&cfg.kubeconfig, &ns).await?;
                cl.delete_fleet_nodes().await?;
                let mut node_objects = Vec::new();
                for (i, s) in nodes.iter().enumerate() {
                    let name = node_name(seed, i);
                    let mut args = s.slice_args.clone();
                    args.extend(["--device-order".into(), cfg.device_order.name().into()]);
                    let (mut slices, _) = trees::slices(&cfg.p2p_host, &args, &name)?;
                    let cut = policy::nvidia_cut(&slices, &name, s);
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
                for (regime, list) in &lists {
                    for &p in &scheduled {
                        let classes = policy::device_classes(&cfg.repo)?;
                        let tmpl = policy::templates(
                            p,
                            &cfg.vp2p_templates,
                            cfg.nvidia_templates.as_deref(),
                            &ns,
                        )?;
                        cl.apply_classes_and_templates(&classes, &tmpl).await?;
                        let started = Instant::now();
                        let (outcomes, stranded) =
                            scheduled::run(&mut cl, p, seed, regime, &nodes, list).await?;
                        let secs = started.elapsed().as_secs_f64();
                        throughput.push((
                            p.name().to_string(),
                            regime.name(),
                            seed,
                            outcomes.len(),
                            secs,
                        ));
                        runs.push(tally::count(
                            p.name(),
                            regime,
                            seed,
                            &node_shapes,
                            &outcomes,
                            stranded,
                            total,
                        ));
                        cl.clear().await?;
                        cl.drain_events();
                        eprintln!(
                            "fleet: seed {seed} {} {}: {} pods in {secs:.1} s ({:.1} pods/s)",
                            regime.name(),
                            p.name(),
                            outcomes.len(),
                            outcomes.len() as f64 / secs
                        );
                    }
                }
                cl.delete_fleet_nodes().await?;
                Ok::<(), String>(())
            })?;
        }
        if let Some(path) = &cfg.checkpoint {
            let partial = FleetReport {
                used: report_used(&shapes, &used),
                skipped: skipped.clone(),
                runs: runs.clone(),
                optima: optima.clone(),
                throughput: throughput.clone(),
                gpus: gpus.clone(),
            };
            partial.write(cfg, path, Some(seed))?;
            eprintln!(
                "fleet: seed {seed} done: counts so far in {}",
                path.display()
            );
        }
    }
    Ok(FleetReport {
        used: report_used(&shapes, &used),
        skipped,
        runs,
        optima,
        throughput,
        gpus,
    })
}

/// (name, nodes drawn) of each usable shape.
fn report_used(shapes: &[Shape], used: &[usize]) -> Vec<(String, usize)> {
    shapes
        .iter()
        .zip(used)
        .map(|(s, n)| (s.name.clone(), *n))
        .collect()
}

/// Node `i`'s name in seed `seed`'s fleet.
pub fn node_name(seed: u64, i: usize) -> String {
    format!("s{seed}-node-{i:03}")
}

/// The greedy heuristic on a fill list (largest VMs first): each arrival's
/// outcome in arrival order, and the GPUs left free per node.
fn greedy(nodes: &[&Shape], list: &[Vm]) -> (Vec<Outcome>, Vec<usize>) {
    let (placed, _) = placement::greedy(nodes, list, 8);
    let mut free: Vec<usize> = nodes.iter().map(|s| s.gpus.len()).collect();
    let mut by_index = std::collections::BTreeMap::new();
    for p in &placed {
        free[p.node] -= p.gpus.len();
        let (worst, nic) = p.classes(nodes[p.node]);
        by_index.insert(p.vm.index, (p.node, worst, nic));
    }
    let outcomes = list
        .iter()
        .map(|vm| Outcome {
            vm: *vm,
            placed: by_index.get(&vm.index).copied(),
            tiers: Default::default(),
            took_ms: None,
            filter_timeouts: 0,
        })
        .collect();
    (outcomes, free)
}

/// An optimum's counts as a run's: per size arrived, placed, well placed,
/// refused (no classes: the program counts well placed or not).
fn optimum_run(
    name: &str,
    regime: &Regime,
    seed: u64,
    total: usize,
    list: &[Vm],
    o: &optimum::Optimum,
) -> RunCount {
    let sizes = SIZES
        .iter()
        .enumerate()
        .map(|(i, &g)| {
            let arrived = list.iter().filter(|v| v.gpus == g).count() as u32;
            SizeCount {
                vm_gpus: g,
                arrived,
                placed: o.placed[i],
                by_class: None,
                well_placed: o.well[i],
                nic_classes: None,
                refused: arrived - o.placed[i],
                gpu_tiers: Default::default(),
                by_shape: Default::default(),
                schedule_ms_p50: None,
                schedule_ms_p99: None,
                filter_timeouts: 0,
            }
        })
        .collect();
    RunCount {
        policy: name.to_string(),
        regime: regime.name(),
        seed,
        fleet_gpus: total as u32,
        sizes,
        stranded_gpus: None,
        gpu_hours_served: None,
        gpu_hours_asked: None,
        every_arrival: None,
    }
}
