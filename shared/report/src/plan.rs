//! The `p2p-host plan` report: one clique plan per VM, as JSON (schema
//! `vp2p.plan/1`) or as tables with reasons.

use std::fmt::Write;

use serde::{Deserialize, Serialize};

use crate::table::Table;
use crate::TextReport;
use p2p_allocation::chooser::Choice;
use p2p_allocation::clique::{CliquePlan, MaxLevel};
use p2p_topology::guest_layout::{GuestLayout, GuestTopology};
use p2p_topology::iommu_groups::GroupUse;

/// Schema tag carried in every plan report.
pub const PLAN_SCHEMA: &str = "vp2p.plan/1";

/// Plans for every VM of one host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PlanReport {
    /// Schema tag, [`PLAN_SCHEMA`] (`vp2p.plan/1`).
    pub schema: String,
    /// The sysfs tree the plan was made from: `/sys`, or a captured snapshot's path.
    pub sysfs_root: String,
    /// The farthest PCIe class at which GPUs share a clique (`--max-level`).
    pub max_level: MaxLevel,
    /// One clique plan per VM, in the order the VMs were given.
    pub vms: Vec<CliquePlan>,
    /// The guest layout asked for (`--guest-topology`).
    #[serde(default)]
    pub guest_topology: GuestLayout,
    /// `guests[i]` is the guest PCIe tree of `vms[i]`: every device's host and
    /// guest bus id, and the ports and expander buses of a mirrored layout.
    #[serde(default)]
    pub guests: Vec<GuestTopology>,
    /// The IOMMU groups the VMs' devices sit in, with what else they hold.
    #[serde(default)]
    pub iommu_groups: Vec<GroupUse>,
    /// For VMs given as NAME=COUNT: what the chooser picked and why, in VM order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<VmChoice>,
}

/// What the chooser picked for one VM given as `NAME=COUNT[:nics=M]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VmChoice {
    /// The VM's name.
    pub vm: String,
    /// GPUs asked for.
    pub gpus: usize,
    /// RDMA NICs asked for.
    pub nics: usize,
    /// The chooser's answer.
    pub choice: Choice,
}

impl PlanReport {
    /// A report tagged with [`PLAN_SCHEMA`], from the per-VM plans and their guest layouts.
    pub fn new(
        sysfs_root: &str,
        max_level: MaxLevel,
        vms: Vec<CliquePlan>,
        guest_topology: GuestLayout,
        guests: Vec<GuestTopology>,
        iommu_groups: Vec<GroupUse>,
    ) -> Self {
        Self {
            schema: PLAN_SCHEMA.to_string(),
            sysfs_root: sysfs_root.to_string(),
            max_level,
            vms,
            guest_topology,
            guests,
            iommu_groups,
            choices: Vec::new(),
        }
    }

    /// One block per VM: its GPUs with cliques and reasons, then every pair.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        for (i, vm) in self.vms.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            let _ = writeln!(
                out,
                "VM {}: {} GPU(s) in {} clique(s), max level {}\n",
                vm.vm,
                vm.assignments.len(),
                vm.cliques.len(),
                vm.max_level
            );
            let mut t = Table::new(["GPU", "CLIQUE", "REASONS"]).indent(2);
            for a in &vm.assignments {
                let reasons: Vec<String> = a.reasons.iter().map(|r| compact(r)).collect();
                t.row([a.bdf.to_string(), a.clique.to_string(), reasons.join("; ")]);
            }
            out.push_str(&t.render());
            if !vm.pairs.is_empty() {
                out.push('\n');
                let mut t = Table::new(["PAIR", "CLASS", "P2P", "WHY"]).indent(2);
                for p in &vm.pairs {
                    let verdict = match (p.allowed, p.same_clique) {
                        (true, true) => "same clique",
                        (true, false) => "allowed, split",
                        (false, _) => "apart",
                    };
                    t.row([
                        format!("{} {}", p.a, p.b),
                        p.class.to_string(),
                        verdict.to_string(),
                        p.reason.clone(),
                    ]);
                }
                out.push_str(&t.render());
            }
            if let Some(c) = self.choices.iter().find(|c| c.vm == vm.vm) {
                out.push('\n');
                out.push_str(&c.choice.render_text());
            }
            if let Some(g) = self.guests.get(i) {
                out.push('\n');
                out.push_str(&render_guest(g));
            }
        }
        for g in &self.iommu_groups {
            if let Some(w) = &g.warning {
                let _ = writeln!(out, "\nwarning: {w}");
            }
        }
        out
    }
}

/// A reason listing more than three GPUs ("with A (PIX), B (PHB), ..." or
/// "apart from ...: beyond ...") shortened to a count per class for the
/// table; the pair table lists every pair, and `--json` keeps the full text.
fn compact(reason: &str) -> String {
    for head in ["with ", "apart from "] {
        let Some(rest) = reason.strip_prefix(head) else {
            continue;
        };
        let (list, tail) = match rest.split_once(": ") {
            Some((l, t)) => (l, format!(": {t}")),
            None => (rest, String::new()),
        };
        let entries: Vec<&str> = list.split(", ").collect();
        if entries.len() <= 3 {
            return reason.to_string();
        }
        let mut counts: Vec<(String, usize)> = Vec::new();
        for e in &entries {
            let class = e
                .rsplit_once(" (")
                .map_or("?", |(_, c)| c.trim_end_matches(')'))
                .to_string();
            match counts.iter_mut().find(|(c, _)| *c == class) {
                Some((_, n)) => *n += 1,
                None => counts.push((class, 1)),
            }
        }
        let by_class: Vec<String> = counts.iter().map(|(c, n)| format!("{c} {n}")).collect();
        return format!(
            "{head}{} GPUs ({}; each pair below){tail}",
            entries.len(),
            by_class.join(", ")
        );
    }
    reason.to_string()
}

/// The guest map: where each device lands, and the emulated ports above it.
fn render_guest(g: &GuestTopology) -> String {
    let layout = match g.layout {
        GuestLayout::Flat => "flat (every device on pcie.0)",
        GuestLayout::Mirror => "mirror (the host's root complexes, root ports and switches)",
    };
    let mut out = format!("  Guest topology: {layout}\n\n");
    let mut t = Table::new(["DEVICE", "ROLE", "HOST", "GUEST", "BELOW", "CLIQUE"]).indent(2);
    for d in &g.devices {
        t.row([
            d.id.clone(),
            format!("{:?}", d.role).to_lowercase(),
            d.host.to_string(),
            d.guest.to_string(),
            d.parent.clone(),
            d.clique.map_or("-".into(), |c| c.to_string()),
        ]);
    }
    out.push_str(&t.render());
    if !g.ports.is_empty() {
        out.push('\n');
        let mut t = Table::new(["PORT", "KIND", "MIRRORS", "GUEST", "BUS", "LINK"]).indent(2);
        for rc in &g.root_complexes {
            t.row([
                rc.id.clone(),
                rc.numa_node.map_or("pxb-pcie (no NUMA node)".into(), |n| {
                    format!("pxb-pcie (NUMA {n})")
                }),
                rc.host.clone(),
                format!("bus {:#04x}", rc.bus_nr),
                format!("{:#04x}-{:#04x}", rc.bus_nr, rc.last_bus),
                "-".into(),
            ]);
        }
        for p in &g.ports {
            t.row([
                p.id.clone(),
                p.kind.qemu_driver().to_string(),
                p.host.map_or("(invented)".into(), |h| h.to_string()),
                p.guest.to_string(),
                format!("{:#04x}", p.secondary_bus),
                p.link
                    .map_or("-".into(), |l| format!("{} x{}", l.speed.qemu(), l.width)),
            ]);
        }
        out.push_str(&t.render());
    }
    for n in &g.numa_nodes {
        let _ = writeln!(out, "  guest NUMA node {n}");
    }
    for n in &g.notes {
        let _ = writeln!(out, "  note: {n}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::compact;

    #[test]
    fn long_gpu_lists_become_counts() {
        let long = "apart from 0000:01:00.0 (SYS), 0000:41:00.0 (NODE), 0000:83:00.0 (SYS), 0000:84:00.0 (SYS): beyond PHB without NVLink";
        assert_eq!(
            compact(long),
            "apart from 4 GPUs (SYS 3, NODE 1; each pair below): beyond PHB without NVLink"
        );
        let short = "with 0000:24:00.0 (PIX), 0000:26:00.0 (PHB)";
        assert_eq!(compact(short), short);
    }
}
