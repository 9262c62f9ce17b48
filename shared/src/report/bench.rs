//! The `p2p-guest bench` report (schema `vp2p.bench/1`): the machine, the
//! GPUs, the peer decisions, the method, and every sample of every
//! measurement, so two runs can be compared and re-analysed later.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Schema tag carried in every bench report.
pub const BENCH_SCHEMA: &str = "vp2p.bench/1";

/// One gigabyte as the reference tools count it.
pub const GB: f64 = 1e9;

/// How bytes move in a measurement.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Copy engine with peer access (cuMemcpyPeerAsync on the source GPU).
    Ce,
    /// SM copy kernel on the destination GPU reading the peer's memory.
    SmRead,
    /// SM copy kernel on the source GPU writing the peer's memory.
    SmWrite,
    /// vp2p's host-staged pipeline: pinned chunks, D2H and H2D overlapped.
    Staged,
    /// The driver's own path: a peer copy without peer access.
    Driver,
    /// NCCL all-reduce (sum, float) with P2P allowed.
    Nccl,
    /// NCCL all-reduce with NCCL_P2P_DISABLE=1.
    #[serde(rename = "nccl-nop2p")]
    NcclNoP2p,
    /// One-way latency from a flag ping-pong kernel pair.
    Pingpong,
}

impl Mode {
    pub const ALL: [Mode; 8] = [
        Mode::Ce,
        Mode::SmRead,
        Mode::SmWrite,
        Mode::Staged,
        Mode::Driver,
        Mode::Nccl,
        Mode::NcclNoP2p,
        Mode::Pingpong,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Ce => "ce",
            Mode::SmRead => "sm-read",
            Mode::SmWrite => "sm-write",
            Mode::Staged => "staged",
            Mode::Driver => "driver",
            Mode::Nccl => "nccl",
            Mode::NcclNoP2p => "nccl-nop2p",
            Mode::Pingpong => "pingpong",
        }
    }

    /// Needs peer access between the pair (the driver maps the peer's memory).
    pub fn needs_peer_access(self) -> bool {
        matches!(
            self,
            Mode::Ce | Mode::SmRead | Mode::SmWrite | Mode::Pingpong
        )
    }

    /// Measures a pair of GPUs (NCCL measures the whole set).
    pub fn is_pairwise(self) -> bool {
        !matches!(self, Mode::Nccl | Mode::NcclNoP2p)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
                format!("unknown mode '{s}' (one of {})", names.join(", "))
            })
    }
}

/// One direction, or both at once.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Uni,
    /// Both directions at once; bandwidth counts the bytes of both.
    Bi,
}

/// Median and spread of a set of samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Stats {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    /// (max - min) / median, in percent.
    pub spread_pct: f64,
}

impl Stats {
    /// Statistics of `values`; None when empty or when any value is not finite.
    pub fn of(values: &[f64]) -> Option<Stats> {
        if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        let (min, max) = (v[0], v[n - 1]);
        let mean = v.iter().sum::<f64>() / n as f64;
        let spread_pct = if median > 0.0 {
            (max - min) / median * 100.0
        } else {
            0.0
        };
        Some(Stats {
            median,
            min,
            max,
            mean,
            spread_pct,
        })
    }
}

/// What the destination held after the timed copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Verification {
    /// Bytes compared with the source pattern (every destination byte).
    pub checked_bytes: u64,
    pub mismatches: u64,
}

impl Verification {
    pub fn ok(&self) -> bool {
        self.checked_bytes > 0 && self.mismatches == 0
    }
}

/// One measured configuration and all its samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Measurement {
    pub mode: Mode,
    pub direction: Direction,
    /// CUDA ordinals; None for collective modes.
    pub src: Option<usize>,
    pub dst: Option<usize>,
    /// Bytes per copy (per direction); per rank for NCCL.
    pub bytes: u64,
    /// Copies (or collectives, or round trips) per sample.
    pub copies: u32,
    /// Seconds each sample took for all its copies.
    pub sample_seconds: Vec<f64>,
    /// GB/s per sample (bus bandwidth for NCCL, both directions for `bi`).
    pub gbps: Stats,
    /// Microseconds per copy (one-way for ping-pong).
    pub latency_us: Stats,
    pub verification: Verification,
}

/// A GPU as CUDA sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BenchGpu {
    pub ordinal: usize,
    pub bdf: String,
    pub name: String,
    pub compute_capability: [i32; 2],
    pub memory_bytes: u64,
}

/// What was decided and measured for one ordered pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BenchPair {
    pub src: usize,
    pub dst: usize,
    /// Path class as `nvidia-smi topo -m` would print it.
    pub class: String,
    /// cuDeviceCanAccessPeer.
    pub cuda_can_access: bool,
    /// Peer access was enabled for the run.
    pub peer_access: bool,
    /// Why peer access was or was not enabled.
    pub why: String,
}

/// Where the numbers came from.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Machine {
    pub hostname: String,
    pub kernel: String,
    pub cpu: String,
    pub cpus: usize,
    pub driver_version: String,
    /// cuDriverGetVersion, for example 13000.
    pub cuda_driver_api: i32,
    pub nccl_version: Option<String>,
}

/// How the numbers were taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Method {
    pub samples: u32,
    pub warmup_copies: u32,
    /// A spin kernel holds each stream while copies are queued, then releases them.
    pub spin_release: bool,
    /// The size the matrices are printed at.
    pub headline_bytes: u64,
    /// The size small-copy latency is printed at.
    pub latency_bytes: u64,
    pub gb_is: String,
    /// Peer access policy: "decision", "all" or "off".
    pub peer_access: String,
}

/// The whole bench report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BenchReport {
    pub schema: String,
    pub tool_version: String,
    pub label: String,
    pub machine: Machine,
    pub gpus: Vec<BenchGpu>,
    pub pairs: Vec<BenchPair>,
    pub method: Method,
    pub results: Vec<Measurement>,
    pub notes: Vec<String>,
}

impl BenchReport {
    /// The measurement of `mode`/`direction` from `src` to `dst` at `bytes`.
    pub fn find(
        &self,
        mode: Mode,
        direction: Direction,
        src: Option<usize>,
        dst: Option<usize>,
        bytes: u64,
    ) -> Option<&Measurement> {
        self.results.iter().find(|m| {
            m.mode == mode
                && m.direction == direction
                && m.src == src
                && m.dst == dst
                && m.bytes == bytes
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_take_median_and_spread() {
        let s = Stats::of(&[3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert_eq!((s.min, s.max), (1.0, 10.0));
        assert_eq!(s.mean, 4.0);
        assert!((s.spread_pct - 360.0).abs() < 1e-9);
        assert_eq!(Stats::of(&[5.0]).unwrap().median, 5.0);
        assert!(Stats::of(&[]).is_none());
        assert!(Stats::of(&[1.0, f64::NAN]).is_none());
    }

    #[test]
    fn modes_round_trip_by_name() {
        for m in Mode::ALL {
            assert_eq!(m.name().parse::<Mode>().unwrap(), m);
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(json, format!("\"{}\"", m.name()));
        }
        assert!("sm"
            .parse::<Mode>()
            .unwrap_err()
            .contains("unknown mode 'sm'"));
    }
}
