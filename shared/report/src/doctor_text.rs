//! The doctor report for people: the verdict first, then the GPUs, the
//! pairs, what each pair was held to, and what was not checked.

use std::fmt::Write;

use crate::doctor::{DoctorReport, Verdict};
use crate::Table;

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.digits$}"))
}

impl DoctorReport {
    /// The whole report as text.
    pub fn render_text(&self) -> String {
        render(self)
    }
}

fn render(r: &DoctorReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "VERDICT: {} ({})", r.verdict.word(), r.reason);
    let _ = writeln!(out, "NEXT STEP: {}", r.next_step);
    let _ = writeln!(out, "\nFrom: {}", r.sources.join("; "));
    if !r.gpus.is_empty() {
        out.push('\n');
        let mut t = Table::new([
            "GPU",
            "BDF",
            "NAME",
            "CAPABILITY",
            "CUDA",
            "NVLINK",
            "PCIE",
            "SELF-CHECK",
        ]);
        for (i, g) in r.gpus.iter().enumerate() {
            t.row([
                format!("GPU{i}"),
                g.bdf.to_string(),
                g.name.clone(),
                g.capability.clone(),
                g.cuda_ordinal.map_or_else(|| "-".into(), |o| o.to_string()),
                g.nvlinks
                    .map_or_else(|| "-".into(), |n| format!("{n} active")),
                g.pcie.clone().unwrap_or_else(|| "-".into()),
                g.self_check.as_ref().map_or_else(
                    || "-".into(),
                    |s| {
                        format!(
                            "{}/{} data ok{}",
                            s.data_ok,
                            s.data_checks,
                            s.local_ce_gbps
                                .map_or(String::new(), |g| format!(", local {g:.1} GB/s"))
                        )
                    },
                ),
            ]);
        }
        out.push_str(&t.render());
    }
    if r.pairs.is_empty() && r.gpus.len() == 1 {
        out.push_str(
            "\nNo pair: one GPU, so no peer-to-peer to check; the GPU was checked with itself.\n",
        );
    }
    if !r.pairs.is_empty() {
        out.push('\n');
        let mut t = Table::new([
            "PAIR", "LINK", "ROUTE", "DRIVER", "DATA", "NCCL", "CE GB/s", "BI GB/s", "LAT us",
            "EXPECTED", "RATIO", "VERDICT",
        ]);
        for p in &r.pairs {
            let m = p.measured.as_ref();
            t.row([
                format!("{} {}", p.a, p.b),
                p.link.clone(),
                p.route.clone(),
                p.driver.clone().unwrap_or_else(|| "-".into()),
                match p.data_verified {
                    Some(true) => "ok".into(),
                    Some(false) => "LOST".into(),
                    None => "-".into(),
                },
                p.nccl_transport.clone().unwrap_or_else(|| "-".into()),
                opt(m.and_then(|m| m.ce_uni_gbps()), 1),
                opt(m.and_then(|m| m.ce_bi_gbps), 1),
                opt(m.and_then(|m| m.latency_us), 2),
                opt(p.expected.as_ref().map(|e| e.uni_gbps), 1),
                opt(p.ratio, 2),
                p.verdict.word().into(),
            ]);
        }
        out.push_str(&t.render());
        for p in &r.pairs {
            let _ = writeln!(out, "\n{} {}: {}", p.a, p.b, p.verdict.word());
            for why in &p.reasons {
                let _ = writeln!(out, "  - {why}");
            }
            if p.verdict == Verdict::Slow {
                for c in &p.likely_causes {
                    let _ = writeln!(out, "  likely cause: {c}");
                }
                for a in &p.ask_host {
                    let _ = writeln!(out, "  ask the host operator: {a}");
                }
            }
            if let Some(e) = &p.expected {
                let _ = writeln!(
                    out,
                    "  expected ({}): {:.1} GB/s one way{}; {} ({}, {})",
                    e.from,
                    e.uni_gbps,
                    e.bi_gbps
                        .map_or(String::new(), |b| format!(", {b:.1} both ways")),
                    e.note,
                    e.source,
                    e.date
                );
            }
        }
    }
    if !r.gpu_flags.is_empty() {
        out.push_str("\nProbe flags:\n");
        for f in &r.gpu_flags {
            let _ = writeln!(out, "  - {f}");
        }
    }
    out.push_str("\nChecked:\n");
    for c in &r.checked {
        let _ = writeln!(out, "  - {c}");
    }
    if !r.not_checked.is_empty() {
        out.push_str("Not checked:\n");
        for n in &r.not_checked {
            let _ = writeln!(out, "  - {}: needs {}", n.what, n.needs);
        }
    }
    let _ = writeln!(
        out,
        "\nExit status {}: 0 OK, 1 SLOW, 2 BROKEN (3: nothing to check or an input unreadable, 64: a usage error).",
        r.exit_code
    );
    out
}
