//! `p2p-guest bench`: copy-engine, SM-kernel, host-staged and driver copies
//! between every ordered GPU pair, NCCL all-reduce, and ping-pong latency,
//! with the method of DESIGN.md "Benchmark method": spin-held streams,
//! warm-up, several samples, median and spread, every transfer verified.

mod copies;
pub mod host_plan;
pub mod machine;
mod measure;
pub mod nccl;
mod pingpong;
pub mod plan;
mod sampling;

use std::path::PathBuf;

use p2p_report::bench::{BenchGpu, BenchPair, BenchReport, Direction, Method, Mode, BENCH_SCHEMA};
use p2p_topology::{ByteSize, CudaOrdinal, GpuIndex};

use crate::cuda::memory::DeviceBuffer;
use crate::cuda::rig::Rig;
pub use crate::cuda::rig::SmCopy;
use crate::cuda::{peer, CudaError, Gpu};
use crate::decide::Verdict;
use crate::probe::{self, ProbeOptions};
use crate::transfer::{self, MethodConfig};
use plan::Job;
use sampling::Seeds;

/// Why a bench run could not go on.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The driver (or something CUDA needs) is missing.
    #[error("CUDA is not available: {0}")]
    NoCuda(String),
    /// The probe could not read the guest's PCI tree.
    #[error(transparent)]
    Probe(#[from] probe::sysfs::ProbeError),
    /// A CUDA call failed.
    #[error(transparent)]
    Cuda(#[from] CudaError),
    /// Pairwise modes asked for with fewer than two GPUs.
    #[error("need at least two GPUs for {0}; CUDA sees {1} (--pairs self measures each GPU with itself)")]
    TooFewGpus(String, usize),
    /// `--gpus` named an ordinal CUDA does not have.
    #[error("--gpus names CUDA device {0}, but CUDA sees {1} GPU(s)")]
    NoSuchGpu(CudaOrdinal, usize),
    /// Nothing to measure on.
    #[error("CUDA sees no GPU (or --gpus selected none): nothing to measure")]
    NoGpu,
}

/// Which pairs get peer access for the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PeerPolicy {
    /// Exactly the pairs the probe's decision allows (and CUDA can do).
    Decision,
    /// Every pair CUDA can do.
    All,
    /// None: every copy takes the driver's staged path.
    Off,
}

/// Which ordered pairs are measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PairSelection {
    /// Every ordered pair of distinct GPUs.
    All,
    /// Only pairs the decision allows.
    Allowed,
    /// Each GPU with itself: device-local copies (nvbandwidth's
    /// device_local_copy), the methods' ceiling without a link.
    #[value(name = "self")]
    Own,
}

/// Everything a run needs to know.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// The guest's sysfs, for the probe.
    pub sysfs_root: PathBuf,
    /// Modes to measure.
    pub modes: Vec<Mode>,
    /// Directions to measure.
    pub directions: Vec<Direction>,
    /// Copy sizes.
    pub sizes: Vec<ByteSize>,
    /// Which pairs.
    pub pairs: PairSelection,
    /// Which pairs get peer access.
    pub peer_access: PeerPolicy,
    /// CUDA devices to use; None for all.
    pub gpus: Option<Vec<CudaOrdinal>>,
    /// Timed samples per measurement.
    pub samples: u32,
    /// Copies of the (verified, untimed) warm-up.
    pub warmup: u32,
    /// The size the bandwidth matrices are printed at.
    pub headline_bytes: ByteSize,
    /// The size the latency matrices are printed at.
    pub latency_bytes: ByteSize,
    /// Chunk of the staged pipeline.
    pub staged_chunk: ByteSize,
    /// Chunks in flight in the staged pipeline.
    pub staged_depth: usize,
    /// Round trips per ping-pong sample.
    pub pingpong_rounds: u32,
    /// SM copy kernel variant and grid shape.
    pub sm_copy: SmCopy,
    /// A name for the run, shown by compare.
    pub label: String,
    /// The host plan's route of each pair (`--host-plan FILE`); None: the
    /// route is what the guest sees alone.
    pub host_routes: Option<host_plan::HostRoutes>,
}

/// Progress of a long run, drawn by the caller.
pub trait Progress {
    /// The run has `total` steps.
    fn start(&self, total: u64);
    /// One step begins.
    fn step(&self, what: &str);
    /// Something to tell the user now.
    fn note(&self, what: &str);
    /// The run ended.
    fn finish(&self);
}

/// Per-GPU source ("a") and destination ("b") buffers, sized for the largest copy.
struct Buffers {
    a: Vec<DeviceBuffer>,
    b: Vec<DeviceBuffer>,
}

impl Buffers {
    fn new(gpus: &[Gpu], bytes: u64) -> Result<Self, CudaError> {
        let alloc = || {
            gpus.iter()
                .map(|g| DeviceBuffer::new(g, bytes as usize))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Self {
            a: alloc()?,
            b: alloc()?,
        })
    }
}

/// A prepared run: GPUs, peer access applied, kernels loaded.
struct Run<'p> {
    cfg: BenchConfig,
    rig: Rig,
    method_cfg: MethodConfig,
    access: Vec<Vec<bool>>,
    seeds: Seeds,
    notes: Vec<String>,
    progress: &'p dyn Progress,
}

/// What setup learnt besides the prepared run.
struct Setup<'p> {
    run: Run<'p>,
    pairs: Vec<BenchPair>,
    /// Ordered pairs to measure, after --pairs.
    ordered: Vec<(GpuIndex, GpuIndex)>,
    driver_api: i32,
    probe_flags: Vec<String>,
}

/// Probes, opens the GPUs, decides and applies peer access, loads kernels.
fn setup(cfg: BenchConfig, progress: &dyn Progress) -> Result<Setup<'_>, BenchError> {
    let (probe, cuda) = probe::probe(
        &cfg.sysfs_root,
        &ProbeOptions {
            use_driver: true,
            gpu_class: None,
        },
    )?;
    let cuda =
        cuda.ok_or_else(|| BenchError::NoCuda(probe.cuda.why.clone().unwrap_or_default()))?;
    let all = cuda.gpus.len();
    let chosen: Vec<Gpu> = match &cfg.gpus {
        Some(list) => list
            .iter()
            .map(|&o| {
                cuda.gpus
                    .get(o.0)
                    .cloned()
                    .ok_or(BenchError::NoSuchGpu(o, all))
            })
            .collect::<Result<_, _>>()?,
        None => cuda.gpus.clone(),
    };
    let needs_two = cfg
        .modes
        .iter()
        .any(|m| m.is_pairwise() || *m == Mode::Nccl);
    if chosen.len() < 2 && needs_two && cfg.pairs != PairSelection::Own {
        return Err(BenchError::TooFewGpus("peer copies".into(), chosen.len()));
    }
    if chosen.is_empty() {
        // Only nccl-nop2p asked (it runs in a child) on a machine where CUDA
        // sees no GPU: say so instead of building an empty rig.
        return Err(BenchError::NoGpu);
    }

    let n = chosen.len();
    let mut access = vec![vec![false; n]; n];
    let mut pairs = Vec::new();
    for i in 0..n {
        for j in (0..n).filter(|&j| j != i) {
            let (a, b) = (&chosen[i], &chosen[j]);
            let q = peer::query(a, b)?;
            let decision = probe.decision(a.bdf, b.bdf);
            let allowed = decision.is_some_and(|d| d.verdict == Verdict::Enable);
            let reasons = decision.map_or("no decision".to_string(), |d| d.reasons.join("; "));
            let (on, why) = match cfg.peer_access {
                PeerPolicy::Off => (false, "--peer-access off".to_string()),
                PeerPolicy::All if q.can_access => (true, "--peer-access all".to_string()),
                PeerPolicy::All => (false, "CUDA cannot access this peer".to_string()),
                PeerPolicy::Decision if allowed && q.can_access => (true, reasons),
                PeerPolicy::Decision if allowed => {
                    (false, "decision allows it, CUDA cannot".to_string())
                }
                PeerPolicy::Decision => (false, reasons),
            };
            if on {
                peer::enable(a, b)?;
            } else {
                peer::disable(a, b)?;
            }
            access[i][j] = on;
            let class = decision
                .and_then(|d| d.nvlinks)
                .map_or_else(|| "PCIe".to_string(), |c| format!("NV{c}"));
            let route = route_with_host(&probe, cfg.host_routes.as_ref(), a.bdf, b.bdf);
            pairs.push(BenchPair {
                src: GpuIndex(i),
                dst: GpuIndex(j),
                class,
                route,
                cuda_can_access: q.can_access,
                peer_access: on,
                why,
            });
        }
    }
    let allowed = |i: usize, j: usize| {
        probe
            .decision(chosen[i].bdf, chosen[j].bdf)
            .is_some_and(|d| d.verdict == Verdict::Enable)
    };
    let ordered: Vec<(GpuIndex, GpuIndex)> = match cfg.pairs {
        PairSelection::Own => (0..n).map(|i| (GpuIndex(i), GpuIndex(i))).collect(),
        sel => (0..n)
            .flat_map(|i| (0..n).map(move |j| (i, j)))
            .filter(|(i, j)| i != j)
            .filter(|&(i, j)| sel == PairSelection::All || allowed(i, j))
            .map(|(i, j)| (GpuIndex(i), GpuIndex(j)))
            .collect(),
    };
    if cfg.pairs == PairSelection::Own {
        pairs.extend((0..n).map(|i| BenchPair {
            src: GpuIndex(i),
            dst: GpuIndex(i),
            class: "local".into(),
            route: "local".into(),
            cuda_can_access: true,
            peer_access: false,
            why: "device-local copy (--pairs self)".into(),
        }));
    }
    let mut rig = Rig::new(chosen)?;
    rig.sm_copy = cfg.sm_copy;
    Ok(Setup {
        run: Run {
            method_cfg: MethodConfig {
                staged_chunk: cfg.staged_chunk,
                staged_depth: cfg.staged_depth,
            },
            cfg,
            rig,
            access,
            seeds: Seeds::default(),
            notes: Vec::new(),
            progress,
        },
        pairs,
        ordered,
        driver_api: cuda.driver_api,
        probe_flags: probe.flags.iter().map(|f| f.message.clone()).collect(),
    })
}

/// Runs the benchmark and returns the full report.
pub fn run(cfg: BenchConfig, progress: &dyn Progress) -> Result<BenchReport, BenchError> {
    let Setup {
        mut run,
        pairs,
        ordered,
        driver_api,
        probe_flags,
    } = setup(cfg.clone(), progress)?;
    let sizes: Vec<u64> = cfg.sizes.iter().map(|s| s.0).collect();
    let jobs = plan::jobs(&cfg.modes, &cfg.directions, &ordered, &sizes);
    let results = run.all(&jobs)?;
    let gpus = run
        .rig
        .gpus
        .iter()
        .map(|g| BenchGpu {
            ordinal: g.ordinal,
            bdf: g.bdf.to_string(),
            name: g.name.clone(),
            compute_capability: [g.compute_capability.0, g.compute_capability.1],
            memory_bytes: g.memory_bytes,
        })
        .collect();
    let mut notes = run.notes;
    notes.extend(probe_flags);
    Ok(BenchReport {
        schema: BENCH_SCHEMA.into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        label: cfg.label.clone(),
        machine: machine::describe(driver_api, nccl::version()),
        gpus,
        pairs,
        method: Method {
            samples: cfg.samples,
            warmup_copies: cfg.warmup,
            spin_release: true,
            headline_bytes: cfg.headline_bytes.0,
            latency_bytes: cfg.latency_bytes.0,
            gb_is: "1e9 bytes".into(),
            peer_access: format!("{:?}", cfg.peer_access).to_lowercase(),
        },
        results,
        notes,
        nccl_transports: Vec::new(),
    })
}

/// One point of an SM copy tuning sweep.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct TunePoint {
    /// The copy kernel variant.
    pub variant: &'static str,
    /// Blocks per SM.
    pub blocks_per_sm: u32,
    /// Threads per block.
    pub threads: u32,
    /// sm-read or sm-write.
    pub mode: Mode,
    /// Median GB/s.
    pub gbps: f64,
    /// Every sample's bytes arrived.
    pub verified: bool,
}

/// Measures sm-read and sm-write from the first ordered pair at `cfg.headline_bytes`
/// for every kernel variant and grid shape given; for choosing the defaults.
pub fn tune_sm(
    cfg: BenchConfig,
    blocks_per_sm: &[u32],
    threads: &[u32],
    progress: &dyn Progress,
) -> Result<Vec<TunePoint>, BenchError> {
    let Setup {
        mut run, ordered, ..
    } = setup(cfg.clone(), progress)?;
    let &(s, d) = ordered
        .first()
        .ok_or(BenchError::TooFewGpus("tuning".into(), 1))?;
    let bytes = cfg.headline_bytes.0;
    let bufs = Buffers::new(&run.rig.gpus, bytes)?;
    let variants = p2p_kernels::copy::VARIANTS;
    progress.start((variants.len() * blocks_per_sm.len() * threads.len() * 2) as u64);
    let mut out = Vec::new();
    for (v, name) in variants.iter().enumerate() {
        for &b in blocks_per_sm {
            for &t in threads {
                run.rig.sm_copy = SmCopy {
                    variant: v,
                    blocks_per_sm: b,
                    threads: t,
                };
                for mode in [Mode::SmRead, Mode::SmWrite] {
                    progress.step(&format!("{name} {b}x{t} {mode}"));
                    let job = Job {
                        mode,
                        direction: Direction::Uni,
                        src: Some(s),
                        dst: Some(d),
                        bytes,
                    };
                    let mut method = transfer::method(mode, &run.method_cfg)
                        .ok_or(BenchError::NoCuda("SM copy".into()))?;
                    let Some(m) = run.copy(&bufs, method.as_mut(), &job)? else {
                        continue;
                    };
                    out.push(TunePoint {
                        variant: name,
                        blocks_per_sm: b,
                        threads: t,
                        mode,
                        gbps: m.gbps.median,
                        verified: m.verification.ok(),
                    });
                }
            }
        }
    }
    progress.finish();
    Ok(out)
}

/// The route of a pair ([`BenchPair::route`]): with a host plan that holds
/// the pair, `pcie-` (or `pcie-ats-` where the guest sees ATS on at both)
/// followed by the host route's name ([`host_plan::route_name`]); NVLink
/// stays `nvlink`; otherwise what the guest knows alone ([`route_of`]).
pub fn route_with_host(
    probe: &crate::probe::report::ProbeReport,
    host: Option<&host_plan::HostRoutes>,
    a: p2p_topology::Bdf,
    b: p2p_topology::Bdf,
) -> String {
    let guest = route_of(probe, a, b);
    match host.and_then(|h| h.route(a, b)) {
        Some(r) if guest != "nvlink" => format!("{guest}-{}", host_plan::route_name(r)),
        _ => guest,
    }
}

/// The route of a pair as the guest knows it ([`BenchPair::route`]).
pub fn route_of(
    probe: &crate::probe::report::ProbeReport,
    a: p2p_topology::Bdf,
    b: p2p_topology::Bdf,
) -> String {
    if probe.decision(a, b).is_some_and(|d| d.nvlinks.is_some()) {
        return "nvlink".into();
    }
    let ats_on = |x| {
        probe.gpus.iter().any(|g| {
            g.bdf == x
                && g.pcie
                    .as_ref()
                    .is_some_and(|p| p.ats == crate::probe::pcie::AtsView::On)
        })
    };
    if ats_on(a) && ats_on(b) {
        "pcie-ats".into()
    } else {
        "pcie".into()
    }
}
