//! The explain report for people: the file and the facts, NCCL's verdict
//! per pair beside the driver's, each GPU's net, the reasons, where NCCL
//! placed what, and `--confirm`'s result.

use p2p_report::Table;

use super::{Confirmation, ExplainReport};

impl ExplainReport {
    /// The report as tables and lists, `--confirm`'s result after them.
    pub fn render_text(&self) -> String {
        let mut out = render(self);
        if let Some(c) = &self.confirm {
            out.push_str(&render_confirmation(c, self.pairs.len()));
        }
        out
    }
}

fn render_confirmation(c: &Confirmation, pairs: usize) -> String {
    let mut out = format!(
        "confirm: NCCL {} printed {} channel connection(s) (output kept in {})\n",
        c.nccl_version.as_deref().unwrap_or("(version not printed)"),
        c.channels,
        c.kept_in
    );
    if c.differences.is_empty() {
        out.push_str(&format!(
            "confirm: NCCL agrees with the prediction on {} of {pairs} pair(s)\n",
            c.confirmed.len()
        ));
    }
    for n in &c.not_connected {
        out.push_str(&format!("confirm: not connected: {n}\n"));
    }
    for d in &c.differences {
        out.push_str(&format!("CONFIRM MISMATCH: {d}\n"));
    }
    out
}

fn render(r: &ExplainReport) -> String {
    let mut out = format!(
        "NCCL {} rules\nfile: {}{}\n",
        r.nccl_rules,
        r.file
            .path
            .as_deref()
            .map_or(String::new(), |p| format!("{p}: ")),
        r.file.why
    );
    for w in &r.what_if {
        out.push_str(&format!("what-if: {w}\n"));
    }
    if r.variables.is_empty() {
        out.push_str("variables: none set\n");
    } else {
        for s in &r.variables {
            out.push_str(&format!("variable: {s}\n"));
        }
    }
    out.push_str(&format!(
        "cpu: {} {}{}\n",
        r.cpu.arch,
        r.cpu.vendor.as_deref().unwrap_or("(vendor unknown)"),
        match (r.cpu.familyid, r.cpu.modelid) {
            (Some(f), Some(m)) => format!(" family {f} model {m}"),
            _ => String::new(),
        }
    ));
    if !r.loader_refusals.is_empty() {
        out.push_str(
            "NCCL refuses this file at initialisation (ncclCommInitAll fails; it stops at the first):\n",
        );
        for f in &r.loader_refusals {
            out.push_str(&format!("  REFUSED {f}\n    why: {}\n", f.why));
        }
    }
    if !r.pairs.is_empty() {
        let mut t = Table::new(["PAIR", "PATH", "P2P LEVEL", "DRIVER", "NCCL", "DECIDED BY"]);
        for p in &r.pairs {
            let v = &p.nccl;
            t.row([
                format!("{}-{}", v.a, v.b),
                v.path.to_string(),
                v.p2p_level.to_string(),
                format!("{:?}", v.driver).to_lowercase(),
                v.transport.to_string(),
                if v.decided_by.is_empty() {
                    "defaults".into()
                } else {
                    v.decided_by.join("; ")
                },
            ]);
        }
        out.push('\n');
        out.push_str(&t.render());
    }
    let mut t = Table::new(["GPU", "NET", "NIC", "PATH", "GDR WRITE", "GDR READ"]);
    for g in &r.gpus {
        t.row([
            g.gpu.to_string(),
            g.net.clone().unwrap_or_else(|| "-".into()),
            g.nic.map_or("-".into(), |b| b.to_string()),
            g.path.map_or("-".into(), |p| p.to_string()),
            if g.gdr_write { "yes" } else { "no" }.into(),
            if g.gdr_read { "yes" } else { "no" }.into(),
        ]);
    }
    out.push('\n');
    out.push_str(&t.render());
    out.push_str("\nwhy:\n");
    for p in &r.pairs {
        out.push_str(&format!("  {}-{}:\n", p.nccl.a, p.nccl.b));
        for why in &p.nccl.reasons {
            out.push_str(&format!("    {why}\n"));
        }
    }
    for g in &r.gpus {
        out.push_str(&format!("  {}:\n", g.gpu));
        for why in &g.reasons {
            out.push_str(&format!("    {why}\n"));
        }
    }
    out.push_str("placed:\n");
    for n in &r.notes {
        out.push_str(&format!("  {n}\n"));
    }
    if !r.loader_refusals.is_empty() {
        out.push_str("NCCL does not initialise with this file: every pair ERROR\n");
    } else if r.mismatches.is_empty() {
        out.push_str("NCCL and the driver agree on every pair\n");
    } else {
        for m in &r.mismatches {
            out.push_str(&format!("MISMATCH: {m}\n"));
        }
    }
    out
}
