//! `p2p-guest probe`.

use std::path::PathBuf;

use clap::Args;
use p2p_guest::probe::{enable_allowed, probe, ProbeOptions};

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// sysfs tree to read (the live /sys, or a captured tree).
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    sysfs_root: PathBuf,
    /// Print the report as JSON (schema vp2p.probe/1, see README).
    #[arg(long)]
    json: bool,
    /// Enable peer access, both directions, for exactly the pairs decided
    /// "enable", and report what the driver answered.
    #[arg(long, conflicts_with = "no_driver")]
    enable: bool,
    /// Do not load CUDA or NVML (sysfs facts only).
    #[arg(long)]
    no_driver: bool,
}

pub fn run(args: ProbeArgs) -> anyhow::Result<()> {
    let opts = ProbeOptions {
        use_driver: !args.no_driver,
    };
    let (mut report, cuda) = probe(&args.sysfs_root, &opts)?;
    if args.enable {
        let Some(cuda) = &cuda else {
            anyhow::bail!(
                "--enable needs CUDA: {}",
                report.cuda.why.as_deref().unwrap_or("unavailable")
            );
        };
        enable_allowed(&mut report, cuda);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render_text());
    }
    if report.enabled.iter().any(|e| !e.ok) {
        anyhow::bail!("the driver refused peer access for some pair (see above)");
    }
    if report.gpus.is_empty() {
        // Exit status 2: nothing to probe (documented in the README).
        eprintln!("p2p-guest probe: no NVIDIA GPU found");
        std::process::exit(2);
    }
    Ok(())
}
