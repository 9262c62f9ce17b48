//! A libvirt domain patched with the plan for exactly the GPUs and RDMA NICs
//! it passes through: `plan --patch-domain` and the KubeVirt hook.

use anyhow::Context;
use p2p_host::vmm::libvirt::{self, Domain, FwCfgVia, NcclEntry, PatchOptions};
use p2p_topology::nccl_topo;
use p2p_topology::{Bdf, Role};

use super::plan::{PlanArgs, VmSpec};

/// How the NCCL file goes into the domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NcclChoice {
    /// Not at all.
    Off,
    /// As a fw_cfg entry naming a host file.
    File(String),
    /// As a fw_cfg entry holding the file's text.
    Inline,
}

/// The patched domain and what to tell the user about it.
#[derive(Debug)]
pub struct DomainPatch {
    /// The domain, patched (or as given when there was nothing to do).
    pub text: String,
    /// One line per change; empty when the domain was already patched.
    pub changes: Vec<String>,
    /// Devices left alone, warnings.
    pub notes: Vec<String>,
    /// `VM: n GPU(s), m clique(s), max level L`.
    pub summary: Option<String>,
}

/// Patches `text` (read from `source`, named in errors) with the plan that
/// `args` makes for the domain's GPUs and RDMA NICs; the NCCL file, if any,
/// goes where `via` says.
pub fn patch(
    args: &PlanArgs,
    text: &str,
    source: &str,
    nccl: &NcclChoice,
    via: FwCfgVia,
) -> anyhow::Result<DomainPatch> {
    let domain = Domain::parse(text).with_context(|| format!("{source}: reading the domain"))?;
    let (root, topo, selector) = args.topology.load()?;
    let tree = root.path().display().to_string();
    let mut devices: Vec<Bdf> = Vec::new();
    let mut has_gpu = false;
    let mut notes = Vec::new();
    for h in &domain.hostdevs {
        let Some(f) = topo.function(h.host) else {
            anyhow::bail!(
                "{source}: line {}: <hostdev> {} is not a PCI function in {tree}",
                h.line,
                h.host
            );
        };
        match selector.role(f) {
            role @ (Role::Gpu | Role::Nic) => {
                has_gpu |= role == Role::Gpu;
                devices.push(h.host);
            }
            _ => notes.push(format!(
                "{}: neither a GPU nor an RDMA NIC, left as it is",
                h.host
            )),
        }
    }
    if !has_gpu {
        notes.push(format!(
            "{source}: no GPU among the domain's PCI hostdevs: nothing to patch"
        ));
        return Ok(DomainPatch {
            text: text.to_string(),
            changes: Vec::new(),
            notes,
            summary: None,
        });
    }
    let spec = VmSpec {
        name: domain.name.clone(),
        gpus: devices,
        nics: Vec::new(),
        count: None,
    };
    let report = args
        .plan_vms(&tree, &topo, &selector, &[spec])
        .with_context(|| format!("{source}: planning VM {}", domain.name))?;
    let (plan, guest) = (&report.vms[0], &report.guests[0]);
    notes.extend(report.iommu_groups.iter().filter_map(|g| g.warning.clone()));
    let opts = PatchOptions {
        nccl: match nccl {
            NcclChoice::Off => None,
            NcclChoice::File(path) => Some(NcclEntry::File(path.replace("{vm}", &plan.vm))),
            NcclChoice::Inline => Some(NcclEntry::Inline(nccl_topo::render(
                &nccl_topo::from_guest(&topo, guest),
            ))),
        },
        via,
    };
    let patched = libvirt::patch_domain(&domain, plan, guest, &opts)
        .with_context(|| format!("{source}: VM {}", domain.name))?;
    Ok(DomainPatch {
        text: patched.text,
        changes: patched.changes,
        notes,
        summary: Some(p2p_host::vmm::summary(plan)),
    })
}

impl DomainPatch {
    /// What `plan --patch-domain` and the hook say on standard error, each
    /// line after `who: ` (nothing before it when `who` is empty).
    pub fn report(&self, who: &str) -> String {
        let who = if who.is_empty() {
            String::new()
        } else {
            format!("{who}: ")
        };
        let mut out = String::new();
        if let Some(s) = &self.summary {
            let verdict = if self.changes.is_empty() {
                "already patched, unchanged".to_string()
            } else {
                format!("{} change(s)", self.changes.len())
            };
            out.push_str(&format!("{who}{s}: {verdict}\n"));
        }
        for c in &self.changes {
            out.push_str(&format!("{who}  {c}\n"));
        }
        for n in &self.notes {
            out.push_str(&format!("{who}note: {n}\n"));
        }
        out
    }
}
