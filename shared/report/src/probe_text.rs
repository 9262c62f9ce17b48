//! The probe report for people: hypervisor, CUDA and NVML lines, the GPU and
//! pair tables, `--verify` and `--enable` results, inconsistencies.

use std::fmt::Write;

use crate::probe::{CapabilityState, Flag, ProbeReport, Verdict};
use crate::Table;

impl ProbeReport {
    /// The report for people: hypervisor, CUDA and NVML lines, the GPU and
    /// pair tables, `--verify` and `--enable` results, inconsistencies.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let hv = match (&self.hypervisor.signature, self.hypervisor.present_bit) {
            (Some(sig), true) => format!("yes ({sig:?})"),
            (None, true) => "yes".into(),
            _ => "no: the NVIDIA driver will ignore any clique capability".into(),
        };
        let _ = writeln!(out, "Hypervisor detected: {hv}");
        let cuda = match (&self.cuda.available, &self.cuda.why) {
            (true, _) => format!("yes (driver API {})", self.cuda.driver_api.unwrap_or(0)),
            (false, Some(why)) => format!("no: {why}"),
            (false, None) => "no".into(),
        };
        let _ = writeln!(out, "CUDA: {cuda}");
        let _ = writeln!(
            out,
            "NVLink (NVML): {}\n",
            self.nvml.as_deref().unwrap_or("read")
        );
        if self.gpus.is_empty() {
            let _ = writeln!(
                out,
                "No NVIDIA GPU (vendor 0x10de, display class 0x03) under {}/bus/pci/devices.",
                self.sysfs_root
            );
            return out;
        }
        let mut t = Table::new(["GPU", "BDF", "ID", "CUDA", "CAPABILITY", "CLIQUE", "NVLINK"]);
        for (i, g) in self.gpus.iter().enumerate() {
            let cap = match &g.capability {
                CapabilityState::Present { offset, .. } => format!("P2P at {offset:#04x}"),
                CapabilityState::Absent => "absent".into(),
                CapabilityState::Invalid { offset, why } => {
                    format!("invalid at {offset:#04x}: {why}")
                }
                CapabilityState::Unreadable { why } => format!("unreadable: {why}"),
            };
            let cap = match &g.bts {
                Some(b) => format!(
                    "{cap}; BTS at {:#04x} (egress poison {})",
                    b.offset,
                    if b.egress_poison { "on" } else { "off" }
                ),
                None => cap,
            };
            let nv = g.nvlink.as_ref().map_or_else(
                || "-".into(),
                |l| {
                    format!(
                        "{} active ({} to GPUs, {} to switches)",
                        l.active, l.to_gpus, l.to_switches
                    )
                },
            );
            t.row([
                format!("GPU{i}"),
                g.bdf.to_string(),
                format!("{}:{}", &g.vendor[2..], &g.device[2..]),
                g.cuda_ordinal.map_or_else(|| "-".into(), |o| o.to_string()),
                cap,
                g.clique.map_or_else(|| "-".into(), |c| c.to_string()),
                nv,
            ]);
        }
        out.push_str(&t.render());
        if self.gpus.iter().any(|g| g.pcie.is_some()) {
            out.push_str("\nPCIe as the VM sees it:\n\n");
            let mut t = Table::new(["GPU", "BDF", "SETTINGS", "HIDDEN EXTENDED CAPABILITIES"]);
            for (i, g) in self.gpus.iter().enumerate() {
                let Some(p) = &g.pcie else { continue };
                t.row([
                    format!("GPU{i}"),
                    g.bdf.to_string(),
                    p.summary(),
                    if p.hidden_extended_capabilities.is_empty() {
                        "-".into()
                    } else {
                        p.hidden_extended_capabilities.join(" ")
                    },
                ]);
            }
            out.push_str(&t.render());
        }
        if !self.pairs.is_empty() {
            out.push('\n');
            let mut t = Table::new(["PAIR", "DECISION", "WHY", "CUDA a->b / b->a"]);
            for p in &self.pairs {
                let cuda = p.cuda.map_or_else(
                    || "-".into(),
                    |[ab, ba]| {
                        format!(
                            "{} / {} (rank {}, atomics {})",
                            if ab.can_access { "yes" } else { "no" },
                            if ba.can_access { "yes" } else { "no" },
                            ab.performance_rank,
                            if ab.native_atomics { "yes" } else { "no" }
                        )
                    },
                );
                let verdict = match p.verdict {
                    Verdict::Enable => "enable",
                    Verdict::Disable => "disable",
                    Verdict::Unknown => "unknown",
                };
                t.row([
                    format!("{} {}", p.a, p.b),
                    verdict.into(),
                    p.reasons.join("; "),
                    cuda,
                ]);
            }
            out.push_str(&t.render());
        }
        let all_flags: Vec<&Flag> = self
            .flags
            .iter()
            .chain(self.pairs.iter().flat_map(|p| p.flags.iter()))
            .collect();
        if !self.verify.is_empty() {
            out.push_str("\nData moved between enabled pairs (--verify):\n");
            let mut t = Table::new([
                "FROM",
                "TO",
                "METHOD",
                "BYTES",
                "COMPARED",
                "DIFFERING",
                "RESULT",
            ]);
            for c in &self.verify {
                t.row([
                    c.src.to_string(),
                    c.dst.to_string(),
                    c.mode.to_string(),
                    c.bytes.to_string(),
                    c.checked_bytes.to_string(),
                    c.mismatched_bytes.to_string(),
                    match (&c.error, c.ok()) {
                        (Some(e), _) => format!("copy failed: {e}"),
                        (None, true) => "arrived".into(),
                        (None, false) => format!(
                            "LOST (first difference at byte {})",
                            c.first_bad.map_or("?".into(), |o| o.to_string())
                        ),
                    },
                ]);
            }
            out.push_str(&t.render());
        }
        out.push_str("\nInconsistencies: ");
        if all_flags.is_empty() {
            out.push_str("none\n");
        } else {
            out.push('\n');
            for f in all_flags {
                let _ = writeln!(
                    out,
                    "  - [{}] {}",
                    serde_json::to_value(f.kind)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default(),
                    f.message
                );
            }
        }
        if !self.enabled.is_empty() {
            out.push_str("\nPeer access enabled (--enable):\n");
            for e in &self.enabled {
                let _ = writeln!(out, "  {} -> {}: {}", e.src, e.dst, e.answer);
            }
        }
        out
    }
}
