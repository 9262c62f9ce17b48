//! Command-line front end: one module per subcommand.

mod probe;

use clap::{Parser, Subcommand};

/// GPU peer-to-peer for virtual machines: guest side.
#[derive(Debug, Parser)]
#[command(name = "p2p-guest", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Read the P2P clique capability of every GPU, check the hypervisor,
    /// NVLink and CUDA, and decide which peers to enable.
    Probe(probe::ProbeArgs),
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Probe(a) => probe::run(a),
    }
}
