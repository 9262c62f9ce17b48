//! `p2p-guest bench`: copy-engine, SM-kernel, host-staged and driver copies
//! between every ordered GPU pair, NCCL all-reduce, and ping-pong latency,
//! with the method of DESIGN.md "Benchmark method": spin-held streams,
//! warm-up, several samples, median and spread, every transfer verified.

pub mod machine;
mod nccl;
mod pingpong;
pub mod plan;
mod rig;
mod transfer;

use std::path::PathBuf;

use p2p_shared::report::bench::{
    BenchGpu, BenchPair, BenchReport, Direction, Measurement, Method, Mode, Stats, Verification,
    BENCH_SCHEMA, GB,
};

use crate::cuda::{peer, CudaError, Gpu};
use crate::decide::Verdict;
use crate::probe::{self, ProbeOptions};
use plan::{copies_for, Job};
use rig::{Lane, Rig};
use transfer::{staged_ops, timed, Leg, Staging};

/// Why a bench run could not go on.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("CUDA is not available: {0}")]
    NoCuda(String),
    #[error("{0}")]
    Probe(#[from] probe::sysfs::ProbeError),
    #[error(transparent)]
    Cuda(#[from] CudaError),
    #[error("need at least two GPUs for {0}; CUDA sees {1}")]
    TooFewGpus(String, usize),
    #[error("--gpus names ordinal {0}, but CUDA sees {1} GPU(s)")]
    NoSuchGpu(usize, usize),
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
    All,
    /// Only pairs the decision allows.
    Allowed,
}

/// Everything a run needs to know.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub sysfs_root: PathBuf,
    pub modes: Vec<Mode>,
    pub directions: Vec<Direction>,
    pub sizes: Vec<u64>,
    pub pairs: PairSelection,
    pub peer_access: PeerPolicy,
    pub gpus: Option<Vec<usize>>,
    pub samples: u32,
    pub warmup: u32,
    pub headline_bytes: u64,
    pub latency_bytes: u64,
    pub staged_chunk: usize,
    pub staged_depth: usize,
    pub pingpong_rounds: u32,
    pub label: String,
}

/// Progress of a long run, drawn by the caller.
pub trait Progress {
    fn start(&self, total: u64);
    fn step(&self, what: &str);
    fn note(&self, what: &str);
    fn finish(&self);
}

/// Per-GPU source ("a") and destination ("b") buffers, sized for the largest copy.
struct Buffers {
    a: Vec<crate::cuda::memory::DeviceBuffer>,
    b: Vec<crate::cuda::memory::DeviceBuffer>,
}

struct Run<'p> {
    cfg: BenchConfig,
    rig: Rig,
    staging: Staging,
    access: Vec<Vec<bool>>,
    seed: u32,
    notes: Vec<String>,
    progress: &'p dyn Progress,
}

/// Runs the benchmark and returns the full report.
pub fn run(cfg: BenchConfig, progress: &dyn Progress) -> Result<BenchReport, BenchError> {
    let (probe, cuda) = probe::probe(&cfg.sysfs_root, &ProbeOptions { use_driver: true })?;
    let cuda =
        cuda.ok_or_else(|| BenchError::NoCuda(probe.cuda.why.clone().unwrap_or_default()))?;
    let all = cuda.gpus.len();
    let chosen: Vec<Gpu> = match &cfg.gpus {
        Some(list) => list
            .iter()
            .map(|&o| {
                cuda.gpus
                    .get(o)
                    .cloned()
                    .ok_or(BenchError::NoSuchGpu(o, all))
            })
            .collect::<Result<_, _>>()?,
        None => cuda.gpus.clone(),
    };
    let pairwise = cfg.modes.iter().any(|m| m.is_pairwise());
    if chosen.len() < 2 && (pairwise || cfg.modes.contains(&Mode::Nccl)) {
        return Err(BenchError::TooFewGpus("peer copies".into(), chosen.len()));
    }

    // Decide and apply peer access for every ordered pair.
    let n = chosen.len();
    let mut access = vec![vec![false; n]; n];
    let mut pairs_info = Vec::new();
    for i in 0..n {
        for j in 0..n {
            if i == j {
                continue;
            }
            let (a, b) = (&chosen[i], &chosen[j]);
            let q = peer::query(a, b)?;
            let decision = probe.decision(a.bdf, b.bdf);
            let allowed = decision.is_some_and(|d| d.verdict == Verdict::Enable);
            let (on, why) = match cfg.peer_access {
                PeerPolicy::Off => (false, "--peer-access off".to_string()),
                PeerPolicy::All if q.can_access => (true, "--peer-access all".to_string()),
                PeerPolicy::All => (false, "CUDA cannot access this peer".to_string()),
                PeerPolicy::Decision if allowed && q.can_access => (
                    true,
                    decision.map(|d| d.reasons.join("; ")).unwrap_or_default(),
                ),
                PeerPolicy::Decision if allowed => {
                    (false, "decision allows it, CUDA cannot".to_string())
                }
                PeerPolicy::Decision => (
                    false,
                    decision.map_or("no decision".to_string(), |d| d.reasons.join("; ")),
                ),
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
            pairs_info.push(BenchPair {
                src: i,
                dst: j,
                class,
                cuda_can_access: q.can_access,
                peer_access: on,
                why,
            });
        }
    }
    let ordered: Vec<(usize, usize)> = (0..n)
        .flat_map(|i| (0..n).map(move |j| (i, j)))
        .filter(|(i, j)| i != j)
        .filter(|&(i, j)| {
            cfg.pairs == PairSelection::All
                || probe
                    .decision(chosen[i].bdf, chosen[j].bdf)
                    .is_some_and(|d| d.verdict == Verdict::Enable)
        })
        .collect();

    let rig = Rig::new(chosen.clone())?;
    let jobs = plan::jobs(&cfg.modes, &cfg.directions, &ordered, &cfg.sizes);
    let mut run = Run {
        staging: Staging::new(cfg.staged_chunk, cfg.staged_depth),
        cfg: cfg.clone(),
        rig,
        access,
        seed: 1,
        notes: Vec::new(),
        progress,
    };
    let results = run.all(&jobs)?;

    let machine = machine::describe(cuda.driver_api, nccl::version());
    let gpus = chosen
        .iter()
        .enumerate()
        .map(|(i, g)| BenchGpu {
            ordinal: i,
            bdf: g.bdf.to_string(),
            name: g.name.clone(),
            compute_capability: [g.compute_capability.0, g.compute_capability.1],
            memory_bytes: g.memory_bytes,
        })
        .collect();
    let mut notes = run.notes;
    notes.extend(probe.flags.iter().map(|f| f.message.clone()));
    Ok(BenchReport {
        schema: BENCH_SCHEMA.into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        label: cfg.label.clone(),
        machine,
        gpus,
        pairs: pairs_info,
        method: Method {
            samples: cfg.samples,
            warmup_copies: cfg.warmup,
            spin_release: true,
            headline_bytes: cfg.headline_bytes,
            latency_bytes: cfg.latency_bytes,
            gb_is: "1e9 bytes".into(),
            peer_access: format!("{:?}", cfg.peer_access).to_lowercase(),
        },
        results,
        notes,
    })
}

impl Run<'_> {
    fn all(&mut self, jobs: &[Job]) -> Result<Vec<Measurement>, BenchError> {
        let copy_max = jobs
            .iter()
            .filter(|j| !matches!(j.mode, Mode::Nccl | Mode::NcclNoP2p | Mode::Pingpong))
            .map(|j| j.bytes)
            .max();
        let buffers = match copy_max {
            Some(max) => Some(Buffers {
                a: self
                    .rig
                    .gpus
                    .iter()
                    .map(|g| crate::cuda::memory::DeviceBuffer::new(g, max as usize))
                    .collect::<Result<_, _>>()?,
                b: self
                    .rig
                    .gpus
                    .iter()
                    .map(|g| crate::cuda::memory::DeviceBuffer::new(g, max as usize))
                    .collect::<Result<_, _>>()?,
            }),
            None => None,
        };
        self.progress.start(jobs.len() as u64);
        let mut out = Vec::new();
        let mut skipped: Vec<String> = Vec::new();
        let mut allreduce = None;
        for job in jobs {
            let label = match (job.src, job.dst) {
                (Some(s), Some(d)) => format!(
                    "{} {} GPU{s}{}GPU{d} {}",
                    job.mode,
                    if job.direction == Direction::Bi {
                        "bi"
                    } else {
                        "uni"
                    },
                    if job.direction == Direction::Bi {
                        "<->"
                    } else {
                        "->"
                    },
                    plan::size_label(job.bytes)
                ),
                _ => format!("{} all GPUs {}", job.mode, plan::size_label(job.bytes)),
            };
            self.progress.step(&label);
            if let (Some(s), Some(d)) = (job.src, job.dst) {
                let needs_both = job.direction == Direction::Bi || job.mode == Mode::Pingpong;
                let has = self.access[s][d] && (!needs_both || self.access[d][s]);
                if job.mode.needs_peer_access() && job.mode != Mode::Ce && !has {
                    let msg = format!(
                        "{} GPU{s}->GPU{d} skipped: peer access is off for the pair",
                        job.mode
                    );
                    if !skipped.contains(&msg) {
                        self.progress.note(&msg);
                        skipped.push(msg);
                    }
                    continue;
                }
            }
            let m = match job.mode {
                Mode::Pingpong => self.pingpong(job)?,
                Mode::Nccl | Mode::NcclNoP2p => {
                    if allreduce.is_none() {
                        let max = jobs
                            .iter()
                            .filter(|j| j.mode == job.mode)
                            .map(|j| j.bytes)
                            .max()
                            .unwrap_or(job.bytes);
                        allreduce = Some(nccl::AllReduce::new(&self.rig, max)?);
                    }
                    let ar = allreduce
                        .as_mut()
                        .ok_or(BenchError::NoCuda("NCCL".into()))?;
                    self.nccl(ar, job)?
                }
                _ => {
                    let bufs = buffers
                        .as_ref()
                        .ok_or(BenchError::NoCuda("buffers".into()))?;
                    self.copy(bufs, job)?
                }
            };
            if !m.verification.ok() {
                self.progress.note(&format!(
                    "{label}: VERIFY FAILED ({} bad bytes)",
                    m.verification.mismatches
                ));
            }
            out.push(m);
        }
        self.progress.finish();
        self.notes.extend(skipped);
        Ok(out)
    }

    fn next_seed(&mut self) -> u32 {
        self.seed = self.seed.wrapping_add(0x9e37_79b9);
        self.seed
    }

    /// Peer access for the driver path must be off; elsewhere as decided.
    fn set_access(&self, s: usize, d: usize, driver: bool) -> Result<(), CudaError> {
        for (x, y) in [(s, d), (d, s)] {
            let (a, b) = (&self.rig.gpus[x], &self.rig.gpus[y]);
            if driver || !self.access[x][y] {
                peer::disable(a, b)?;
            } else {
                peer::enable(a, b)?;
            }
        }
        Ok(())
    }

    fn copy(&mut self, bufs: &Buffers, job: &Job) -> Result<Measurement, BenchError> {
        let (s, d) = (job.src.unwrap_or(0), job.dst.unwrap_or(1));
        self.set_access(s, d, job.mode == Mode::Driver)?;
        let mut legs = vec![Leg {
            mode: job.mode,
            src: s,
            dst: d,
            src_buf: &bufs.a[s],
            dst_buf: &bufs.b[d],
        }];
        if job.direction == Direction::Bi {
            legs.push(Leg {
                mode: job.mode,
                src: d,
                dst: s,
                src_buf: &bufs.a[d],
                dst_buf: &bufs.b[s],
            });
        }
        let copies = copies_for(job.bytes);
        let ops = match job.mode {
            Mode::Staged => staged_ops(job.bytes, self.staging.chunk_bytes()) * u64::from(copies),
            _ => u64::from(copies),
        };
        let hold = ops <= plan::HOLD_BUDGET_OPS;
        for leg in &legs {
            self.rig
                .fill(leg.src, Lane::Out, leg.src_buf, job.bytes, 7)?;
        }
        self.rig.synchronize_all()?;
        if self.cfg.warmup > 0 {
            timed(
                &self.rig,
                &mut self.staging,
                &legs,
                job.bytes,
                self.cfg.warmup,
                false,
            )?;
        }
        let mut secs = Vec::new();
        let mut bad = 0;
        for _ in 0..self.cfg.samples {
            let seed = self.next_seed();
            for (k, leg) in legs.iter().enumerate() {
                self.rig.fill(
                    leg.src,
                    Lane::Out,
                    leg.src_buf,
                    job.bytes,
                    seed.wrapping_add(k as u32),
                )?;
                self.rig
                    .poison(leg.dst, Lane::In, leg.dst_buf, job.bytes, 0xa5)?;
            }
            self.rig.synchronize_all()?;
            let t = timed(&self.rig, &mut self.staging, &legs, job.bytes, copies, hold)?;
            if let Some(why) = t.hold_failed {
                self.progress
                    .note(&format!("{why}; sample retaken without a hold"));
                self.notes.push(why);
            }
            secs.push(t.seconds.into_iter().fold(0.0, f64::max));
            for (k, leg) in legs.iter().enumerate() {
                bad += self.rig.verify(
                    leg.dst,
                    Lane::In,
                    leg.dst_buf,
                    job.bytes,
                    seed.wrapping_add(k as u32),
                )?;
            }
        }
        self.set_access(s, d, false)?;
        let moved = job.bytes as f64 * f64::from(copies) * legs.len() as f64;
        Ok(measurement(
            job,
            copies,
            secs,
            |t| moved / t / GB,
            |t| t / f64::from(copies) * 1e6,
            Verification {
                checked_bytes: job.bytes * legs.len() as u64 * u64::from(self.cfg.samples),
                mismatches: bad,
            },
        ))
    }

    fn pingpong(&mut self, job: &Job) -> Result<Measurement, BenchError> {
        let (s, d) = (job.src.unwrap_or(0), job.dst.unwrap_or(1));
        self.set_access(s, d, false)?;
        let pp = pingpong::PingPong::new(&self.rig, s, d)?;
        let rounds = self.cfg.pingpong_rounds;
        pp.run(&self.rig, s, d, (rounds / 10).max(1))?;
        let mut secs = Vec::new();
        for _ in 0..self.cfg.samples {
            secs.push(pp.run(&self.rig, s, d, rounds)?);
        }
        let steps = 2.0 * f64::from(rounds);
        Ok(measurement(
            job,
            rounds,
            secs,
            |t| 4.0 * steps / t / GB,
            |t| t / steps * 1e6,
            Verification {
                checked_bytes: 4 * 2 * u64::from(rounds) * u64::from(self.cfg.samples),
                mismatches: 0,
            },
        ))
    }

    fn nccl(&mut self, ar: &mut nccl::AllReduce, job: &Job) -> Result<Measurement, BenchError> {
        let iters = copies_for(job.bytes).min(50);
        ar.timed(&self.rig, job.bytes, 2)?;
        let mut secs = Vec::new();
        for _ in 0..self.cfg.samples {
            secs.push(ar.timed(&self.rig, job.bytes, iters)?);
        }
        let bad = ar.verify(&self.rig, job.bytes)?;
        let ranks = ar.ranks();
        let per = |t: f64| t / f64::from(iters);
        Ok(measurement(
            job,
            iters,
            secs,
            |t| nccl::bus_gbps(job.bytes, per(t), ranks),
            |t| per(t) * 1e6,
            Verification {
                checked_bytes: (job.bytes / 4).max(1) * 4 * ranks as u64,
                mismatches: bad,
            },
        ))
    }
}

fn measurement(
    job: &Job,
    copies: u32,
    secs: Vec<f64>,
    gbps: impl Fn(f64) -> f64,
    latency_us: impl Fn(f64) -> f64,
    verification: Verification,
) -> Measurement {
    let g: Vec<f64> = secs.iter().map(|&t| gbps(t)).collect();
    let l: Vec<f64> = secs.iter().map(|&t| latency_us(t)).collect();
    let zero = Stats {
        median: 0.0,
        min: 0.0,
        max: 0.0,
        mean: 0.0,
        spread_pct: 0.0,
    };
    Measurement {
        mode: job.mode,
        direction: job.direction,
        src: job.src,
        dst: job.dst,
        bytes: job.bytes,
        copies,
        gbps: Stats::of(&g).unwrap_or(zero),
        latency_us: Stats::of(&l).unwrap_or(zero),
        sample_seconds: secs,
        verification,
    }
}
