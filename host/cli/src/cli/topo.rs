//! `p2p-host topo`.

use clap::Args;
use p2p_shared::report::{NicRows, TopoReport};

use super::select::TopologyArgs;

#[derive(Debug, Args)]
pub struct TopoArgs {
    #[command(flatten)]
    topology: TopologyArgs,
    /// Print the report as JSON (schema vp2p.topo/1, see README).
    #[arg(long)]
    json: bool,
    /// List every network function as a NIC row, not only those with an RDMA
    /// device (`nvidia-smi topo -m` lists RDMA devices only).
    #[arg(long)]
    all_nics: bool,
    /// Also draw the tree into this SVG file: NUMA nodes, host bridges,
    /// ports and switches as nested boxes, GPUs and NICs with bus id, name,
    /// driver and link (narrowed links marked), IOMMU groups outlined, ACS
    /// and ATS, NVLinks as edges.
    #[arg(long, value_name = "FILE")]
    svg: Option<std::path::PathBuf>,
}

pub fn run(args: TopoArgs) -> anyhow::Result<()> {
    let (root, topo, selector) = args.topology.load()?;
    let rows = if args.all_nics {
        NicRows::AllNetwork
    } else {
        NicRows::Rdma
    };
    let mut report =
        TopoReport::build_with(&topo, &selector, &root.path().display().to_string(), rows);
    for d in report.gpus.iter_mut().chain(report.nics.iter_mut()) {
        d.ats = p2p_host::check::ats_entry(&root, d.bdf);
    }
    if let Some(path) = &args.svg {
        let picture = p2p_shared::picture::topo_svg(
            &topo,
            &report,
            &args.topology.sysfs_root.display().to_string(),
        );
        super::write_picture(path, &picture)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render_text());
    }
    Ok(())
}
