//! Command-line front end: one module per subcommand.

mod assets;
mod bench;
mod compare;
mod doctor;
mod nccl_explain;
mod nccl_topo;
mod probe;
mod schema;
mod tune;

use clap::{Parser, Subcommand};

/// `--version`: the package version and the commit built from.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("VP2P_COMMIT"),
    ")"
);

/// GPU peer-to-peer for virtual machines: guest side.
#[derive(Debug, Parser)]
#[command(name = "p2p-guest", version = VERSION, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// One verdict for the VM: is P2P on, will NCCL use it, is it as fast as
    /// bare metal? OK (exit 0), SLOW (1) or BROKEN (2), and the next step.
    Doctor(doctor::DoctorArgs),
    /// Read the P2P clique capability of every GPU, check the hypervisor,
    /// NVLink and CUDA, and decide which peers to enable.
    Probe(probe::ProbeArgs),
    /// Measure copies between every GPU pair: copy engine, SM kernels, host
    /// staging, the driver's fallback, NCCL, and one-way latency.
    Bench(bench::BenchArgs),
    /// Put two bench runs side by side: ratios, overheads and an SVG plot.
    Compare(compare::CompareArgs),
    /// NCCL's topology file: derived from the GPUs' cliques (GPUs of one clique
    /// under one switch), or `install` the host's file from fw_cfg.
    NcclTopo(nccl_topo::NcclTopoArgs),
    /// Print the JSON Schema of a document this tool writes (probe, bench,
    /// compare, nccl-topo, tune); the list without a name.
    Schema(schema::SchemaArgs),
    /// Sweep SM copy kernel variants and grid shapes (for tuning defaults).
    #[command(hide = true)]
    TuneSm(tune::TuneArgs),
    /// Write the man pages and shell completions (for packagers).
    #[command(hide = true)]
    Assets(assets::AssetsArgs),
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Doctor(a) => doctor::run(a),
        Command::Probe(a) => probe::run(a),
        Command::Bench(a) => bench::run_cmd(a),
        Command::Compare(a) => compare::run(a),
        Command::TuneSm(a) => tune::run(a),
        Command::NcclTopo(a) => nccl_topo::run(a),
        Command::Schema(a) => schema::run(a),
        Command::Assets(a) => assets::run(a),
    }
}
