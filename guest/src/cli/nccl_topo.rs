//! `p2p-guest nccl-topo`: NCCL's topology file from the cliques, or the host's
//! file installed after checking it against this VM.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use p2p_guest::nccl_topo::{self, NcclTopoError, NcclTopoReport, NCCL_TOPO_SCHEMA};
use p2p_report::Table;
use p2p_topology::nccl_topo::{render, render_hiding_nvlink, NCCL_DEFAULT_PATH};
use p2p_topology::Bdf;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct NcclTopoArgs {
    #[command(subcommand)]
    action: Option<Action>,
    #[command(flatten)]
    derive: DeriveArgs,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Install the file the host handed over through fw_cfg (or --from FILE)
    /// after checking every bus id in it against this VM.
    Install(InstallArgs),
    /// What NCCL will do in this VM and why: the file it loads, per GPU pair
    /// the path, P2P level and transport, per GPU its NIC and GPUDirect RDMA,
    /// and where NCCL and the driver disagree (NCCL 2.28.3's rules).
    Explain(super::nccl_explain::ExplainArgs),
    /// NCCL over every GPU with the variables the parent set (explain --confirm).
    #[command(hide = true)]
    ConfirmRun,
}

#[derive(Debug, Args)]
struct Common {
    /// sysfs tree to read (the live /sys, or a captured tree).
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    sysfs_root: PathBuf,
    /// Where NCCL reads the file when NCCL_TOPO_FILE is unset.
    #[arg(long, value_name = "PATH", default_value = NCCL_DEFAULT_PATH)]
    out: PathBuf,
    /// Print a JSON report (schema vp2p.nccl-topo/1) instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct DeriveArgs {
    #[command(flatten)]
    common: Common,
    /// Write the file to --out (default NCCL's default path) instead of
    /// printing it.
    #[arg(long)]
    install: bool,
    /// With --install: write the file only when a GPU carries a clique (its
    /// capability or --assume-clique); with no GPU or no clique, say so, write
    /// nothing and exit 0. What vp2p-nccl-topo-cliques.service runs at boot
    /// when the host handed over no file.
    #[arg(long, requires = "install")]
    if_cliques: bool,
    /// Treat GPU BDF as carrying clique N, over what its capability says (a
    /// what-if for VMs whose hypervisor injects no capability); repeatable.
    #[arg(long, value_name = "BDF=N", value_parser = parse_assume)]
    assume_clique: Vec<(Bdf, u8)>,
    /// Hide NVLink from NCCL: a placeholder `<nvlink>` under every GPU (NCCL
    /// then does not ask NVML), so an NVLink machine shows NCCL's PCIe
    /// decision. For experiments: NCCL will not use NVLink with this file.
    #[arg(long)]
    hide_nvlink: bool,
}

pub(super) fn parse_assume(s: &str) -> Result<(Bdf, u8), String> {
    let (b, n) = s.split_once('=').ok_or("want BDF=N")?;
    let bdf: Bdf = b
        .parse()
        .map_err(|e: p2p_topology::bdf::BdfParseError| e.to_string())?;
    let n: u8 = n.parse().map_err(|_| format!("'{n}' is not a clique id"))?;
    if n > 15 {
        return Err(format!("clique {n}: the capability holds 0..15"));
    }
    Ok((bdf, n))
}

#[derive(Debug, Args)]
struct InstallArgs {
    #[command(flatten)]
    common: Common,
    /// Read the file from here instead of fw_cfg
    /// (SYSFS/firmware/qemu_fw_cfg/by_name/opt/vp2p/nccl-topo.xml/raw).
    #[arg(long, value_name = "FILE")]
    from: Option<PathBuf>,
    /// Check only; write nothing.
    #[arg(long)]
    dry_run: bool,
}

fn print_report(r: &NcclTopoReport, json: bool, show_xml: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
        return Ok(());
    }
    if show_xml {
        print!("{}", r.xml);
        return Ok(());
    }
    if !r.gpus.is_empty() {
        let mut t = Table::new(["GPU", "CLIQUE", "NCCL SWITCH"]);
        for g in &r.gpus {
            t.row([
                g.busid.to_string(),
                g.clique.map_or("none".into(), |c| c.to_string()),
                g.switch.map_or("(below its CPU)".into(), |s| s.to_string()),
            ]);
        }
        print!("{}", t.render());
    }
    if !r.checks.is_empty() {
        let mut t = Table::new(["BUS ID", "FILE", "GUEST", "CHECK"]);
        for c in &r.checks {
            t.row([
                c.busid.to_string(),
                c.expected.clone(),
                c.found.clone(),
                if c.ok { "ok" } else { "MISMATCH" }.to_string(),
            ]);
        }
        print!("{}", t.render());
    }
    match &r.installed {
        Some(p) => println!("installed {} (from {})", p.display(), r.source),
        None => println!("checked {}; nothing written (--dry-run)", r.source),
    }
    Ok(())
}

pub fn run(args: NcclTopoArgs) -> anyhow::Result<()> {
    match args.action {
        Some(Action::Explain(a)) => super::nccl_explain::run(a),
        Some(Action::ConfirmRun) => super::nccl_explain::confirm_run(),
        Some(Action::Install(a)) => {
            let from = a
                .from
                .clone()
                .unwrap_or_else(|| nccl_topo::fw_cfg_path(&a.common.sysfs_root));
            let report =
                nccl_topo::install_from(&from, &a.common.sysfs_root, &a.common.out, a.dry_run)?;
            print_report(&report, a.common.json, false)
        }
        None => {
            let c = &args.derive.common;
            let derived = nccl_topo::derive(&c.sysfs_root, &args.derive.assume_clique);
            let (system, gpus) = match derived {
                Err(NcclTopoError::NoGpu(root)) if args.derive.if_cliques => {
                    println!("no NVIDIA GPU in {}: nothing written", root.display());
                    return Ok(());
                }
                other => other?,
            };
            if args.derive.if_cliques && gpus.iter().all(|g| g.clique.is_none()) {
                println!(
                    "no GPU carries a clique (no P2P capability from the hypervisor): nothing \
                     written, NCCL reads the PCI tree itself"
                );
                return Ok(());
            }
            let xml = if args.derive.hide_nvlink {
                render_hiding_nvlink(&system)
            } else {
                render(&system)
            };
            let installed = if args.derive.install {
                nccl_topo::nccl_accepts(&c.out, &xml, &c.sysfs_root)?;
                nccl_topo::write(&c.out, &xml)
                    .with_context(|| "installing the derived NCCL topology")?;
                Some(c.out.clone())
            } else {
                None
            };
            let report = NcclTopoReport {
                schema: NCCL_TOPO_SCHEMA.into(),
                source: "cliques".into(),
                gpus,
                checks: Vec::new(),
                installed,
                xml,
            };
            print_report(&report, c.json, !args.derive.install)
        }
    }
}
