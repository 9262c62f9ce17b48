//! `p2p-guest nccl-topo explain`: what NCCL will do in this VM, and why.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use p2p_guest::nccl_topo::explain::{self, confirm, ExplainInputs, ExplainReport, WhatIf};
use p2p_guest::nccl_topo::NcclTopoError;
use p2p_guest::probe::{self, ProbeOptions};
use p2p_topology::nccl_topo::NCCL_DEFAULT_PATH;
use p2p_topology::Bdf;

/// Exit status when the VM has no GPU and no --file was given.
pub const NO_GPU_EXIT: i32 = 2;

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// sysfs tree to read (the live /sys, or a captured tree).
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    sysfs_root: PathBuf,
    /// Explain this file as NCCL would read it, whatever NCCL_TOPO_FILE says;
    /// outside a VM (no GPU in the sysfs tree), as NCCL would read it in a VM
    /// that matches it.
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
    /// Where NCCL looks when NCCL_TOPO_FILE is unset.
    #[arg(long, value_name = "PATH", default_value = NCCL_DEFAULT_PATH)]
    default_path: PathBuf,
    /// CPU identity (vendor_id, cpu family, model) NCCL reads from cpuid.
    #[arg(long, value_name = "PATH", default_value = "/proc/cpuinfo")]
    cpuinfo: PathBuf,
    /// Do not ask CUDA and NVML (the driver's answers then come from the
    /// capability and are marked as such).
    #[arg(long)]
    no_driver: bool,
    /// What-if: explain the file `p2p-guest nccl-topo --assume-clique` would
    /// write, with GPU BDF in clique N; repeatable.
    #[arg(long, value_name = "BDF=N", value_parser = super::nccl_topo::parse_assume)]
    assume_clique: Vec<(Bdf, u8)>,
    /// What-if: NVLink hidden from NCCL (its placeholder `<nvlink>` under each
    /// GPU), so an NVLink machine shows NCCL's PCIe decision.
    #[arg(long)]
    hide_nvlink: bool,
    /// Print a JSON report (schema vp2p.nccl-explain/1) instead of tables.
    #[arg(long)]
    json: bool,
    /// Initialise NCCL over every GPU this process may use (one process; a
    /// 1 MiB all-reduce, then a send and a receive between every ordered
    /// pair) with the file explained, read back the transport of every
    /// pair's channels from NCCL's own debug output and compare; any
    /// difference exits 1.
    #[arg(long, conflicts_with = "hide_nvlink")]
    confirm: bool,
}

/// `nccl-topo confirm-run`, the child `--confirm` starts.
pub fn confirm_run() -> anyhow::Result<()> {
    Ok(confirm::confirm_run()?)
}

pub fn run(a: ExplainArgs) -> anyhow::Result<()> {
    let inputs = ExplainInputs {
        sysfs_root: a.sysfs_root.clone(),
        file: a.file.clone(),
        default_path: a.default_path.clone(),
        cpuinfo: a.cpuinfo.clone(),
        environment: std::env::vars().collect(),
    };
    let what_if = WhatIf {
        assume_clique: a.assume_clique.clone(),
        hide_nvlink: a.hide_nvlink,
    };
    let (probe, _cuda) = probe::probe(
        &a.sysfs_root,
        &ProbeOptions {
            use_driver: !a.no_driver,
            gpu_class: None,
        },
    )
    .with_context(|| format!("reading the GPUs of {}", a.sysfs_root.display()))?;
    let mut explained = match explain::explain(&inputs, &what_if, &probe) {
        Err(NcclTopoError::NoGpu(root)) if what_if.assume_clique.is_empty() => {
            eprintln!(
                "p2p-guest: no NVIDIA GPU in {}: nothing for NCCL to do here (explain a file outside a VM with --file)",
                root.display()
            );
            std::process::exit(NO_GPU_EXIT);
        }
        other => other?,
    };
    if explained.refused() {
        if a.confirm {
            eprintln!("confirm: skipped: NCCL refuses the file at initialisation");
        }
        print_report(&explained.report, a.json)?;
        std::process::exit(1);
    }
    if a.confirm {
        explained.report.confirm = Some(confirm::confirm(&explained)?);
    }
    print_report(&explained.report, a.json)?;
    if explained
        .report
        .confirm
        .as_ref()
        .is_some_and(|c| !c.differences.is_empty())
    {
        std::process::exit(1);
    }
    Ok(())
}

/// The report as JSON, or as tables with `--confirm`'s result after them.
fn print_report(report: &ExplainReport, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        print!("{}", report.render_text());
    }
    Ok(())
}
