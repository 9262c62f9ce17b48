//! `p2p-host topo`.

use std::time::{Duration, Instant};

use clap::Args;
use p2p_host::sysfs::ReadTimings;
use p2p_report::{NicRows, Table, TopoReport};

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
    /// Print how long each phase took (scan, NVML's opening, devices, links
    /// and P2P status, config reads, rendering) to standard error.
    #[arg(long)]
    timings: bool,
}

pub fn run(args: TopoArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let (root, topo, selector, read) = args.topology.load_timed()?;
    let loaded = started.elapsed();
    let rows = if args.all_nics {
        NicRows::AllNetwork
    } else {
        NicRows::Rdma
    };
    let mut report =
        TopoReport::build_with(&topo, &selector, &root.path().display().to_string(), rows);
    let t = Instant::now();
    for d in report.gpus.iter_mut().chain(report.nics.iter_mut()) {
        d.ats = p2p_host::check::ats_entry(&root, d.bdf);
    }
    let config_reads = t.elapsed();
    let t = Instant::now();
    if let Some(path) = &args.svg {
        let picture = p2p_report::picture::topo_svg(
            &topo,
            &report,
            &args.topology.sysfs_root.display().to_string(),
        );
        super::write_picture(path, &picture)?;
    }
    let text = if args.json {
        format!("{}\n", serde_json::to_string_pretty(&report)?)
    } else {
        report.render_text()
    };
    let rendered = t.elapsed();
    print!("{text}");
    if args.timings {
        eprint!(
            "{}",
            timings_table(&read, loaded, config_reads, rendered, started.elapsed())
        );
    }
    Ok(())
}

/// The phases of one run, in milliseconds. NVML is opened beside the scan,
/// so `nvml open` overlaps `scan`; the total is the wall clock since start.
fn timings_table(
    read: &ReadTimings,
    loaded: Duration,
    config_reads: Duration,
    rendered: Duration,
    total: Duration,
) -> String {
    let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1e3);
    let mut t = Table::new(["phase", "ms"]);
    for (phase, d) in [
        ("scan (sysfs, config headers)", read.scan),
        ("nvml open (beside the scan)", read.nvml.open),
        ("nvml devices (handles, bus ids)", read.nvml.devices),
        ("nvml links (all GPUs at once)", read.nvml.links),
        ("nvml p2p status", read.nvml.p2p),
        ("nvlink discovery after the scan", read.nvlink),
        ("tree read (scan + nvlink)", loaded),
        ("config reads (ATS)", config_reads),
        ("rendering", rendered),
        ("total", total),
    ] {
        t.row(vec![phase.to_string(), ms(d)]);
    }
    t.render()
}
