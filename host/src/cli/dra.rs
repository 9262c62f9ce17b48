//! `p2p-host dra`: the Dynamic Resource Allocation side. `dra slices` prints,
//! without a cluster and without an async runtime, the ResourceSlices
//! (`resource.k8s.io/v1`) the vp2p DRA driver would publish for this node.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use p2p_shared::chooser::parse_fmpm_list;
use p2p_shared::dra::{build_slices, SliceOptions, DEFAULT_DRIVER};
use serde_json::json;

use super::select::TopologyArgs;

#[derive(Debug, Args)]
pub struct DraArgs {
    #[command(subcommand)]
    command: DraCommand,
}

#[derive(Debug, Subcommand)]
enum DraCommand {
    /// Print the ResourceSlices the DRA driver would publish for this node:
    /// one device per GPU and RDMA NIC VFIO can assign alone, with the
    /// standard PCI attributes and a clique attribute per level (equal value:
    /// the pair may be peers); a table, or the objects with --json / --yaml.
    Slices(SlicesArgs),
}

#[derive(Debug, Args)]
pub struct SlicesArgs {
    #[command(flatten)]
    topology: TopologyArgs,
    /// The node's name (the pool's name and the slices' nodeName).
    #[arg(long, value_name = "NODE", env = "NODE_NAME")]
    node_name: String,
    /// The driver's name, also the domain of vp2p's own attributes.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_DRIVER)]
    driver_name: String,
    /// Fabric Manager's partition list (`fmpm -l` output): an
    /// fmPartition<N> attribute per partition size.
    #[arg(long, value_name = "FILE")]
    fm_partitions: Option<PathBuf>,
    /// Publish GPUs and NICs not bound to vfio-pci yet (the driver started
    /// with --bind binds them at prepare); without it they are left out.
    #[arg(long)]
    bind: bool,
    /// Print the objects as JSON: a v1 List of ResourceSlices (`kubectl
    /// apply -f` takes it); left-out devices go to stderr.
    #[arg(long, conflicts_with = "yaml")]
    json: bool,
    /// Print the objects as YAML, one document per ResourceSlice (in JSON's
    /// flow style, so every string is quoted).
    #[arg(long)]
    yaml: bool,
}

pub fn run(args: DraArgs) -> anyhow::Result<()> {
    match args.command {
        DraCommand::Slices(a) => slices(a),
    }
}

fn slices(args: SlicesArgs) -> anyhow::Result<()> {
    let (_root, topo, selector) = args.topology.load()?;
    let partitions = match &args.fm_partitions {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            Some(parse_fmpm_list(&text).with_context(|| format!("{}", path.display()))?)
        }
        None => None,
    };
    let mut opts = SliceOptions::new(&args.node_name, &args.driver_name, &selector);
    opts.partitions = partitions.as_deref();
    opts.bind = args.bind;
    let publication = build_slices(&topo, &opts)?;
    if args.json || args.yaml {
        for l in &publication.left_out {
            eprintln!("p2p-host: left out {} ({}): {}", l.bdf, l.kind, l.reason);
        }
        for n in &publication.notes {
            eprintln!("p2p-host: note: {n}");
        }
    }
    if args.json {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": publication.slices});
        println!("{}", serde_json::to_string_pretty(&list)?);
    } else if args.yaml {
        // Each document in JSON's flow style, which is YAML: every string
        // quoted. Block YAML leaves `0000:21:00.0` bare, and YAML 1.1 readers
        // (PyYAML, kubernetes-validate) take that for the sexagesimal 1260.
        for s in &publication.slices {
            println!("---\n{}", serde_json::to_string_pretty(s)?);
        }
    } else {
        print!("{}", publication.render_text());
    }
    Ok(())
}
