//! `p2p-host plan`: clique plans per VM, as tables, JSON or VMM configuration.

use std::collections::BTreeMap;
use std::str::FromStr;

use anyhow::{bail, Context};
use clap::Args;
use p2p_host::vmm::{self, EmitFormat};
use p2p_shared::clique::{plan_cliques, MaxLevel};
use p2p_shared::report::PlanReport;
use p2p_shared::{Bdf, GpuSelector, PathClass, Role, Topology};

use super::select::TopologyArgs;

/// `NAME=BDF,BDF,...`: the GPUs given to one VM.
#[derive(Debug, Clone)]
pub struct VmSpec {
    pub name: String,
    pub gpus: Vec<Bdf>,
}

impl FromStr for VmSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (name, list) = s
            .split_once('=')
            .ok_or_else(|| format!("'{s}': want NAME=BDF,BDF,..."))?;
        let valid = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
        if name.is_empty() || !name.chars().all(valid) {
            return Err(format!(
                "'{name}': a VM name is letters, digits, '-', '_' and '.'"
            ));
        }
        let gpus = list
            .split(',')
            .map(|b| b.trim().parse::<Bdf>().map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(VmSpec {
            name: name.to_string(),
            gpus,
        })
    }
}

fn parse_level(s: &str) -> Result<MaxLevel, String> {
    let class: PathClass = s
        .parse()
        .map_err(|e: p2p_shared::classify::PathClassParseError| e.to_string())?;
    MaxLevel::new(class).map_err(|e| e.to_string())
}

/// What `plan` and `apply` share: the topology, the level and the VMs.
#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    /// Farthest PCIe class that still shares a clique: pix, pxb, phb, node or sys.
    #[arg(long, value_name = "LEVEL", default_value = "phb", value_parser = parse_level)]
    pub max_level: MaxLevel,
    /// A VM and its GPUs, NAME=BDF,BDF,... (repeat for several VMs). Default:
    /// one VM "vm0" with every GPU.
    #[arg(long = "vm", value_name = "NAME=BDF,...")]
    pub vms: Vec<VmSpec>,
}

impl PlanArgs {
    /// Scans the topology and plans every VM.
    pub fn plan(&self) -> anyhow::Result<PlanReport> {
        let (root, topo, selector) = self.topology.load()?;
        let specs = vm_specs(&self.vms, &topo, &selector)?;
        let mut plans = Vec::new();
        for spec in &specs {
            let plan = plan_cliques(&topo, &spec.name, &spec.gpus, self.max_level)
                .with_context(|| format!("VM {}", spec.name))?;
            plans.push(plan);
        }
        Ok(PlanReport::new(
            &root.path().display().to_string(),
            self.max_level,
            plans,
        ))
    }
}

/// Checks the VMs' GPUs: known, GPUs under the selector, in one VM each.
fn vm_specs(
    specs: &[VmSpec],
    topo: &Topology,
    selector: &GpuSelector,
) -> anyhow::Result<Vec<VmSpec>> {
    let all: Vec<Bdf> = topo
        .functions
        .iter()
        .filter(|f| selector.role(f) == Role::Gpu)
        .map(|f| f.bdf)
        .collect();
    if specs.is_empty() {
        if all.is_empty() {
            bail!("no GPUs found; choose them with --gpus or --gpu-class");
        }
        return Ok(vec![VmSpec {
            name: "vm0".into(),
            gpus: all,
        }]);
    }
    let mut owner: BTreeMap<Bdf, &str> = BTreeMap::new();
    let mut names: Vec<&str> = Vec::new();
    for spec in specs {
        if names.contains(&spec.name.as_str()) {
            bail!("VM {} is named twice", spec.name);
        }
        names.push(&spec.name);
        for g in &spec.gpus {
            let Some(f) = topo.function(*g) else {
                bail!("VM {}: {g} is not a PCI function of this host", spec.name);
            };
            if selector.role(f) != Role::Gpu {
                bail!(
                    "VM {}: {g} (vendor {:#06x}, class {:#08x}) is not a GPU: the P2P clique \
                     capability is for NVIDIA display-class functions (select test devices \
                     with --gpus or --gpu-class)",
                    spec.name,
                    f.vendor,
                    f.class
                );
            }
            if let Some(other) = owner.insert(*g, &spec.name) {
                bail!("{g} is given to two VMs: {other} and {}", spec.name);
            }
        }
    }
    Ok(specs.to_vec())
}

#[derive(Debug, Args)]
pub struct PlanCmd {
    #[command(flatten)]
    plan: PlanArgs,
    /// Print the plan as JSON (schema vp2p.plan/1; same as --emit json).
    #[arg(long, conflicts_with = "emit")]
    json: bool,
    /// Print VMM configuration instead of the table.
    #[arg(long, value_enum, value_name = "FORMAT")]
    emit: Option<EmitFormat>,
}

pub fn run(args: PlanCmd) -> anyhow::Result<()> {
    let report = args.plan.plan()?;
    let format = if args.json {
        Some(EmitFormat::Json)
    } else {
        args.emit
    };
    match format {
        Some(f) => print!("{}", vmm::emit(&report, f)?),
        None => print!("{}", report.render_text()),
    }
    Ok(())
}
