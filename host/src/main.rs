//! `p2p-host`: GPU peer-to-peer topology and configuration for VM hosts.

mod cli;

use clap::Parser;

fn main() {
    let args = cli::Cli::parse();
    if let Err(e) = cli::run(args) {
        eprintln!("p2p-host: error: {e:#}");
        std::process::exit(1);
    }
}
