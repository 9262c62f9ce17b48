//! The doctor report (schema `vp2p.doctor/1`) as it crosses the wire: one
//! verdict for the VM and one per GPU pair (OK, SLOW, BROKEN) with the facts
//! each was judged from, the measured and the expected figures, and what was
//! not checked. `p2p-guest doctor` judges; this is what it reports
//! ([`DoctorReport::render_text`] for people).

use p2p_topology::Bdf;
use serde::{Deserialize, Serialize};

/// Schema tag of the doctor report.
pub const DOCTOR_SCHEMA: &str = "vp2p.doctor/1";

/// A verdict, for a pair and for the VM.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Everything checked agrees and the copies reach the expected figure.
    Ok,
    /// Works, but below the expected figure (or P2P is off where nothing
    /// says it may be on).
    Slow,
    /// P2P refused where the capability or NVLink says it may be on, data
    /// lost, or NCCL and the driver disagree.
    Broken,
}

impl Verdict {
    /// The exit status: 0 OK, 1 SLOW, 2 BROKEN (docs/p2p-guest.md).
    pub fn exit_code(self) -> i32 {
        match self {
            Verdict::Ok => 0,
            Verdict::Slow => 1,
            Verdict::Broken => 2,
        }
    }

    /// `OK`, `SLOW`, `BROKEN`.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Ok => "OK",
            Verdict::Slow => "SLOW",
            Verdict::Broken => "BROKEN",
        }
    }
}

/// Something doctor could not check, and what it needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NotChecked {
    /// What was not checked.
    pub what: String,
    /// Why, and what it needs.
    pub needs: String,
}

/// One GPU as doctor shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DoctorGpu {
    /// Its address in the guest.
    pub bdf: Bdf,
    /// Its name (from CUDA), or the PCI id.
    pub name: String,
    /// The P2P clique capability: `clique N`, `absent`, `unreadable: ...`.
    pub capability: String,
    /// The clique, when the capability names one.
    pub clique: Option<u8>,
    /// CUDA's ordinal, when CUDA sees it.
    pub cuda_ordinal: Option<usize>,
    /// Active NVLinks (NVML), when known.
    pub nvlinks: Option<u32>,
    /// The PCIe registers as the guest sees them (probe's summary).
    pub pcie: Option<String>,
    /// The GPU with itself (the only check on a machine of one GPU).
    pub self_check: Option<SelfCheck>,
}

/// A GPU copying within itself: the verify core's methods and a
/// device-local copy-engine copy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SelfCheck {
    /// Data checks made within the GPU, and how many arrived whole.
    pub data_checks: usize,
    /// Of those, the ones whose bytes all arrived.
    pub data_ok: usize,
    /// Device-local copy-engine GB/s (one way), when measured.
    pub local_ce_gbps: Option<f64>,
}

/// The measured figures of a pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Measured {
    /// Bytes per copy.
    pub bytes: u64,
    /// Copy engine a->b, GB/s (median).
    pub ce_a_to_b_gbps: Option<f64>,
    /// Copy engine b->a, GB/s.
    pub ce_b_to_a_gbps: Option<f64>,
    /// Copy engine both ways at once, GB/s (the sum).
    pub ce_bi_gbps: Option<f64>,
    /// One-way latency (ping-pong), microseconds, the slower direction.
    pub latency_us: Option<f64>,
    /// Whether the bench ran the pair with peer access on (a->b), when it says.
    pub peer_access: Option<bool>,
    /// Every measurement's bytes arrived (the bench verifies each copy).
    pub verified: bool,
}

impl Measured {
    /// The slower direction one way.
    pub fn ce_uni_gbps(&self) -> Option<f64> {
        match (self.ce_a_to_b_gbps, self.ce_b_to_a_gbps) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        }
    }
}

/// The figure a pair is held to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExpectedFigure {
    /// `table` (published bare-metal figures) or `baseline` (`--baseline`).
    pub from: String,
    /// GB/s one way.
    pub uni_gbps: f64,
    /// GB/s both ways, when known.
    pub bi_gbps: Option<f64>,
    /// One-way latency, microseconds, when known (baselines only).
    pub latency_us: Option<f64>,
    /// The link's raw rate per direction, when the link is known.
    pub raw_gbps: Option<f64>,
    /// Where the figure comes from (URL, or the baseline file and its pair).
    pub source: String,
    /// When it was published or measured.
    pub date: String,
    /// What it is, in one sentence (derived figures say so).
    pub note: String,
}

/// One GPU pair's check and verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DoctorPair {
    /// One GPU (the lower address).
    pub a: Bdf,
    /// The other.
    pub b: Bdf,
    /// The link: `NV18 (NVLink4)`, `PCIe Gen5 x16`, or `PCIe` when unknown.
    pub link: String,
    /// The route (bench's names; with `--host-plan`, the host's route).
    pub route: String,
    /// Probe's decision: enable, disable or unknown, and why.
    pub decision: String,
    /// The driver's answer both ways: `allowed`, `refused`, `one way only`;
    /// None without CUDA.
    pub driver: Option<String>,
    /// Data moved both ways arrived whole (the verify core); None when not checked.
    pub data_verified: Option<bool>,
    /// The transport NCCL will use (P2P, SHM, NET, ERROR); None without explain.
    pub nccl_transport: Option<String>,
    /// Where NCCL and the driver disagree for this pair.
    pub nccl_disagreement: Option<String>,
    /// The short bench; None when not measured.
    pub measured: Option<Measured>,
    /// The figure the pair is held to; None when the link is unknown.
    pub expected: Option<ExpectedFigure>,
    /// Measured one way (slower direction) / expected one way.
    pub ratio: Option<f64>,
    /// Measured both ways / expected both ways.
    pub bi_ratio: Option<f64>,
    /// Measured one way / the link's raw rate.
    pub of_raw: Option<f64>,
    /// The verdict.
    pub verdict: Verdict,
    /// Why, in words.
    pub reasons: Vec<String>,
    /// For SLOW: the likely causes for the route.
    pub likely_causes: Vec<String>,
    /// For SLOW: what to ask the host operator.
    pub ask_host: Vec<String>,
}

/// The whole doctor report (schema `vp2p.doctor/1`), one per VM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DoctorReport {
    /// Always `vp2p.doctor/1`.
    pub schema: String,
    /// p2p-guest's version.
    pub tool_version: String,
    /// The machine's host name (from the bench, else the probe's sysfs root).
    pub host: String,
    /// The VM's verdict: the worst of its pairs and GPUs.
    pub verdict: Verdict,
    /// The exit status doctor ends with (0 OK, 1 SLOW, 2 BROKEN, 3 no GPU).
    pub exit_code: i32,
    /// The reason, one sentence.
    pub reason: String,
    /// The one next step.
    pub next_step: String,
    /// Where each input came from.
    pub sources: Vec<String>,
    /// What was checked.
    pub checked: Vec<String>,
    /// What could not be checked, and what it needs.
    pub not_checked: Vec<NotChecked>,
    /// The GPUs.
    pub gpus: Vec<DoctorGpu>,
    /// Every unordered GPU pair; empty with fewer than two GPUs.
    pub pairs: Vec<DoctorPair>,
    /// The probe's flags about single GPUs (relaxed ordering off, ...).
    pub gpu_flags: Vec<String>,
}
