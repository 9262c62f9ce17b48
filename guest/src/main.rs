//! `p2p-guest`: GPU peer-to-peer inside a VM: probe, bench, compare.

mod cli;

use clap::Parser;

/// Exit status of a usage error under `p2p-guest doctor` (sysexits' EX_USAGE).
const USAGE_EXIT_DOCTOR: i32 = 64;

fn main() {
    // Output piped into `head` ends quietly, as with other command-line
    // tools, instead of a panic on the broken pipe.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread
    // exists; no handler of ours is replaced.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let args = match cli::Cli::try_parse() {
        Ok(a) => a,
        // `doctor` keeps exit status 2 for its BROKEN verdict, so its usage
        // errors exit 64 (EX_USAGE) instead of clap's 2; help and version
        // (not errors) exit 0 as usual.
        Err(e) if e.use_stderr() && std::env::args().nth(1).as_deref() == Some("doctor") => {
            let _ = e.print();
            std::process::exit(USAGE_EXIT_DOCTOR);
        }
        Err(e) => e.exit(),
    };
    if let Err(e) = cli::run(args) {
        eprintln!("p2p-guest: error: {e:#}");
        std::process::exit(1);
    }
}
