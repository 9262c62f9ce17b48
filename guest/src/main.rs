//! `p2p-guest`: GPU peer-to-peer inside a VM: probe, bench, compare.

mod cli;

use clap::Parser;

fn main() {
    let args = cli::Cli::parse();
    if let Err(e) = cli::run(args) {
        eprintln!("p2p-guest: error: {e:#}");
        std::process::exit(1);
    }
}
