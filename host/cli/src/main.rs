//! `p2p-host`: GPU peer-to-peer topology and configuration for VM hosts.

mod cli;

use clap::Parser;
use p2p_host::serve::ServeError;

fn main() {
    let args = cli::Cli::parse();
    if !args.is_server() {
        // Output piped into `head` ends quietly, as with other command-line
        // tools, instead of a panic on the broken pipe. Not for `serve`: a
        // server whose stderr reader went away must keep serving.
        // SAFETY: restoring the default disposition of SIGPIPE before any
        // thread exists; no handler of ours is replaced.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    if let Err(e) = cli::run(args) {
        eprintln!("p2p-host: error: {e:#}");
        std::process::exit(exit_status(&e));
    }
}

/// Exit status when the chooser refuses the request (`allocate`, `plan --vm
/// NAME=COUNT`): distinct from 2, a usage error clap reports, and from 1, a
/// failure (an unreadable tree or file), so a script can tell "cannot be met"
/// from "wrongly asked" and "broken".
const REFUSED: i32 = 3;

/// 78 (EX_CONFIG of sysexits.h) when a configuration file is missing or
/// malformed, or serve's GPUs are ([`ServeError::is_config`]: a capture file,
/// a socket path, a socket given twice), so a service manager can tell it
/// from a failure worth a restart; [`REFUSED`] (3) when the chooser refuses
/// the request (unknown ids, too large, must-include not available, no
/// clique with --strict); 1 otherwise. clap exits 2 on a usage error before
/// any of this runs.
fn exit_status(e: &anyhow::Error) -> i32 {
    if e.chain().any(|c| {
        c.is::<p2p_host::serve::SpecFileError>()
            || c.downcast_ref::<ServeError>()
                .is_some_and(ServeError::is_config)
    }) {
        78
    } else if e
        .chain()
        .any(|c| c.is::<p2p_allocation::chooser::ChooseError>())
    {
        REFUSED
    } else {
        1
    }
}
