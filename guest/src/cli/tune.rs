//! `p2p-guest tune-sm` (hidden): sweeps the SM copy kernel variants and grid
//! shapes on one pair, to choose `bench`'s defaults on a new GPU.

use std::path::PathBuf;

use clap::Args;
use p2p_guest::bench::plan::bench_size;
use p2p_guest::bench::{tune_sm, BenchConfig, PairSelection, PeerPolicy, SmCopy};
use p2p_report::bench::Direction;
use p2p_report::Table;
use p2p_topology::ByteSize;

use super::bench::Bar;

#[derive(Debug, Args)]
pub struct TuneArgs {
    /// Copy size.
    #[arg(long, value_parser = bench_size, default_value = "256M")]
    size: ByteSize,
    /// Blocks per SM to try.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    blocks_per_sm: Vec<u32>,
    /// Threads per block to try.
    #[arg(long, value_delimiter = ',', default_value = "256,512,1024")]
    threads: Vec<u32>,
    #[arg(long, default_value_t = 3)]
    samples: u32,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    sysfs_root: PathBuf,
}

pub fn run(args: TuneArgs) -> anyhow::Result<()> {
    let cfg = BenchConfig {
        sysfs_root: args.sysfs_root,
        modes: vec![p2p_report::bench::Mode::SmRead],
        directions: vec![Direction::Uni],
        sizes: vec![args.size],
        pairs: PairSelection::All,
        peer_access: PeerPolicy::All,
        gpus: None,
        samples: args.samples.max(1),
        warmup: 2,
        headline_bytes: args.size,
        latency_bytes: ByteSize(16),
        staged_chunk: ByteSize(8 << 20),
        staged_depth: 4,
        pingpong_rounds: 1,
        sm_copy: SmCopy::default(),
        label: "tune-sm".into(),
        host_routes: None,
    };
    let mut points = tune_sm(cfg, &args.blocks_per_sm, &args.threads, &Bar::new(true))?;
    points.sort_by(|a, b| b.gbps.total_cmp(&a.gbps));
    if args.json {
        let doc = TuneReport {
            schema: "vp2p.tune/1",
            points: &points,
        };
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    let mut t = Table::new([
        "VARIANT",
        "BLOCKS/SM",
        "THREADS",
        "MODE",
        "GB/s",
        "VERIFIED",
    ]);
    for p in &points {
        t.row([
            p.variant.to_string(),
            p.blocks_per_sm.to_string(),
            p.threads.to_string(),
            p.mode.to_string(),
            format!("{:.1}", p.gbps),
            if p.verified { "yes" } else { "NO" }.to_string(),
        ]);
    }
    print!("{}", t.render());
    Ok(())
}

/// What `tune-sm --json` prints: every point of the sweep, fastest first.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct TuneReport<'a> {
    pub schema: &'static str,
    pub points: &'a [p2p_guest::bench::TunePoint],
}
