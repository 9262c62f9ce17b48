//! The `p2p-guest bench` report (schema `vp2p.bench/1`): the machine, the
//! GPUs, the peer decisions, the method, and every sample of every
//! measurement, so two runs can be compared and re-analysed later.

use std::fmt;

use serde::{Deserialize, Serialize};

use p2p_topology::{CudaOrdinal, GpuIndex};

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
    /// Every copy engine the pair offers and SM kernels on both GPUs, on one
    /// transfer split by each part's measured share.
    Max,
}

impl Mode {
    /// Every mode, in the order tables list them.
    pub const ALL: [Mode; 9] = [
        Mode::Ce,
        Mode::SmRead,
        Mode::SmWrite,
        Mode::Staged,
        Mode::Driver,
        Mode::Nccl,
        Mode::NcclNoP2p,
        Mode::Pingpong,
        Mode::Max,
    ];

    /// The name `--modes` takes and the JSON carries.
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
            Mode::Max => "max",
        }
    }

    /// Moves bytes from one GPU's buffer to another's (not NCCL, not ping-pong).
    pub fn is_copy(self) -> bool {
        !matches!(self, Mode::Nccl | Mode::NcclNoP2p | Mode::Pingpong)
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

/// A mode name that is not one of [`Mode::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown mode '{0}' (one of {names})", names = Mode::ALL.map(Mode::name).join(", "))]
pub struct ModeParseError(pub String);

impl std::str::FromStr for Mode {
    type Err = ModeParseError;
    fn from_str(s: &str) -> Result<Self, ModeParseError> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| ModeParseError(s.to_string()))
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
    /// One direction.
    Uni,
    /// Both directions at once; bandwidth counts the bytes of both.
    Bi,
}

/// Median and spread of a set of samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Stats {
    /// The median, the figure tables show.
    pub median: f64,
    /// The smallest sample.
    pub min: f64,
    /// The largest sample.
    pub max: f64,
    /// The mean of the samples.
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
    /// Compared bytes that differed (for NCCL, 4 per wrong float).
    pub mismatches: u64,
}

impl Verification {
    /// Something was compared and nothing differed.
    pub fn ok(&self) -> bool {
        self.checked_bytes > 0 && self.mismatches == 0
    }
}

/// One measured configuration and all its samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Measurement {
    /// How the bytes moved.
    pub mode: Mode,
    /// One direction or both at once.
    pub direction: Direction,
    /// Source GPU (its index in `gpus`); None for collective modes.
    pub src: Option<GpuIndex>,
    /// Destination GPU (its index in `gpus`); None for collective modes.
    pub dst: Option<GpuIndex>,
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
    /// What was compared after the warm-up and after every sample.
    pub verification: Verification,
    /// For a transfer split over several engines (`max`): each part, its
    /// share of the bytes and what it moved alone. Empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<TransferPart>,
    /// For a split transfer (`max`): GB/s the split itself moved in the
    /// calibration, beside each part's `alone_gbps`. Below the fastest part
    /// alone, that part moved the whole copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_gbps: Option<f64>,
}

impl Measurement {
    /// Why a split transfer ran as it did, in one line: `split 383.7 GB/s <
    /// ce0 alone 396.6: whole copy on ce0`, or `split 410.2 GB/s >= ce0 alone
    /// 396.6: split over 4 of 5 parts`. None for a single-engine mode.
    pub fn split_choice(&self) -> Option<String> {
        let split = self.split_gbps?;
        let best = self
            .parts
            .iter()
            .max_by(|a, b| a.alone_gbps.total_cmp(&b.alone_gbps))?;
        let used = self.parts.iter().filter(|p| p.bytes > 0).count();
        Some(if split < best.alone_gbps {
            format!(
                "split {split:.1} GB/s < {} alone {:.1}: whole copy on {}",
                best.engine, best.alone_gbps, best.engine
            )
        } else {
            format!(
                "split {split:.1} GB/s >= {} alone {:.1}: split over {used} of {} parts",
                best.engine,
                best.alone_gbps,
                self.parts.len()
            )
        })
    }
}

/// One engine's part of a split transfer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TransferPart {
    /// What moves the part: `ce0`, `ce1`, ... (a stream each), `sm-write`, `sm-read`.
    pub engine: String,
    /// Bytes of each copy this part moves.
    pub bytes: u64,
    /// GB/s the part reached alone on the same copy size (the calibration).
    pub alone_gbps: f64,
}

/// A GPU of the run, `gpus[i]` being GPU index i.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BenchGpu {
    /// CUDA's device ordinal (reports before 2026-11-23 wrote the index here;
    /// they ran on every GPU, where the two agree).
    pub ordinal: CudaOrdinal,
    /// PCI address as CUDA reports it (`0000:00:06.0`).
    pub bdf: String,
    /// The device's name (`NVIDIA H200`).
    pub name: String,
    /// Compute capability, major and minor.
    pub compute_capability: [i32; 2],
    /// Device memory in bytes.
    pub memory_bytes: u64,
}

/// What was decided and measured for one ordered pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BenchPair {
    /// Source GPU index.
    pub src: GpuIndex,
    /// Destination GPU index.
    pub dst: GpuIndex,
    /// Path class as `nvidia-smi topo -m` would print it.
    pub class: String,
    /// The route peer requests take as the guest knows it: `local`, `nvlink`,
    /// `pcie-ats` (ATS on at both GPUs as the guest sees them: translated
    /// requests may go direct through a switch) or `pcie` (ATS off, absent or
    /// hidden in the VM; the host's `check` names the route). With
    /// `--host-plan FILE` the host plan's route follows: `pcie-switch`,
    /// `pcie-ats-switch`, `pcie-acs-redirect`, `pcie-root-complex`,
    /// `pcie-host-bridges`, `pcie-sockets`, ... Empty in runs recorded before
    /// it was kept.
    #[serde(default)]
    pub route: String,
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
    /// The machine's host name.
    pub hostname: String,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// CPU model name.
    pub cpu: String,
    /// Logical CPUs.
    pub cpus: usize,
    /// NVIDIA driver version (`580.159.04`).
    pub driver_version: String,
    /// cuDriverGetVersion, for example 13000.
    pub cuda_driver_api: i32,
    /// NCCL's version when libnccl loads (`2.28.3`).
    pub nccl_version: Option<String>,
}

/// How the numbers were taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Method {
    /// Timed samples per measurement.
    pub samples: u32,
    /// Copies of the verified, untimed warm-up.
    pub warmup_copies: u32,
    /// A spin kernel holds each stream while copies are queued, then releases them.
    pub spin_release: bool,
    /// The size the matrices are printed at.
    pub headline_bytes: u64,
    /// The size small-copy latency is printed at.
    pub latency_bytes: u64,
    /// What GB means in the tables: `1e9 bytes`, as nvbandwidth and nccl-tests count.
    pub gb_is: String,
    /// Peer access policy: "decision", "all" or "off".
    pub peer_access: String,
}

/// The whole bench report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BenchReport {
    /// Schema tag, `vp2p.bench/1`.
    pub schema: String,
    /// p2p-guest's version.
    pub tool_version: String,
    /// The run's name, shown by compare.
    pub label: String,
    /// Where it ran.
    pub machine: Machine,
    /// The GPUs, `gpus[i]` being GPU index i.
    pub gpus: Vec<BenchGpu>,
    /// Every ordered pair's class and peer-access decision.
    pub pairs: Vec<BenchPair>,
    /// How the numbers were taken.
    pub method: Method,
    /// Every measurement with all its samples.
    pub results: Vec<Measurement>,
    /// What the run had to say (skipped pairs, retaken samples, probe flags).
    pub notes: Vec<String>,
    /// The transports NCCL chose between GPUs in the `nccl` modes, read from
    /// its own debug output; empty without NCCL modes, with NCCL_DEBUG set by
    /// the user, or in runs recorded before it was kept.
    #[serde(default)]
    pub nccl_transports: Vec<NcclTransport>,
}

/// The transport NCCL used from one GPU to another in one mode, as its
/// channel lines say (`Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NcclTransport {
    /// `nccl` or `nccl-nop2p`.
    pub mode: Mode,
    /// Sending GPU (NCCL's rank, which is the run's GPU index).
    pub src: GpuIndex,
    /// Receiving GPU.
    pub dst: GpuIndex,
    /// Every distinct `via` text NCCL printed for the pair (`P2P/direct pointer`, `SHM/direct/direct`).
    pub via: Vec<String>,
}

impl BenchReport {
    /// The measurement of `mode`/`direction` from `src` to `dst` at `bytes`.
    pub fn find(
        &self,
        mode: Mode,
        direction: Direction,
        src: Option<GpuIndex>,
        dst: Option<GpuIndex>,
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
        let e = "sm".parse::<Mode>().unwrap_err();
        assert_eq!(e, ModeParseError("sm".into()));
        assert!(
            e.to_string()
                .starts_with("unknown mode 'sm' (one of ce, sm-read,"),
            "{e}"
        );
    }
}
