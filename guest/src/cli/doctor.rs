//! `p2p-guest doctor`: is P2P on, will NCCL use it, is it as fast as bare
//! metal? One verdict (exit 0 OK, 1 SLOW, 2 BROKEN, 3 nothing to check or an
//! input unreadable; a usage error exits 64, see main.rs).

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use p2p_guest::bench::host_plan::HostRoutes;
use p2p_guest::doctor::{self, live, Inputs};
use p2p_guest::nccl_topo::explain::{ExplainInputs, ExplainReport};
use p2p_guest::probe::report::ProbeReport;
use p2p_report::bench::BenchReport;
use p2p_topology::nccl_topo::NCCL_DEFAULT_PATH;
use p2p_topology::ByteSize;

/// Exit status when an input file cannot be read (as with no GPU to check):
/// apart from the verdicts' 0, 1 and 2.
const NOTHING_CHECKED_EXIT: i32 = doctor::NOTHING_CHECKED_EXIT;

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// A `p2p-host plan --json` file for this VM: each PCIe pair's host route
    /// (switch, ACS redirect, root complex, sockets) and what it costs.
    #[arg(long, value_name = "FILE")]
    host_plan: Option<PathBuf>,
    /// The VM of --host-plan this guest is, when the plan holds several.
    #[arg(long, value_name = "NAME", requires = "host_plan")]
    host_plan_vm: Option<String>,
    /// A `p2p-guest bench --json` report (from bare metal, or another VM)
    /// to hold each pair to, instead of the table of published figures.
    #[arg(long, value_name = "FILE")]
    baseline: Option<PathBuf>,
    /// Shorter: 64 MiB copies, 3 samples.
    #[arg(long, conflicts_with = "full")]
    quick: bool,
    /// Longer: 1 GiB copies, 9 samples, 64 MiB data checks.
    #[arg(long)]
    full: bool,
    /// Print the report as JSON (schema vp2p.doctor/1), one document per VM.
    #[arg(long)]
    json: bool,
    /// sysfs tree to read (the live /sys, or a captured tree).
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    sysfs_root: PathBuf,
    /// Do not load CUDA or NVML: judge the capability, the cliques and
    /// NCCL's rules only (what a VM without the driver gives anyway).
    #[arg(long)]
    no_driver: bool,
    /// Nothing on stderr but errors (no progress bar, no notes).
    #[arg(long)]
    no_progress: bool,
    /// Judge a recorded `p2p-guest probe --json` (with --verify) instead of
    /// running live (for tests and for judging another machine's records).
    #[arg(long, value_name = "FILE", hide = true)]
    recorded_probe: Option<PathBuf>,
    /// With --recorded-probe: a recorded `p2p-guest bench --json`.
    #[arg(long, value_name = "FILE", hide = true, requires = "recorded_probe")]
    recorded_bench: Option<PathBuf>,
    /// With --recorded-probe: a recorded `p2p-guest nccl-topo explain --json`.
    #[arg(long, value_name = "FILE", hide = true, requires = "recorded_probe")]
    recorded_explain: Option<PathBuf>,
}

/// `--no-progress`: nothing on stderr but errors (the bench's notes stay in
/// its report).
struct Quiet;

impl p2p_guest::bench::Progress for Quiet {
    fn start(&self, _: u64) {}
    fn step(&self, _: &str) {}
    fn note(&self, _: &str) {}
    fn finish(&self) {}
}

fn read_json<T: serde::de::DeserializeOwned>(file: &Path, what: &str) -> anyhow::Result<T> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("{}: cannot be read", file.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{}: not a {what} document", file.display()))
}

/// The inputs from recorded reports.
fn recorded(
    args: &DoctorArgs,
    probe: &Path,
    host_routes: Option<HostRoutes>,
    baseline: Option<(String, BenchReport)>,
) -> anyhow::Result<Inputs> {
    let probe: ProbeReport = read_json(probe, "p2p-guest probe --json")?;
    let mut sources = vec![format!(
        "recorded probe: {}",
        args.recorded_probe
            .as_ref()
            .map_or(String::new(), |p| p.display().to_string())
    )];
    let bench: Option<BenchReport> = match &args.recorded_bench {
        Some(f) => {
            sources.push(format!("recorded bench: {}", f.display()));
            Some(read_json(f, "p2p-guest bench --json")?)
        }
        None => None,
    };
    let explain: Option<ExplainReport> = match &args.recorded_explain {
        Some(f) => {
            sources.push(format!("recorded explain: {}", f.display()));
            Some(read_json(f, "p2p-guest nccl-topo explain --json")?)
        }
        None => None,
    };
    if let Some((f, _)) = &baseline {
        sources.push(format!("baseline: {f}"));
    }
    Ok(Inputs {
        bench_missing: bench
            .is_none()
            .then(|| "a recorded bench (--recorded-bench)".to_string()),
        explain_missing: explain
            .is_none()
            .then(|| "a recorded explain report (--recorded-explain)".to_string()),
        probe,
        bench,
        explain,
        host_routes,
        baseline,
        sources,
    })
}

fn go(args: DoctorArgs) -> anyhow::Result<i32> {
    let host_routes = args
        .host_plan
        .as_ref()
        .map(|f| HostRoutes::load(f, args.host_plan_vm.as_deref()))
        .transpose()?;
    let baseline = match &args.baseline {
        Some(f) => Some((
            f.display().to_string(),
            read_json::<BenchReport>(f, "p2p-guest bench --json (vp2p.bench/1)")?,
        )),
        None => None,
    };
    let inputs = match &args.recorded_probe {
        Some(p) => recorded(&args, p, host_routes, baseline)?,
        None => {
            let (size, samples, verify) = if args.quick {
                (ByteSize(64 << 20), 3, ByteSize(1 << 20))
            } else if args.full {
                (ByteSize(1 << 30), 9, ByteSize(64 << 20))
            } else {
                (ByteSize(256 << 20), 5, ByteSize(4 << 20))
            };
            let bar = super::bench::Bar::new(!args.no_progress);
            let quiet = Quiet;
            let progress: &dyn p2p_guest::bench::Progress =
                if args.no_progress { &quiet } else { &bar };
            let opts = live::LiveOptions {
                sysfs_root: args.sysfs_root.clone(),
                use_driver: !args.no_driver,
                explain: ExplainInputs {
                    sysfs_root: args.sysfs_root.clone(),
                    file: None,
                    default_path: PathBuf::from(NCCL_DEFAULT_PATH),
                    cpuinfo: PathBuf::from("/proc/cpuinfo"),
                    environment: std::env::vars().collect(),
                },
                size,
                samples,
                verify_size: verify,
                host_routes,
                baseline,
            };
            live::gather(opts, progress)
                .with_context(|| format!("reading the GPUs of {}", args.sysfs_root.display()))?
        }
    };
    let report = doctor::diagnose(&inputs);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render_text());
    }
    Ok(report.exit_code)
}

/// Runs doctor and exits with its verdict's status.
pub fn run(args: DoctorArgs) -> anyhow::Result<()> {
    let code = match go(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("p2p-guest doctor: error: {e:#}");
            NOTHING_CHECKED_EXIT
        }
    };
    std::process::exit(code)
}
