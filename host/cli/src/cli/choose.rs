//! `plan --vm NAME=COUNT[:nics=M]`: the chooser picks each such VM's GPUs and
//! NICs, in the order the VMs are given, from what earlier VMs left.

use std::collections::BTreeSet;

use anyhow::{bail, Context};
use p2p_allocation::chooser::{choose, parse_fmpm_list, Request};
use p2p_report::plan::VmChoice;
use p2p_topology::{Bdf, GpuSelector, Role, Topology};

use super::plan::{PlanArgs, VmSpec};

/// The VMs with every count replaced by the chosen addresses (GPUs, NICs and
/// their IOMMU companions are checked by the plan as usual), and the choices.
pub(super) fn resolve(
    args: &PlanArgs,
    topo: &Topology,
    selector: &GpuSelector,
    vms: &[VmSpec],
) -> anyhow::Result<(Vec<VmSpec>, Vec<VmChoice>)> {
    if vms.iter().all(|v| v.count.is_none()) {
        if !args.available.is_empty() || args.fm_partitions.is_some() || args.strict {
            bail!("--available, --fm-partitions and --strict go with --vm NAME=COUNT");
        }
        return Ok((vms.to_vec(), Vec::new()));
    }
    let partitions = match &args.fm_partitions {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            Some(parse_fmpm_list(&text).with_context(|| format!("{}", path.display()))?)
        }
        None => None,
    };
    let given: BTreeSet<Bdf> = vms.iter().flat_map(|v| v.gpus.iter().copied()).collect();
    let mut free: Vec<Bdf> = if args.available.is_empty() {
        topo.functions
            .iter()
            .filter(|f| matches!(selector.role(f), Role::Gpu | Role::Nic))
            .map(|f| f.bdf)
            .filter(|b| !given.contains(b))
            .collect()
    } else {
        for b in &args.available {
            if given.contains(b) {
                bail!("--available: {b} is also given to a VM by address");
            }
        }
        args.available.clone()
    };
    let mut out = Vec::new();
    let mut choices = Vec::new();
    for vm in vms {
        let Some(count) = vm.count else {
            out.push(vm.clone());
            continue;
        };
        let req = Request {
            gpus: count.gpus,
            nics: count.nics,
            must_include: Vec::new(),
            max_level: args.max_level,
            strict: args.strict,
        };
        let c = choose(topo, selector, &free, &req, partitions.as_deref())
            .with_context(|| format!("VM {}: choosing {} GPU(s)", vm.name, count.gpus))?;
        free.retain(|b| !c.gpus.contains(b) && !c.nics.contains(b));
        out.push(VmSpec {
            name: vm.name.clone(),
            gpus: c.gpus.iter().chain(&c.nics).copied().collect(),
            nics: Vec::new(),
            count: None,
        });
        choices.push(VmChoice {
            vm: vm.name.clone(),
            gpus: count.gpus,
            nics: count.nics,
            choice: c,
        });
    }
    Ok((out, choices))
}
