//! Taking one measurement: copies (every copy mode, one or two directions),
//! ping-pong, and NCCL all-reduce, each sampled, timed and verified.

use p2p_shared::report::bench::{Direction, Measurement, Mode, Stats, Verification, GB};

use super::nccl;
use super::pingpong;
use super::plan::{self, copies_for, Job};
use super::rig::Lane;
use super::transfer::{staged_ops, timed, Leg};
use super::{BenchError, Buffers, Run};
use crate::cuda::{peer, CudaError};

impl Run<'_> {
    pub(super) fn all(&mut self, jobs: &[Job]) -> Result<Vec<Measurement>, BenchError> {
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

    pub(super) fn copy(&mut self, bufs: &Buffers, job: &Job) -> Result<Measurement, BenchError> {
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
        let mut copies = copies_for(job.bytes);
        if job.mode == Mode::Staged {
            // Keep small staged copies inside the hold budget.
            let per_copy = staged_ops(job.bytes, self.staging.chunk_bytes());
            copies = copies.min((plan::HOLD_BUDGET_OPS / per_copy).max(4) as u32);
        }
        let ops = match job.mode {
            Mode::Staged => staged_ops(job.bytes, self.staging.chunk_bytes()) * u64::from(copies),
            _ => u64::from(copies),
        };
        // Without peer access (the driver mode, or ce on a pair whose access
        // is off) the driver's staged path waits for the stream at enqueue
        // time, so a held stream would block the host until the hold gives up.
        let staged_by_driver = job.mode == Mode::Driver
            || (job.mode == Mode::Ce && !(self.access[s][d] && self.access[d][s]));
        let hold = ops <= plan::HOLD_BUDGET_OPS && !staged_by_driver;
        let mut bad = 0;
        let mut checked = 0;
        if self.cfg.warmup > 0 {
            // Warm-up copies are verified like the samples: the destination
            // is poisoned first and compared with the source pattern after.
            let seed = self.next_seed();
            self.prepare(&legs, job.bytes, seed)?;
            timed(
                &self.rig,
                &mut self.staging,
                &legs,
                job.bytes,
                self.cfg.warmup,
                false,
            )?;
            bad += self.check(&legs, job.bytes, seed)?;
            checked += job.bytes * legs.len() as u64;
        }
        let mut secs = Vec::new();
        for _ in 0..self.cfg.samples {
            let seed = self.next_seed();
            self.prepare(&legs, job.bytes, seed)?;
            let t = timed(&self.rig, &mut self.staging, &legs, job.bytes, copies, hold)?;
            if let Some(why) = t.hold_failed {
                self.progress
                    .note(&format!("{why}; sample retaken without a hold"));
                self.notes.push(why);
            }
            secs.push(t.seconds.into_iter().fold(0.0, f64::max));
            bad += self.check(&legs, job.bytes, seed)?;
            checked += job.bytes * legs.len() as u64;
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
                checked_bytes: checked,
                mismatches: bad,
            },
        ))
    }

    /// Fills every leg's source with the pattern for `seed` (+ leg) and
    /// poisons its destination, so a copy that moves nothing cannot pass.
    fn prepare(&self, legs: &[Leg<'_>], bytes: u64, seed: u32) -> Result<(), CudaError> {
        for (k, leg) in legs.iter().enumerate() {
            let s = seed.wrapping_add(k as u32);
            self.rig.fill(leg.src, Lane::Out, leg.src_buf, bytes, s)?;
            self.rig
                .poison(leg.dst, Lane::In, leg.dst_buf, bytes, 0xa5)?;
        }
        self.rig.synchronize_all()
    }

    /// Bytes of every leg's destination that differ from its source pattern.
    fn check(&self, legs: &[Leg<'_>], bytes: u64, seed: u32) -> Result<u64, CudaError> {
        let mut bad = 0;
        for (k, leg) in legs.iter().enumerate() {
            let s = seed.wrapping_add(k as u32);
            bad += self.rig.verify(leg.dst, Lane::In, leg.dst_buf, bytes, s)?;
        }
        Ok(bad)
    }

    fn pingpong(&mut self, job: &Job) -> Result<Measurement, BenchError> {
        let (s, d) = (job.src.unwrap_or(0), job.dst.unwrap_or(1));
        self.set_access(s, d, false)?;
        let pp = pingpong::PingPong::new(&self.rig, s, d)?;
        let rounds = self.cfg.pingpong_rounds;
        let warm = pp.run(&self.rig, s, d, (rounds / 10).max(1))?;
        let (mut checked, mut bad) = (warm.checked_bytes, warm.mismatched_bytes);
        let mut secs = Vec::new();
        for _ in 0..self.cfg.samples {
            let r = pp.run(&self.rig, s, d, rounds)?;
            secs.push(r.seconds);
            checked += r.checked_bytes;
            bad += r.mismatched_bytes;
        }
        let steps = 2.0 * f64::from(rounds);
        Ok(measurement(
            job,
            rounds,
            secs,
            |t| 4.0 * steps / t / GB,
            |t| t / steps * 1e6,
            Verification {
                checked_bytes: checked,
                mismatches: bad,
            },
        ))
    }

    fn nccl(&mut self, ar: &mut nccl::AllReduce, job: &Job) -> Result<Measurement, BenchError> {
        let iters = copies_for(job.bytes).min(50);
        // Every run, warm-up included, starts from zeroed results (no sum of
        // the inputs is zero) and is checked against the expected sums after.
        ar.clear_results(job.bytes)?;
        ar.timed(&self.rig, job.bytes, 2)?;
        let mut bad = 4 * ar.verify(&self.rig, job.bytes)?;
        let mut checked = ar.result_bytes(job.bytes);
        let mut secs = Vec::new();
        for _ in 0..self.cfg.samples {
            ar.clear_results(job.bytes)?;
            secs.push(ar.timed(&self.rig, job.bytes, iters)?);
            bad += 4 * ar.verify(&self.rig, job.bytes)?;
            checked += ar.result_bytes(job.bytes);
        }
        let ranks = ar.ranks();
        let per = |t: f64| t / f64::from(iters);
        Ok(measurement(
            job,
            iters,
            secs,
            |t| nccl::bus_gbps(job.bytes, per(t), ranks),
            |t| per(t) * 1e6,
            Verification {
                checked_bytes: checked,
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
