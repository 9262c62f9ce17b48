//! `p2p-host kubevirt plugin-hook`: KubeVirt 1.9.0's plugin domain hook
//! (VEP 190). The protocol and the socket are the library's
//! `kubevirt_plugin`; what a domain becomes is [`super::kubevirt::decide`],
//! the code path of `on-define-domain`.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use p2p_host_kube::kubevirt_plugin::{self, Config, Outcome, DEFAULT_SOCKET};

use super::kubevirt::{decide, Decision};

#[derive(Debug, Args)]
pub struct PluginHookArgs {
    /// The unix socket to serve on: the Plugin object's
    /// spec.domainHooks[].sidecar.socketPath, under
    /// /var/run/kubevirt-plugin/<plugin name>/ (made if missing).
    #[arg(long, value_name = "PATH", default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    /// The node's sysfs (the sidecar sees the node's /sys read-only).
    #[arg(
        long,
        value_name = "DIR",
        env = "VP2P_SYSFS_ROOT",
        default_value = "/sys"
    )]
    sysfs_root: PathBuf,
}

pub fn run(args: PluginHookArgs) -> anyhow::Result<()> {
    let sysfs_root = args.sysfs_root;
    let patcher = move |domain: &str, vmi: &str| match decide(
        vmi,
        domain,
        &sysfs_root,
        "the request's vmi",
    ) {
        Decision::Patched(p) => Outcome::Domain {
            report: p.report(""),
            xml: p.text,
        },
        Decision::Kept(e) => Outcome::Kept {
            reason: format!("{e:#}"),
        },
        Decision::Failed(e) => Outcome::Refused {
            reason: format!("{e:#}"),
        },
    };
    kubevirt_plugin::run(Config {
        socket: args.socket,
        patcher,
        // A server whose stderr reader went away keeps serving (eprintln!
        // would panic on the closed pipe).
        log: |m| {
            let _ = writeln!(std::io::stderr(), "p2p-host kubevirt plugin-hook: {m}");
        },
    })?;
    Ok(())
}
