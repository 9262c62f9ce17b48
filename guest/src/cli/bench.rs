//! `p2p-guest bench`.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use p2p_guest::bench::plan::{parse_size, DEFAULT_SIZES};
use p2p_guest::bench::{run, BenchConfig, PairSelection, PeerPolicy, Progress, SmCopy};
use p2p_shared::report::bench::{BenchReport, Direction, Mode};

fn parse_mode(s: &str) -> Result<Mode, String> {
    s.to_ascii_lowercase().parse()
}

pub fn parse_variant(s: &str) -> Result<usize, String> {
    let names = p2p_kernels::entry::COPY_VARIANTS;
    names
        .iter()
        .position(|n| n.eq_ignore_ascii_case(s))
        .ok_or_else(|| format!("'{s}': one of {}", names.join(", ")))
}

fn parse_direction(s: &str) -> Result<Direction, String> {
    match s.to_ascii_lowercase().as_str() {
        "uni" => Ok(Direction::Uni),
        "bi" => Ok(Direction::Bi),
        _ => Err(format!("'{s}': want uni or bi")),
    }
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Ordered GPU pairs to measure: every pair, or only those the decision allows.
    #[arg(long, value_enum, ignore_case = true, default_value = "all")]
    pairs: PairSelection,
    /// Modes: ce, sm-read, sm-write, staged, driver, nccl, nccl-nop2p, pingpong.
    #[arg(long, value_delimiter = ',', value_parser = parse_mode,
          default_value = "ce,sm-read,sm-write,staged,driver,nccl,nccl-nop2p,pingpong")]
    modes: Vec<Mode>,
    /// Copy sizes (K, M, G are powers of 1024). Default: 4 B to 1 GiB.
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    sizes: Vec<u64>,
    /// Directions to measure.
    #[arg(long, value_delimiter = ',', value_parser = parse_direction, default_value = "uni,bi")]
    directions: Vec<Direction>,
    /// Which pairs get peer access: the probe's decision, every pair CUDA
    /// can do, or none (every copy takes the driver's staged path).
    #[arg(long, value_enum, ignore_case = true, default_value = "decision")]
    peer_access: PeerPolicy,
    /// CUDA ordinals to use (default: all).
    #[arg(long, value_delimiter = ',')]
    gpus: Option<Vec<usize>>,
    /// Timed samples per measurement.
    #[arg(long, default_value_t = 5)]
    samples: u32,
    /// Untimed warm-up copies before the samples.
    #[arg(long, default_value_t = 2)]
    warmup: u32,
    /// Size the bandwidth matrices are printed at.
    #[arg(long, value_parser = parse_size, default_value = "256M")]
    headline_size: u64,
    /// Size the latency matrices are printed at.
    #[arg(long, value_parser = parse_size, default_value = "16")]
    latency_size: u64,
    /// Chunk size of the staged pipeline.
    #[arg(long, value_parser = parse_size, default_value = "8M")]
    staged_chunk: u64,
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

pub fn run_cmd(args: BenchArgs) -> anyhow::Result<()> {
    let sizes = if args.sizes.is_empty() {
        DEFAULT_SIZES.to_vec()
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
    let cfg = BenchConfig {
        sysfs_root: args.sysfs_root.clone(),
        modes: in_process,
        directions: args.directions.clone(),
        sizes: sizes.clone(),
        pairs: args.pairs,
        peer_access: args.peer_access,
        gpus: args.gpus.clone(),
        samples: args.samples.max(1),
        warmup: args.warmup,
        headline_bytes: args.headline_size,
        latency_bytes: args.latency_size,
        staged_chunk: args.staged_chunk as usize,
        staged_depth: args.staged_depth,
        pingpong_rounds: args.pingpong_rounds.max(1),
        sm_copy: SmCopy {
            variant: args.sm_kernel,
            blocks_per_sm: args.sm_blocks_per_sm.max(1),
            threads: args.sm_threads.clamp(32, 1024),
        },
        label,
    };
    let bar = Bar::new(!args.no_progress);
    let mut report = run(cfg, &bar)?;
    if child_nccl {
        bar.note(
            "NCCL with NCCL_P2P_DISABLE=1 runs in a child process (NCCL reads it once per process)",
        );
        report.results.extend(nccl_without_p2p(&args, &sizes)?);
    }
    let text_to_stdout = !matches!(&args.json, Some(p) if p.as_os_str() == "-");
    match &args.json {
        Some(p) if p.as_os_str() == "-" => println!("{}", serde_json::to_string_pretty(&report)?),
        Some(p) => std::fs::write(p, serde_json::to_string_pretty(&report)? + "\n")
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
    sizes: &[u64],
) -> anyhow::Result<Vec<p2p_shared::report::bench::Measurement>> {
    let exe = std::env::current_exe().context("locating p2p-guest for the NCCL child run")?;
    let size_list: Vec<String> = sizes.iter().map(u64::to_string).collect();
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
    Ok(child
        .results
        .into_iter()
        .filter(|m| m.mode == Mode::Nccl)
        .map(|mut m| {
            m.mode = Mode::NcclNoP2p;
            m
        })
        .collect())
}
