//! `p2p-host allocate`: the kubelet's GetPreferredAllocation as a command, for
//! any scheduler or script: N GPUs among the available ones, with reasons.

use std::path::PathBuf;

use clap::Args;
use p2p_allocation::chooser::{choose, Choice, Request};
use p2p_allocation::clique::MaxLevel;
use p2p_report::TextReport;
use p2p_topology::Bdf;
use serde::Serialize;

use super::plan::parse_level;
use super::select::TopologyArgs;

/// Schema tag of `allocate --json`.
pub const ALLOCATE_SCHEMA: &str = "vp2p.allocate/1";

#[derive(Debug, Args)]
pub struct AllocateArgs {
    #[command(flatten)]
    topology: TopologyArgs,
    /// The free GPUs to choose from (the kubelet's available device ids).
    #[arg(long, value_name = "BDF,...", value_delimiter = ',', required = true)]
    available: Vec<Bdf>,
    /// How many GPUs to choose (the kubelet's allocation size).
    #[arg(long, value_name = "N")]
    size: usize,
    /// GPUs the answer must hold (the kubelet's must-include ids).
    #[arg(long, value_name = "BDF,...", value_delimiter = ',')]
    must_include: Vec<Bdf>,
    /// Farthest PCIe class that still shares a clique: pix, pxb, phb, node or sys.
    #[arg(long, value_name = "LEVEL", default_value = "phb", value_parser = parse_level)]
    max_level: MaxLevel,
    /// Refuse (exit 3) when no N available GPUs are one clique, instead of
    /// answering with the nearest set.
    #[arg(long)]
    strict: bool,
    /// Fabric Manager's partition list (`fmpm -l` output): choose only a whole,
    /// inactive partition of N GPUs.
    #[arg(long, value_name = "FILE")]
    fm_partitions: Option<PathBuf>,
    /// Print the answer as JSON (schema vp2p.allocate/1).
    #[arg(long)]
    json: bool,
}

/// `allocate --json`: the chosen ids in order, and the chooser's reasons.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct AllocateReport {
    /// Schema tag, `vp2p.allocate/1`.
    pub schema: &'static str,
    /// The sysfs tree the choice was made on.
    pub sysfs_root: String,
    /// GPUs asked for.
    pub size: usize,
    /// The policy level.
    pub max_level: MaxLevel,
    /// The chosen device ids (PCI addresses), in address order: the answer to
    /// GetPreferredAllocation.
    pub devices: Vec<Bdf>,
    /// The chooser's answer with every reason.
    pub choice: Choice,
}

pub fn run(args: AllocateArgs) -> anyhow::Result<()> {
    let (root, topo, selector) = args.topology.load()?;
    let partitions = super::select::read_fm_partitions(args.fm_partitions.as_deref())?;
    let req = Request {
        gpus: args.size,
        nics: 0,
        must_include: args.must_include.clone(),
        max_level: args.max_level,
        strict: args.strict,
    };
    let choice = choose(
        &topo,
        &selector,
        &args.available,
        &req,
        partitions.as_deref(),
    )?;
    let report = AllocateReport {
        schema: ALLOCATE_SCHEMA,
        sysfs_root: root.path().display().to_string(),
        size: args.size,
        max_level: args.max_level,
        devices: choice.gpus.clone(),
        choice,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let ids: Vec<String> = report.devices.iter().map(Bdf::to_string).collect();
        println!("{}", ids.join(","));
        print!("{}", report.choice.render_text());
    }
    Ok(())
}
