//! The chooser's answer as a table: each device and why, then the sets that
//! lost and why.

use std::fmt::Write;

use p2p_allocation::chooser::{Choice, ChosenRole};

use crate::{Table, TextReport};

/// The chosen devices with their reasons, the set's reasons, and the best
/// alternatives considered.
impl TextReport for Choice {
    fn render_text(&self) -> String {
        let mut out = String::new();
        let mut t = Table::new(["CHOSEN", "ROLE", "GROUP", "NUMA", "WHY"]).indent(2);
        for d in &self.devices {
            let role = match d.role {
                ChosenRole::Gpu => "gpu",
                ChosenRole::Nic => "nic",
                ChosenRole::Companion => "companion",
            };
            fn opt(v: Option<impl ToString>) -> String {
                v.map_or("-".to_string(), |v| v.to_string())
            }
            t.row([
                d.bdf.to_string(),
                role.to_string(),
                opt(d.iommu_group),
                opt(d.numa_node),
                d.reason.clone(),
            ]);
        }
        out.push_str(&t.render());
        for r in &self.reasons {
            let _ = writeln!(out, "  - {r}");
        }
        if !self.considered.is_empty() {
            out.push('\n');
            let mut t = Table::new(["CONSIDERED", "WORST", "WHY NOT"]).indent(2);
            for a in &self.considered {
                let set: Vec<String> = a.gpus.iter().map(|b| b.to_string()).collect();
                t.row([set.join(","), a.worst_class.to_string(), a.why_not.clone()]);
            }
            out.push_str(&t.render());
        }
        out
    }
}
