//! `fleet`: the benchmark `scripts/fleet.sh` runs (see p2p_fleet).

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Parser;
use p2p_fleet::{self as fleet, figures, policy::Policy, FleetConfig};
use p2p_tests::kube::ControlPlane;

/// VM pods placed by the real kube-scheduler on a fleet of simulated nodes
/// drawn from sysfs trees, under vp2p's attributes, NVIDIA's, counting, and
/// an offline oracle.
#[derive(Parser, Debug)]
#[command(name = "fleet")]
struct Args {
    /// Directory whose subdirectories are sysfs trees (or hold one in sysfs/ or sysfs.tgz).
    #[arg(long, required_unless_present = "report")]
    trees: Option<PathBuf>,
    /// Simulated nodes.
    #[arg(long, default_value_t = 200)]
    nodes: usize,
    /// Loads to report: shares of the fleet's GPUs taken, ascending.
    #[arg(long, value_delimiter = ',', default_value = "0.5,0.7,0.9")]
    loads: Vec<f64>,
    /// Seeds 1..=K (each draws its own nodes and arrivals).
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Policies, comma-separated: vp2p, nvidia, count, oracle.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "vp2p,nvidia,count,oracle"
    )]
    policies: Vec<String>,
    /// Submit this many VM pods per run: past the top load one VM leaves
    /// before each arrives (the scale run); without it a run stops at the top load.
    #[arg(long)]
    pods: Option<usize>,
    /// Write the records as JSON to FILE.
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
    /// Print the table and goals of a saved `--json` FILE again, and run nothing.
    #[arg(long, value_name = "FILE", conflicts_with = "json")]
    report: Option<PathBuf>,
    /// Work directory (control plane, logs, tree copies).
    #[arg(long, default_value = "target/fleet")]
    work: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    if a.loads.is_empty() || a.loads.iter().any(|l| !(*l > 0.0 && *l <= 1.0)) {
        bail!("--loads: each load is a share in (0, 1], got {:?}", a.loads);
    }
    if a.loads.windows(2).any(|w| w[0] >= w[1]) {
        bail!("--loads must ascend, got {:?}", a.loads);
    }
    if a.nodes == 0 || a.seeds == 0 {
        bail!("--nodes and --seeds must be at least 1");
    }
    if let Some(f) = &a.report {
        return print_saved(f);
    }
    let policies = a
        .policies
        .iter()
        .map(|p| {
            Policy::parse(p).with_context(|| {
                format!("--policies: unknown policy '{p}' (vp2p, nvidia, count, oracle)")
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
    let needs_kube = policies.iter().any(|p| *p != Policy::Oracle);
    let cp_dir = work.join("control-plane");
    let _ = std::fs::remove_dir_all(&cp_dir);
    if let Some(f) = &a.scheduler_profile {
        let text = std::fs::read_to_string(f)
            .with_context(|| format!("--scheduler-profile {}", f.display()))?;
        std::fs::create_dir_all(&cp_dir)?;
        std::fs::write(cp_dir.join("scheduler-profile.yaml"), text)?;
    }
    let cp = needs_kube.then(|| ControlPlane::start_at(&cp_dir));
    let cfg = FleetConfig {
        trees,
        nodes: a.nodes,
        loads: a.loads.clone(),
        seeds: a.seeds,
        policies: policies.clone(),
        pods: a.pods,
        work: work.clone(),
        repo: p2p_tests::repo_root(),
        vp2p_templates: a
            .templates
            .clone()
            .unwrap_or_else(|| p2p_tests::repo_root().join(fleet::policy::TIERED)),
        p2p_host,
        kubeconfig: cp.as_ref().map(|c| c.kubeconfig()).unwrap_or_default(),
    };
    let report = fleet::run(&cfg).map_err(anyhow::Error::msg)?;
    let names: Vec<&str> = policies.iter().map(|p| p.name()).collect();
    println!(
        "fleet: {} nodes per seed from {} tree(s) ({} skipped), seeds 1..={}, VM mix {}",
        a.nodes,
        report.used.len(),
        report.skipped.len(),
        a.seeds,
        fleet::arrivals::MIX
            .iter()
            .map(|(g, p, n)| format!("{p}% {g}-GPU{}", if *n { "+NIC" } else { "" }))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (name, why) in &report.skipped {
        println!("  skipped {name}: {why}");
    }
    println!("Share of admitted VMs by worst GPU-pair class (mean±sd over seeds, %):");
    print!("{}", figures::table(&report.records, &names, &a.loads));
    print!("{}", figures::goals(&report.records, &names, &a.loads));
    for (p, seed, n, secs) in &report.throughput {
        println!(
            "  {p} seed {seed}: {n} pods in {secs:.1} s, {:.1} pods/s",
            *n as f64 / secs
        );
    }
    let timeouts: Vec<String> = report
        .whole
        .iter()
        .filter(|r| r.filter_timeouts > 0)
        .map(|r| {
            format!(
                "{} seed {} {}-GPU: {}",
                r.policy, r.seed, r.vm_gpus, r.filter_timeouts
            )
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
        let doc = report.to_json(&cfg);
        std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("fleet: records in {}", path.display());
    }
    Ok(())
}

/// `--report FILE`: the table and goals of a saved run.
fn print_saved(f: &std::path::Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(f).with_context(|| format!("--report {}", f.display()))?;
    let doc: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", f.display()))?;
    let records: Vec<figures::Record> = serde_json::from_value(doc["records"].clone())
        .with_context(|| format!("{}: `records` is not a list of fleet records", f.display()))?;
    let loads: Vec<f64> = serde_json::from_value(doc["loads"].clone())
        .with_context(|| format!("{}: no `loads`", f.display()))?;
    let mut names: Vec<&str> = Vec::new();
    for p in Policy::ALL {
        if records.iter().any(|r| r.policy == p.name()) {
            names.push(p.name());
        }
    }
    println!("Share of admitted VMs by worst GPU-pair class (mean±sd over seeds, %):");
    print!("{}", figures::table(&records, &names, &loads));
    print!("{}", figures::goals(&records, &names, &loads));
    Ok(())
}
