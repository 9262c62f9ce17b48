//! Command-line front end: argument types and one module per subcommand.

mod select;
mod snapshot;
mod topo;

use clap::{Parser, Subcommand};

/// GPU peer-to-peer for virtual machines: host side.
#[derive(Debug, Parser)]
#[command(name = "p2p-host", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the GPU/NIC topology matrix (like `nvidia-smi topo -m`) and the
    /// ACS/IOMMU routing of every GPU pair, from sysfs alone.
    Topo(topo::TopoArgs),
    /// Copy the PCI part of a sysfs tree into a directory (a fixture).
    Snapshot(snapshot::SnapshotArgs),
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Topo(a) => topo::run(a),
        Command::Snapshot(a) => snapshot::run(a),
    }
}
