//! The probe report (schema `vp2p.probe/1`): GPUs with their capability and
//! clique, the hypervisor check, NVLink, what CUDA says, and the decision and
//! inconsistencies per pair.

use std::fmt::Write;

use p2p_report::Table;
use p2p_topology::{Bdf, CudaOrdinal};
use serde::{Deserialize, Serialize};

use super::hypervisor::HypervisorInfo;
use super::nvml::{GpuLinks, NvLinkView};
use super::sysfs::{BtsState, CapabilityState, GuestGpu};
use crate::decide::{self, CudaPeer, Flag, PairFacts, PeerDecision, Verdict};

/// Schema tag carried in every probe report.
pub const PROBE_SCHEMA: &str = "vp2p.probe/1";

/// A GPU with everything the probe learnt about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProbeGpu {
    /// The GPU's PCI address in the guest.
    pub bdf: Bdf,
    /// PCI vendor id as hex text (`0x10de`).
    pub vendor: String,
    /// PCI device id as hex text (`0x2335` for the H200).
    pub device: String,
    /// Bytes the sysfs `config` read returned: 64 for non-root readers, up
    /// to 4096 as root.
    pub config_len: usize,
    /// What the config space says about the P2P clique capability.
    pub capability: CapabilityState,
    /// The clique the driver would read, or null.
    pub clique: Option<u8>,
    /// The driver's BTS capability, when present.
    #[serde(default)]
    pub bts: Option<BtsState>,
    /// Relaxed ordering, payload and read request sizes, link and ATS as the
    /// guest sees them (a VMM may hide or emulate them).
    #[serde(default)]
    pub pcie: Option<super::pcie::GuestPcie>,
    /// CUDA ordinal, when CUDA is available and sees the GPU.
    pub cuda_ordinal: Option<CudaOrdinal>,
    /// Its NVLinks per NVML; None when NVML is unavailable or does not list it.
    pub nvlink: Option<GpuLinks>,
}

/// CUDA's availability.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CudaStatus {
    /// Whether the CUDA driver opened and answered every peer query (false
    /// under `--no-driver`).
    pub available: bool,
    /// Why not, when unavailable.
    pub why: Option<String>,
    /// cuDriverGetVersion (for example 13000); None when CUDA is unavailable.
    pub driver_api: Option<i32>,
}

/// What `--enable` did for one ordered pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EnableResult {
    /// The GPU whose context was given access to `dst`.
    pub src: Bdf,
    /// The GPU whose memory `src` may now access.
    pub dst: Bdf,
    /// Whether peer access is now on (already enabled counts as on).
    pub ok: bool,
    /// `enabled`, the driver's error, or why it was not tried.
    pub answer: String,
}

/// The whole probe report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProbeReport {
    /// Always `vp2p.probe/1`.
    pub schema: String,
    /// The sysfs root that was scanned (`/sys`, or a captured tree).
    pub sysfs_root: String,
    /// CPUID's hypervisor check; without a hypervisor the driver ignores every
    /// clique.
    pub hypervisor: HypervisorInfo,
    /// Whether CUDA answered, and why not.
    pub cuda: CudaStatus,
    /// Why NVML gave no NVLink facts; None when it answered.
    pub nvml: Option<String>,
    /// Every NVIDIA GPU the guest shows, in address order.
    pub gpus: Vec<ProbeGpu>,
    /// The decision for every unordered pair of GPUs.
    pub pairs: Vec<PeerDecision>,
    /// Flags about single GPUs (pair flags sit in `pairs`).
    pub flags: Vec<Flag>,
    /// Filled by `--enable`.
    pub enabled: Vec<EnableResult>,
    /// Filled by `--verify`: data moved both ways between enabled pairs.
    #[serde(default)]
    pub verify: Vec<crate::verify::VerifyCheck>,
}

/// CUDA's view of the GPUs: ordinal per address and answers per ordered pair.
pub struct CudaFacts {
    /// CUDA's ordinal for each GPU address it sees.
    pub ordinals: Vec<(Bdf, CudaOrdinal)>,
    /// CUDA's peer answers per ordered (source, destination) ordinal pair.
    pub answers: Vec<((CudaOrdinal, CudaOrdinal), CudaPeer)>,
    /// cuDriverGetVersion (for example 13000).
    pub driver_api: i32,
}

impl ProbeReport {
    /// Assembles the report and decides every pair.
    pub fn build(
        sysfs_root: &str,
        gpus: Vec<GuestGpu>,
        hypervisor: HypervisorInfo,
        nvlink: &NvLinkView,
        cuda: Result<CudaFacts, String>,
    ) -> Self {
        let (cuda_status, facts) = match cuda {
            Ok(f) => (
                CudaStatus {
                    available: true,
                    why: None,
                    driver_api: Some(f.driver_api),
                },
                Some(f),
            ),
            Err(why) => (
                CudaStatus {
                    available: false,
                    why: Some(why),
                    driver_api: None,
                },
                None,
            ),
        };
        let ordinal = |b: Bdf| {
            facts
                .as_ref()
                .and_then(|f| f.ordinals.iter().find(|(x, _)| *x == b).map(|(_, o)| *o))
        };
        let answer = |s: CudaOrdinal, d: CudaOrdinal| {
            facts.as_ref().and_then(|f| {
                f.answers
                    .iter()
                    .find(|(k, _)| *k == (s, d))
                    .map(|(_, a)| *a)
            })
        };
        let mut pairs = Vec::new();
        for (i, a) in gpus.iter().enumerate() {
            for b in &gpus[i + 1..] {
                let cuda = match (ordinal(a.bdf), ordinal(b.bdf)) {
                    (Some(x), Some(y)) => answer(x, y).zip(answer(y, x)).map(|(p, q)| [p, q]),
                    _ => None,
                };
                let pf = PairFacts {
                    a: a.bdf,
                    b: b.bdf,
                    nvlinks: nvlink.count_between(a.bdf, b.bdf),
                    cuda,
                };
                pairs.push(decide::decide(a, b, &pf));
            }
        }
        let flags = decide::gpu_flags(&gpus, hypervisor.detected());
        let probe_gpus = gpus
            .into_iter()
            .map(|g| ProbeGpu {
                bdf: g.bdf,
                vendor: format!("{:#06x}", g.vendor),
                device: format!("{:#06x}", g.device),
                config_len: g.config_len,
                clique: g.capability.clique().map(|c| c.id()),
                capability: g.capability,
                bts: g.bts,
                pcie: g.pcie,
                cuda_ordinal: ordinal(g.bdf),
                nvlink: nvlink.gpus.iter().find(|l| l.bdf == g.bdf).cloned(),
            })
            .collect();
        ProbeReport {
            schema: PROBE_SCHEMA.into(),
            sysfs_root: sysfs_root.into(),
            hypervisor,
            cuda: cuda_status,
            nvml: nvlink.unavailable.clone(),
            gpus: probe_gpus,
            pairs,
            flags,
            enabled: Vec::new(),
            verify: Vec::new(),
        }
    }

    /// The decision for a pair, either order.
    pub fn decision(&self, a: Bdf, b: Bdf) -> Option<&PeerDecision> {
        self.pairs
            .iter()
            .find(|p| (p.a == a && p.b == b) || (p.a == b && p.b == a))
    }

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
