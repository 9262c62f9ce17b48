//! `p2p-host topo`.

use clap::Args;
use p2p_shared::report::TopoReport;

use super::select::TopologyArgs;

#[derive(Debug, Args)]
pub struct TopoArgs {
    #[command(flatten)]
    topology: TopologyArgs,
    /// Print the report as JSON (schema vp2p.topo/1, see README).
    #[arg(long)]
    json: bool,
}

pub fn run(args: TopoArgs) -> anyhow::Result<()> {
    let (root, topo, selector) = args.topology.load()?;
    let report = TopoReport::build(&topo, &selector, &root.path().display().to_string());
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render_text());
    }
    Ok(())
}
