//! `p2p-host`: GPU peer-to-peer topology and configuration for VM hosts.

mod cli;

use clap::Parser;

fn main() {
    // Output piped into `head` ends quietly, as with other command-line
    // tools, instead of a panic on the broken pipe.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread
    // exists; no handler of ours is replaced.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let args = cli::Cli::parse();
    if let Err(e) = cli::run(args) {
        eprintln!("p2p-host: error: {e:#}");
        std::process::exit(1);
    }
}
