//! `fleet`: the benchmark `scripts/fleet.sh` runs (see p2p_fleet).

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Parser;
use p2p_allocation::dra::score::Ask;
use p2p_fleet::arrivals::{Mix, Regime};
use p2p_fleet::tally::{OptimumRecord, RunCount};
use p2p_fleet::{self as fleet, figures, policy::Policy, tuning, FleetConfig};
use p2p_tests::kube::ControlPlane;

/// VM pods placed by the real kube-scheduler on a fleet of simulated nodes
/// drawn from sysfs trees, under vp2p's attributes, NVIDIA's and counting,
/// against a greedy heuristic and the exact optimum, over the same arrivals.
#[derive(Parser, Debug)]
#[command(name = "fleet")]
struct Args {
    /// Directory whose subdirectories are sysfs trees (or hold one in sysfs/ or sysfs.tgz).
    #[arg(long, required_unless_present_any = ["report", "print_templates", "tuning"])]
    trees: Option<PathBuf>,
    /// Simulated nodes.
    #[arg(long, default_value_t = 200)]
    nodes: usize,
    /// Regimes, comma-separated: fill (nobody leaves, arrivals until
    /// --demand), churn (Poisson arrivals and exponential lifetimes at each
    /// of --churn-loads).
    #[arg(long, value_delimiter = ',', default_value = "fill,churn")]
    regimes: Vec<String>,
    /// Fill: arrivals until they ask this multiple of the fleet's GPUs.
    #[arg(long, default_value_t = 1.1)]
    demand: f64,
    /// Churn: offered loads (multiples of the fleet's GPUs).
    #[arg(long, value_delimiter = ',', default_value = "0.8,1.0,1.2")]
    churn_loads: Vec<f64>,
    /// Churn: time before counting starts, in mean lifetimes.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Churn: time counted, in mean lifetimes.
    #[arg(long, default_value_t = 2.0)]
    window: f64,
    /// The mix of VM sizes: SIZE=PERCENT for 2, 4 and 8 GPUs, shares adding
    /// to 100, the 4-GPU size written 4+nic (its claims ask for an RDMA NIC);
    /// the default's reason is in docs/fleet.md.
    #[arg(long, default_value = "2=60,4+nic=30,8=10")]
    mix: String,
    /// Shapes' weights in the draw of nodes, NAME=WEIGHT,.. (a shape not
    /// named weighs 1, so the default draws every usable shape alike).
    #[arg(long, value_delimiter = ',')]
    shape_weights: Vec<String>,
    /// Churn: the instants the optimum's upper bound checks the fleet's
    /// capacity at (more: tighter and slower).
    #[arg(long, default_value_t = 12)]
    bound_instants: usize,
    /// How many seeds (each draws its own nodes and arrivals).
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// The first seed. Seeds 1..=10 are the tuning set the templates are
    /// chosen on; reported figures come from 11 on (the test set).
    #[arg(long, default_value_t = 11)]
    first_seed: u64,
    /// Policies, comma-separated: vp2p, nvidia, count (placed by
    /// kube-scheduler), greedy, optimum (offline, fill only).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "vp2p,nvidia,count,kubevirt,greedy,optimum"
    )]
    policies: Vec<String>,
    /// Write the counts as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// kube-scheduler settings (KubeSchedulerConfiguration fields below the
    /// top level, e.g. docs/examples/fleet-scheduler-profile.yaml); default: its defaults.
    #[arg(long, value_name = "FILE")]
    scheduler_profile: Option<PathBuf>,
    /// The vp2p policy's claim templates: a file holding ResourceClaimTemplates
    /// named two-peer-gpus-tiered, four-peer-gpus-and-nic-tiered and
    /// eight-peer-gpus-tiered (default: the shipped host/kubernetes/dra/claim-templates-tiered.yaml).
    #[arg(long, value_name = "FILE")]
    templates: Option<PathBuf>,
    /// The order vp2p's slices list GPUs in (`p2p-host dra slices
    /// --device-order`: nic-last, the driver's default, or address); NVIDIA's
    /// cut keeps address order.
    #[arg(long, value_name = "ORDER", default_value_t = p2p_allocation::dra::DeviceOrder::default())]
    device_order: p2p_allocation::dra::DeviceOrder,
    /// Run vp2p's scheduler extender (`p2p-host dra extender`) at this
    /// weight beside the scheduler's plugins; it scores the vp2p and
    /// kubevirt policies' pods only (its log: WORK/extender.log).
    #[arg(long, value_name = "WEIGHT")]
    extender: Option<u32>,
    /// The sizes the extender keeps room for (its `--keep`), comma-separated,
    /// e.g. 4+nic,8; default: every size of --mix.
    #[arg(long, value_delimiter = ',', value_name = "ASK")]
    extender_keep: Vec<Ask>,
    /// The nvidia policy's claim templates, as --templates is vp2p's: a
    /// file holding nvidia-2, nvidia-4 and nvidia-8 (default: the ones
    /// generated from NVIDIA's attributes, docs/fleet.md).
    #[arg(long, value_name = "FILE")]
    nvidia_templates: Option<PathBuf>,
    /// Print POLICY's claim templates as YAML (vp2p: the --templates file;
    /// nvidia, count, kubevirt: the generated ones), and run nothing: a
    /// start for a file of your own.
    #[arg(long, value_name = "POLICY", conflicts_with = "report")]
    print_templates: Option<String>,
    /// Compare saved `--json` FILEs of tuning runs, one line per file and
    /// scheduled policy: VMs well placed, refused and arrived over every
    /// seed, regime and size (scripts/fleet-tune.sh), and run nothing.
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with_all = ["report", "print_templates"])]
    tuning: Vec<PathBuf>,
    /// Print the tables and goals of saved `--json` FILEs again, and run
    /// nothing; several files (one seed each, say) count as one run over
    /// their seeds.
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with = "json")]
    report: Vec<PathBuf>,
    /// Work directory (control plane, logs, tree copies).
    #[arg(long, default_value = "target/fleet")]
    work: PathBuf,
}

fn regimes(a: &Args) -> anyhow::Result<Vec<Regime>> {
    // Written to refuse NaN too: a NaN compares false.
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if !positive(a.demand) {
        bail!("--demand must be above 0, got {}", a.demand);
    }
    let valid = a.churn_loads.iter().all(|l| positive(*l))
        && a.warmup.is_finite()
        && a.warmup >= 0.0
        && positive(a.window);
    if !valid {
        bail!(
            "--churn-loads must be above 0, --warmup at least 0 and --window above 0 (got {:?}, {}, {})",
            a.churn_loads,
            a.warmup,
            a.window
        );
    }
    let mut out = Vec::new();
    for r in &a.regimes {
        match r.as_str() {
            "fill" => out.push(Regime::Fill { demand: a.demand }),
            "churn" => out.extend(a.churn_loads.iter().map(|&load| Regime::Churn {
                load,
                warmup: a.warmup,
                window: a.window,
            })),
            other => bail!("--regimes: unknown regime '{other}' (fill, churn)"),
        }
    }
    if out.is_empty() {
        bail!("--regimes: none given");
    }
    Ok(out)
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    if !a.report.is_empty() {
        return print_saved(&a.report);
    }
    if !a.tuning.is_empty() {
        return print_tuning(&a.tuning);
    }
    if let Some(p) = &a.print_templates {
        let policy = Policy::parse(p)
            .filter(|p| p.scheduled())
            .with_context(|| format!("--print-templates: '{p}' is not a scheduled policy (vp2p, nvidia, count, kubevirt)"))?;
        let vp2p = a
            .templates
            .clone()
            .unwrap_or_else(|| p2p_tests::repo_root().join(fleet::policy::TIERED));
        let docs =
            fleet::policy::templates(policy, &vp2p, a.nvidia_templates.as_deref(), "default")
                .map_err(anyhow::Error::msg)?;
        for d in docs {
            print!("---\n{}", serde_yaml::to_string(&d)?);
        }
        return Ok(());
    }
    if a.nodes == 0 || a.seeds == 0 {
        bail!("--nodes and --seeds must be at least 1");
    }
    let regimes = regimes(&a)?;
    let policies = a
        .policies
        .iter()
        .map(|p| {
            Policy::parse(p).with_context(|| {
                format!("--policies: unknown policy '{p}' (vp2p, nvidia, count, kubevirt, greedy, optimum)")
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let trees = a.trees.clone().unwrap_or_default();
    if !trees.is_dir() {
        bail!("--trees {}: not a directory", trees.display());
    }
    std::fs::create_dir_all(&a.work).with_context(|| format!("{}", a.work.display()))?;
    let work = std::fs::canonicalize(&a.work)?;
    let p2p_host = p2p_tests::binary("p2p-host");
    let needs_kube = policies.iter().any(|p| p.scheduled());
    let cp_dir = work.join("control-plane");
    let _ = std::fs::remove_dir_all(&cp_dir);
    // The extender's port, picked now: the scheduler's settings name it
    // before the control plane starts, the extender starts after it.
    let extender_port = match a.extender {
        Some(_) => Some(
            std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port(),
        ),
        None => None,
    };
    if a.scheduler_profile.is_some() || a.extender.is_some() {
        let mut doc = match &a.scheduler_profile {
            Some(f) => {
                let text = std::fs::read_to_string(f)
                    .with_context(|| format!("--scheduler-profile {}", f.display()))?;
                serde_yaml::from_str(&text)
                    .with_context(|| format!("--scheduler-profile {}: not YAML", f.display()))?
            }
            None => serde_yaml::Value::Mapping(Default::default()),
        };
        if let (Some(weight), Some(port)) = (a.extender, extender_port) {
            let ext: serde_yaml::Value = serde_yaml::from_str(&format!(
                "urlPrefix: http://127.0.0.1:{port}\nprioritizeVerb: prioritize\nweight: {weight}\nnodeCacheCapable: true\nhttpTimeout: 5s\n"
            ))?;
            doc["extenders"] = serde_yaml::Value::Sequence(vec![ext]);
        }
        std::fs::create_dir_all(&cp_dir)?;
        std::fs::write(
            cp_dir.join("scheduler-profile.yaml"),
            serde_yaml::to_string(&doc)?,
        )?;
    }
    let mix = Mix::parse(&a.mix).map_err(|e| anyhow::anyhow!("--mix {}: {e}", a.mix))?;
    let keep: Vec<String> = if a.extender_keep.is_empty() {
        mix.0
            .iter()
            .map(|e| Ask {
                gpus: e.gpus.into(),
                nic: e.nic,
            })
            .map(|k| k.to_string())
            .collect()
    } else {
        a.extender_keep.iter().map(Ask::to_string).collect()
    };
    let cp = needs_kube.then(|| ControlPlane::start_at(&cp_dir));
    // vp2p's extender, scoring the pods of vp2p's and kubevirt's policies.
    let _extender = match (&cp, extender_port) {
        (Some(cp), Some(port)) => Some(ExtenderProcess(
            std::process::Command::new(&p2p_host)
                .args(["dra", "extender", "--listen"])
                .arg(format!("127.0.0.1:{port}"))
                .arg("--kubeconfig")
                .arg(cp.kubeconfig())
                .args([Policy::Vp2p, Policy::Kubevirt].iter().flat_map(|p| {
                    [
                        "--pod-label".to_string(),
                        format!("{}={}", fleet::cluster::POLICY_LABEL, p.name()),
                    ]
                }))
                // Room is kept for every size of the mix unless told (it
                // guards only the sizes larger than a pod's).
                .args(keep.iter().flat_map(|k| ["--keep".to_string(), k.clone()]))
                .stderr(std::fs::File::create(work.join("extender.log"))?)
                .spawn()
                .context("starting p2p-host dra extender")?,
        )),
        _ => None,
    };
    let cfg = FleetConfig {
        trees,
        nodes: a.nodes,
        regimes,
        seeds: a.seeds,
        first_seed: a.first_seed,
        policies: policies.clone(),
        work: work.clone(),
        repo: p2p_tests::repo_root(),
        vp2p_templates: a
            .templates
            .clone()
            .unwrap_or_else(|| p2p_tests::repo_root().join(fleet::policy::TIERED)),
        nvidia_templates: a.nvidia_templates.clone(),
        scheduler_profile: a
            .scheduler_profile
            .as_ref()
            .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone())),
        p2p_host,
        kubeconfig: cp.as_ref().map(|c| c.kubeconfig()).unwrap_or_default(),
        bound_instants: a.bound_instants.max(1),
        mix,
        shape_weights: a
            .shape_weights
            .iter()
            .map(|w| {
                let (n, v) = w
                    .split_once('=')
                    .with_context(|| format!("--shape-weights: {w} is not NAME=WEIGHT"))?;
                let v: u32 = v.parse().with_context(|| {
                    format!("--shape-weights: {w}: the weight is a whole number")
                })?;
                Ok((n.to_string(), v))
            })
            .collect::<anyhow::Result<_>>()?,
        checkpoint: a.json.clone(),
        device_order: a.device_order,
        extender: a.extender,
        extender_keep: keep,
    };
    let report = fleet::run(&cfg).map_err(anyhow::Error::msg)?;
    println!(
        "fleet: {} nodes per seed from {} tree(s) ({} skipped), seeds {}..={}, VM mix {}",
        a.nodes,
        report.used.len(),
        report.skipped.len(),
        a.first_seed,
        a.first_seed + a.seeds - 1,
        cfg.mix
            .0
            .iter()
            .map(|e| format!(
                "{}% {}-GPU{}",
                e.percent,
                e.gpus,
                if e.nic { "+NIC" } else { "" }
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (name, why) in &report.skipped {
        println!("  skipped {name}: {why}");
    }
    print_counts(&report.runs, &report.optima);
    for (p, r, seed, n, secs) in &report.throughput {
        println!(
            "  {p} {r} seed {seed}: {n} pods in {secs:.1} s, {:.1} pods/s",
            *n as f64 / secs
        );
    }
    let timeouts: Vec<String> = report
        .runs
        .iter()
        .flat_map(|r| {
            r.sizes
                .iter()
                .filter(|s| s.filter_timeouts > 0)
                .map(move |s| {
                    format!(
                        "{} {} seed {} {}-GPU: {}",
                        r.policy, r.regime, r.seed, s.vm_gpus, s.filter_timeouts
                    )
                })
        })
        .collect();
    if timeouts.is_empty() {
        println!("DRA filter timeout (10 s): never hit");
    } else {
        println!("DRA filter timeout (10 s) hit: {}", timeouts.join("; "));
    }
    if let Some(cp) = &cp {
        let log = std::fs::read_to_string(cp.dir().join("logs/scheduler.log")).unwrap_or_default();
        let n = log.matches("timed out trying to allocate devices").count();
        println!("kube-scheduler log: {n} line(s) with \"timed out trying to allocate devices\"");
    }
    if let Some(path) = &a.json {
        report.write(&cfg, path, None).map_err(anyhow::Error::msg)?;
        eprintln!("fleet: counts in {}", path.display());
    }
    Ok(())
}

/// The extender's process, stopped with the run.
struct ExtenderProcess(std::process::Child);

impl Drop for ExtenderProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The policies present in `runs`, in the figures' order.
fn present(runs: &[RunCount]) -> Vec<&'static str> {
    [
        "vp2p",
        "nvidia",
        "count",
        "kubevirt",
        "greedy",
        "optimum",
        "optimum-well",
    ]
    .into_iter()
    .filter(|p| runs.iter().any(|r| r.policy == *p))
    .collect()
}

/// The tables, vp2p against the optimum and the bounds, and the goals.
fn print_counts(runs: &[RunCount], optima: &[OptimumRecord]) {
    let names = present(runs);
    println!("VMs per regime, policy and size (counts, mean over seeds):");
    print!("{}", figures::table(runs, &names));
    println!("Stranded GPUs and GPU-hours (mean over seeds):");
    print!("{}", figures::runs(runs, &names));
    println!("vp2p against the optimum (fill) and the upper bound (churn):");
    print!("{}", figures::bounds_text(runs, optima));
    println!("Goals, seed by seed:");
    print!("{}", figures::goals_text(runs));
}

/// `--tuning FILE...`: one line per file and scheduled policy, each
/// policy's pick marked (p2p_fleet::tuning).
fn print_tuning(files: &[PathBuf]) -> anyhow::Result<()> {
    let mut candidates = Vec::new();
    for f in files {
        let doc = read_saved(f)?;
        let runs: Vec<RunCount> = serde_json::from_value(doc["runs"].clone())
            .with_context(|| format!("{}: `runs` is not a list of fleet counts", f.display()))?;
        for p in Policy::ALL
            .iter()
            .filter(|p| p.scheduled())
            .map(|p| p.name())
        {
            candidates.extend(tuning::Candidate::of(
                &f.display().to_string(),
                &tuning::setup(&doc, p),
                p,
                &runs,
            ));
        }
    }
    print!("{}", tuning::table(&candidates));
    Ok(())
}

/// A saved `--json` document, its schema checked.
fn read_saved(f: &std::path::Path) -> anyhow::Result<serde_json::Value> {
    let text = std::fs::read_to_string(f).with_context(|| format!("{}", f.display()))?;
    let doc: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", f.display()))?;
    if doc["schema"] != "vp2p.fleet/2" {
        bail!(
            "{}: schema {} (this fleet reads vp2p.fleet/2)",
            f.display(),
            doc["schema"]
        );
    }
    Ok(doc)
}

/// `--report FILE..`: the tables and goals of saved runs, their counts put
/// together; a seed, regime and policy counted in two files is refused (the
/// mean would count it twice).
fn print_saved(files: &[PathBuf]) -> anyhow::Result<()> {
    let mut runs: Vec<RunCount> = Vec::new();
    let mut optima: Vec<OptimumRecord> = Vec::new();
    let mut seen = std::collections::BTreeMap::new();
    for f in files {
        let doc = read_saved(f).with_context(|| "--report")?;
        let these: Vec<RunCount> = serde_json::from_value(doc["runs"].clone())
            .with_context(|| format!("{}: `runs` is not a list of fleet counts", f.display()))?;
        for r in &these {
            let key = (r.seed, r.regime.clone(), r.policy.clone());
            if let Some(first) = seen.insert(key, f) {
                bail!(
                    "--report: seed {} {} {} is in both {} and {}",
                    r.seed,
                    r.regime,
                    r.policy,
                    first.display(),
                    f.display()
                );
            }
        }
        runs.extend(these);
        let these: Vec<OptimumRecord> = serde_json::from_value(doc["optima"].clone())
            .with_context(|| format!("{}: `optima` is not a list of optima", f.display()))?;
        optima.extend(these);
    }
    print_counts(&runs, &optima);
    Ok(())
}
