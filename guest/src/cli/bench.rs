//! `p2p-guest bench`.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use p2p_guest::bench::host_plan::HostRoutes;
use p2p_guest::bench::plan::{bench_size, DEFAULT_SIZES};
use p2p_guest::bench::{run, BenchConfig, PairSelection, PeerPolicy, Progress, SmCopy};
use p2p_guest::transfer::{self, Hold, MethodConfig, PeerAccess};
use p2p_report::bench::{BenchReport, Direction, Mode, ModeParseError, NcclTransport};
use p2p_report::Table;
use p2p_topology::{ByteSize, CudaOrdinal, GpuIndex};

fn parse_mode(s: &str) -> Result<Mode, ModeParseError> {
    s.to_ascii_lowercase().parse()
}

/// An SM copy kernel name that is not one of the variants.
#[derive(Debug, thiserror::Error)]
#[error("'{0}': one of {names}", names = p2p_kernels::copy::VARIANTS.join(", "))]
pub struct VariantError(String);

/// The index of the SM copy kernel variant named `s`.
pub fn parse_variant(s: &str) -> Result<usize, VariantError> {
    p2p_kernels::copy::VARIANTS
        .iter()
        .position(|n| n.eq_ignore_ascii_case(s))
        .ok_or_else(|| VariantError(s.to_string()))
}

/// A direction that is neither `uni` nor `bi`.
#[derive(Debug, thiserror::Error)]
#[error("'{0}': want uni or bi")]
struct DirectionError(String);

fn parse_direction(s: &str) -> Result<Direction, DirectionError> {
    match s.to_ascii_lowercase().as_str() {
        "uni" => Ok(Direction::Uni),
        "bi" => Ok(Direction::Bi),
        _ => Err(DirectionError(s.to_string())),
    }
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Ordered GPU pairs to measure: every pair, only those the decision
    /// allows, or each GPU with itself (device-local copies).
    #[arg(long, value_enum, ignore_case = true, default_value = "all")]
    pairs: PairSelection,
    /// Modes: ce, sm-read, sm-write, staged, driver, nccl, nccl-nop2p,
    /// pingpong, max (every engine at once; `--list-modes` says what each needs).
    #[arg(long, value_delimiter = ',', value_parser = parse_mode,
          default_value = "ce,sm-read,sm-write,staged,driver,nccl,nccl-nop2p,pingpong")]
    modes: Vec<Mode>,
    /// Print every mode with what it needs and exit.
    #[arg(long)]
    list_modes: bool,
    /// Copy sizes (256M, 256MiB, 0x1000; K, M, G are powers of 1024).
    /// Default: 4 B to 1 GiB.
    #[arg(long, value_delimiter = ',', value_parser = bench_size)]
    sizes: Vec<ByteSize>,
    /// Directions to measure.
    #[arg(long, value_delimiter = ',', value_parser = parse_direction, default_value = "uni,bi")]
    directions: Vec<Direction>,
    /// Which pairs get peer access: the probe's decision, every pair CUDA
    /// can do, or none (every copy takes the driver's staged path).
    #[arg(long, value_enum, ignore_case = true, default_value = "decision")]
    peer_access: PeerPolicy,
    /// CUDA ordinals to use (default: all); reports number them 0.. in this order.
    #[arg(long, value_delimiter = ',')]
    gpus: Option<Vec<usize>>,
    /// Timed samples per measurement.
    #[arg(long, default_value_t = 5)]
    samples: u32,
    /// Untimed warm-up copies before the samples.
    #[arg(long, default_value_t = 2)]
    warmup: u32,
    /// Size the bandwidth matrices are printed at.
    #[arg(long, value_parser = bench_size, default_value = "256M")]
    headline_size: ByteSize,
    /// Size the latency matrices are printed at.
    #[arg(long, value_parser = bench_size, default_value = "16")]
    latency_size: ByteSize,
    /// Chunk size of the staged pipeline.
    #[arg(long, value_parser = bench_size, default_value = "8M")]
    staged_chunk: ByteSize,
    /// Pinned chunks in flight in the staged pipeline.
    #[arg(long, default_value_t = 4)]
    staged_depth: usize,
    /// Round trips per ping-pong sample.
    #[arg(long, default_value_t = 20000)]
    pingpong_rounds: u32,
    /// SM copy kernel variant; the default is the best `p2p-guest tune-sm`
    /// found on 2x H200 (all variants were within 2.5% of each other there).
    #[arg(long, default_value = "vp2p_copy_cs4", value_parser = parse_variant)]
    sm_kernel: usize,
    /// Blocks per SM for SM copy kernels.
    #[arg(long, default_value_t = 4)]
    sm_blocks_per_sm: u32,
    /// Threads per block for SM copy kernels.
    #[arg(long, default_value_t = 1024)]
    sm_threads: u32,
    /// Write the full report (every sample) as JSON to FILE ("-": stdout, no table).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// A name for this run, shown by compare.
    #[arg(long, default_value = "")]
    label: String,
    /// sysfs tree the probe reads.
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    sysfs_root: PathBuf,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
    /// A `p2p-host plan --json` file for this VM: each pair's route in the
    /// report is then the host's (pcie-switch, pcie-root-complex, ...),
    /// matched through the plan's guest addresses.
    #[arg(long, value_name = "FILE")]
    host_plan: Option<PathBuf>,
    /// The VM of --host-plan this guest is, when the plan holds several.
    #[arg(long, value_name = "NAME", requires = "host_plan")]
    host_plan_vm: Option<String>,
    /// Also draw the run as heatmaps into this SVG file: one GPU x GPU grid
    /// per mode and direction, cells coloured against the best pair and
    /// labelled with GB/s (microseconds for ping-pong) and the pair's route.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Measure nothing: read a report saved with --json from FILE and print
    /// (or draw, with --svg) it.
    #[arg(long, value_name = "FILE")]
    from: Option<PathBuf>,
}

pub struct Bar(pub Option<ProgressBar>);

impl Bar {
    /// A progress bar on stderr, or none.
    pub fn new(show: bool) -> Self {
        if !show {
            return Bar(None);
        }
        let b = ProgressBar::new(0);
        b.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        Bar(Some(b))
    }
}

impl Progress for Bar {
    fn start(&self, total: u64) {
        if let Some(b) = &self.0 {
            b.set_length(total);
        }
    }
    fn step(&self, what: &str) {
        if let Some(b) = &self.0 {
            b.set_message(what.to_string());
            b.inc(1);
        }
    }
    fn note(&self, what: &str) {
        match &self.0 {
            Some(b) => b.println(format!("note: {what}")),
            None => eprintln!("note: {what}"),
        }
    }
    fn finish(&self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}

/// `--list-modes`: every mode and what it needs, from the methods themselves.
fn list_modes() -> String {
    let cfg = MethodConfig {
        staged_chunk: ByteSize(8 << 20),
        staged_depth: 4,
    };
    let mut t = Table::new([
        "MODE",
        "PEER ACCESS",
        "HOST STAGING",
        "SM KERNEL",
        "SPIN HOLD",
    ]);
    let yes = |b: bool| if b { "yes" } else { "no" }.to_string();
    for mode in Mode::ALL {
        let row = match transfer::method(mode, &cfg) {
            Some(m) => {
                let n = m.needs();
                [
                    mode.to_string(),
                    match n.peer_access {
                        PeerAccess::Required => "required",
                        PeerAccess::Used => "used when on",
                        PeerAccess::Off => "turned off",
                        PeerAccess::Unused => "not used",
                    }
                    .into(),
                    yes(n.host_staging),
                    yes(n.sm_kernel),
                    match n.hold {
                        Hold::Always => "yes",
                        Hold::WithPeerAccess => "with peer access",
                        Hold::Never => "no",
                    }
                    .into(),
                ]
            }
            None => [
                mode.to_string(),
                match mode {
                    Mode::Pingpong => "required",
                    Mode::NcclNoP2p => "NCCL_P2P_DISABLE=1",
                    _ => "NCCL decides",
                }
                .into(),
                "-".into(),
                yes(mode == Mode::Pingpong),
                "no".into(),
            ],
        };
        t.row(row);
    }
    t.render()
}

pub fn run_cmd(args: BenchArgs) -> anyhow::Result<()> {
    if args.list_modes {
        print!("{}", list_modes());
        return Ok(());
    }
    if let Some(path) = &args.svg {
        // Before a run of minutes, not after it.
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        anyhow::ensure!(
            dir.is_dir(),
            "--svg {}: directory {} does not exist",
            path.display(),
            dir.display()
        );
    }
    if let Some(from) = &args.from {
        let report = super::compare::load(from)?;
        return output(&args, &report);
    }
    let sizes: Vec<ByteSize> = if args.sizes.is_empty() {
        DEFAULT_SIZES.map(ByteSize).to_vec()
    } else {
        args.sizes.clone()
    };
    let child_nccl = args.modes.contains(&Mode::NcclNoP2p);
    let in_process: Vec<Mode> = args
        .modes
        .iter()
        .copied()
        .filter(|m| *m != Mode::NcclNoP2p)
        .collect();
    let label = if args.label.is_empty() {
        format!("peer-access {:?}", args.peer_access).to_lowercase()
    } else {
        args.label.clone()
    };
    let host_routes = match &args.host_plan {
        Some(f) => Some(HostRoutes::load(f, args.host_plan_vm.as_deref())?),
        None => None,
    };
    let cfg = BenchConfig {
        host_routes,
        sysfs_root: args.sysfs_root.clone(),
        modes: in_process,
        directions: args.directions.clone(),
        sizes: sizes.clone(),
        pairs: args.pairs,
        peer_access: args.peer_access,
        gpus: args
            .gpus
            .as_ref()
            .map(|g| g.iter().copied().map(CudaOrdinal).collect()),
        samples: args.samples.max(1),
        warmup: args.warmup,
        headline_bytes: args.headline_size,
        latency_bytes: args.latency_size,
        staged_chunk: args.staged_chunk,
        staged_depth: args.staged_depth,
        pingpong_rounds: args.pingpong_rounds.max(1),
        sm_copy: SmCopy {
            variant: args.sm_kernel,
            blocks_per_sm: args.sm_blocks_per_sm.max(1),
            threads: args.sm_threads.clamp(32, 1024),
        },
        label,
    };
    let nccl_log = capture_nccl_channels(&cfg.modes);
    let bar = Bar::new(!args.no_progress);
    let mut report = run(cfg, &bar)?;
    if let Some(log) = &nccl_log {
        report.nccl_transports = nccl_transports(log, Mode::Nccl);
        let _ = std::fs::remove_file(log);
    }
    if child_nccl {
        bar.note(
            "NCCL with NCCL_P2P_DISABLE=1 runs in a child process (NCCL reads it once per process)",
        );
        let (results, transports) = nccl_without_p2p(&args, &sizes)?;
        report.results.extend(results);
        report.nccl_transports.extend(transports);
    }
    output(&args, &report)
}

/// Writes the report where asked (JSON, picture) and the table to stdout;
/// fails when a measurement did not verify.
fn output(args: &BenchArgs, report: &BenchReport) -> anyhow::Result<()> {
    if let Some(path) = &args.svg {
        let svg = p2p_report::picture::heatmap::bench_svg(report)
            .with_context(|| format!("--svg {}", path.display()))?;
        std::fs::write(path, &svg).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {} ({} bytes)", path.display(), svg.len());
    }
    let text_to_stdout = !matches!(&args.json, Some(p) if p.as_os_str() == "-");
    match &args.json {
        Some(p) if p.as_os_str() == "-" => println!("{}", serde_json::to_string_pretty(report)?),
        Some(p) => std::fs::write(p, serde_json::to_string_pretty(report)? + "\n")
            .with_context(|| format!("writing {}", p.display()))?,
        None => {}
    }
    if text_to_stdout {
        print!("{}", report.render_text());
    }
    let failed = report
        .results
        .iter()
        .filter(|m| !m.verification.ok())
        .count();
    if failed > 0 {
        bail!("{failed} measurement(s) failed verification: their numbers are not valid");
    }
    Ok(())
}

/// Runs `bench --modes nccl` again in a child with NCCL_P2P_DISABLE=1 and
/// relabels its results.
fn nccl_without_p2p(
    args: &BenchArgs,
    sizes: &[ByteSize],
) -> anyhow::Result<(Vec<p2p_report::bench::Measurement>, Vec<NcclTransport>)> {
    let exe = std::env::current_exe().context("locating p2p-guest for the NCCL child run")?;
    let size_list: Vec<String> = sizes.iter().map(|s| s.0.to_string()).collect();
    let mut cmd = Command::new(exe);
    cmd.args([
        "bench",
        "--modes",
        "nccl",
        "--no-progress",
        "--label",
        "nccl-nop2p",
    ])
    .args(["--sizes", &size_list.join(",")])
    .args([
        "--samples",
        &args.samples.to_string(),
        "--warmup",
        &args.warmup.to_string(),
    ])
    .arg("--sysfs-root")
    .arg(&args.sysfs_root)
    // The report comes back on the child's standard output: no file another
    // user could predict or replace.
    .args(["--json", "-"])
    .env("NCCL_P2P_DISABLE", "1");
    if let Some(g) = &args.gpus {
        let list: Vec<String> = g.iter().map(usize::to_string).collect();
        cmd.args(["--gpus", &list.join(",")]);
    }
    let out = cmd.output().context("running the NCCL_P2P_DISABLE child")?;
    if !out.status.success() {
        bail!(
            "NCCL_P2P_DISABLE child failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let child: BenchReport =
        serde_json::from_slice(&out.stdout).context("parsing the child's report")?;
    let results = child
        .results
        .into_iter()
        .filter(|m| m.mode == Mode::Nccl)
        .map(|mut m| {
            m.mode = Mode::NcclNoP2p;
            m
        })
        .collect();
    let transports = child
        .nccl_transports
        .into_iter()
        .map(|mut t| {
            t.mode = Mode::NcclNoP2p;
            t
        })
        .collect();
    Ok((results, transports))
}

/// With an `nccl` mode and NCCL_DEBUG left to us: NCCL's INFO lines about
/// channels go to a file of this run (never to the terminal), read back into
/// the report. Set here, before CUDA or NCCL start any thread of this
/// process, because NCCL reads its variables once.
fn capture_nccl_channels(modes: &[Mode]) -> Option<std::path::PathBuf> {
    if !modes.contains(&Mode::Nccl) || std::env::var_os("NCCL_DEBUG").is_some() {
        return None;
    }
    let log = std::env::temp_dir().join(format!("vp2p-bench-nccl-{}.log", std::process::id()));
    std::env::set_var("NCCL_DEBUG", "INFO");
    std::env::set_var("NCCL_DEBUG_SUBSYS", "INIT,P2P,SHM,NET");
    std::env::set_var("NCCL_DEBUG_FILE", &log);
    Some(log)
}

/// Every pair's `via` texts from NCCL's log, by rank (the run's GPU index).
fn nccl_transports(log: &std::path::Path, mode: Mode) -> Vec<NcclTransport> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let seen = p2p_nccl::observed::parse_log(&text);
    let mut out: Vec<NcclTransport> = Vec::new();
    for c in &seen.channels {
        let (src, dst) = (GpuIndex(c.from as usize), GpuIndex(c.to as usize));
        match out.iter_mut().find(|t| t.src == src && t.dst == dst) {
            Some(t) if !t.via.contains(&c.via) => t.via.push(c.via.clone()),
            Some(_) => {}
            None => out.push(NcclTransport {
                mode,
                src,
                dst,
                via: vec![c.via.clone()],
            }),
        }
    }
    out.sort_by_key(|t| (t.src.0, t.dst.0));
    out
}
