//! The `p2p-host plan` report: one clique plan per VM, as JSON (schema
//! `vp2p.plan/1`) or as tables with reasons.

use std::fmt::Write;

use serde::{Deserialize, Serialize};

use super::table::Table;
use crate::clique::{CliquePlan, MaxLevel};

/// Schema tag carried in every plan report.
pub const PLAN_SCHEMA: &str = "vp2p.plan/1";

/// Plans for every VM of one host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanReport {
    pub schema: String,
    pub sysfs_root: String,
    pub max_level: MaxLevel,
    pub vms: Vec<CliquePlan>,
}

impl PlanReport {
    pub fn new(sysfs_root: &str, max_level: MaxLevel, vms: Vec<CliquePlan>) -> Self {
        Self {
            schema: PLAN_SCHEMA.to_string(),
            sysfs_root: sysfs_root.to_string(),
            max_level,
            vms,
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
                t.row([
                    a.bdf.to_string(),
                    a.clique.to_string(),
                    a.reasons.join("; "),
                ]);
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
        }
        out
    }
}
