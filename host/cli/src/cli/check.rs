//! `p2p-host check`: will P2P work in the VMs, before they boot.

use anyhow::Context;
use clap::Args;
use p2p_host::check::host_facts;
use p2p_report::Table;
use p2p_topology::check::{check, CheckReport, Verdict, Vmm};
use p2p_topology::Bdf;

use super::plan::{vm_specs, VmSpec};
use super::select::TopologyArgs;

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    topology: TopologyArgs,
    /// A VM and its GPUs and RDMA NICs, NAME=BDF,... (repeat). Default: one VM
    /// with every GPU.
    #[arg(long = "vm", value_name = "NAME=BDF,...")]
    vms: Vec<VmSpec>,
    /// The VMM the VMs run in.
    #[arg(long, value_enum, ignore_case = true, default_value = "qemu")]
    vmm: VmmArg,
    /// Read the kernel command line from FILE (a captured /proc/cmdline)
    /// instead of the live one: to check a captured host's tree
    /// (--sysfs-root) with its command line.
    #[arg(long, value_name = "FILE")]
    cmdline_from: Option<std::path::PathBuf>,
    /// Print the report as JSON (schema vp2p.check/1).
    #[arg(long)]
    json: bool,
    /// Also say, for each GPU, whether `p2p-host serve --gpu ...,vfio=BDF`
    /// can serve it (bound to vfio-pci, its IOMMU group viable): the
    /// serve-vfio finding.
    #[arg(long)]
    serve_vfio: bool,
}

/// `--vmm` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum VmmArg {
    Qemu,
    CloudHypervisor,
}

fn render(r: &CheckReport) -> String {
    let mut t = Table::new(["SCOPE", "CHECK", "VERDICT", "EVIDENCE", "FIX"]);
    for i in &r.items {
        t.row([
            i.scope.clone(),
            i.check.clone(),
            match i.verdict {
                Verdict::Pass => "PASS",
                Verdict::Warn => "WARN",
                Verdict::Fail => "FAIL",
            }
            .to_string(),
            i.evidence.clone(),
            i.fix.clone().unwrap_or_default(),
        ]);
    }
    let count = |v| r.items.iter().filter(|i| i.verdict == v).count();
    format!(
        "{}\n{} passed, {} warned, {} failed\n",
        t.render(),
        count(Verdict::Pass),
        count(Verdict::Warn),
        count(Verdict::Fail)
    )
}

pub fn run(args: CheckArgs) -> anyhow::Result<()> {
    let (root, topo, selector) = args.topology.load()?;
    let specs = vm_specs(&args.vms, &topo, &selector)?;
    let vms: Vec<(&str, Vec<Bdf>)> = specs
        .iter()
        .map(|s| {
            (
                s.name.as_str(),
                s.gpus.iter().chain(&s.nics).copied().collect(),
            )
        })
        .collect();
    let all: Vec<Bdf> = vms.iter().flat_map(|(_, d)| d.iter().copied()).collect();
    let mut facts = host_facts(&root, &topo, &all);
    if let Some(file) = &args.cmdline_from {
        let text = p2p_host::check::read_cmdline(file).context("--cmdline-from")?;
        facts.cmdline = Some(text);
    }
    let vmm = match args.vmm {
        VmmArg::Qemu => Vmm::Qemu,
        VmmArg::CloudHypervisor => Vmm::CloudHypervisor,
    };
    let mut report = check(&topo, &facts, vmm, &vms);
    if args.serve_vfio {
        for s in &specs {
            for &gpu in &s.gpus {
                let item = p2p_host::check::serve_vfio_item(&root, gpu);
                report.overall = report.overall.max(item.verdict);
                report.items.push(item);
            }
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    let status = report.exit_status();
    if status != 0 {
        // 1: something fails; 2: warnings only (documented in the README).
        std::process::exit(status);
    }
    Ok(())
}
