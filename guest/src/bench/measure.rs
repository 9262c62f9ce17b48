//! Taking every measurement of a run: each job gets its [`Sampled`] (copies
//! of a transfer method, NCCL all-reduces, ping-pong) and goes through the
//! one sampling loop.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

use p2p_report::bench::{Direction, Measurement, Mode};
use p2p_topology::{ByteSize, GpuIndex};

use super::copies::CopyRun;
use super::nccl::{AllReduce, NcclRun};
use super::pingpong::PingPongRun;
use super::plan::{self, Job};
use super::sampling::{measurement, sample, Sampled};
use super::{BenchError, Buffers, Run};
use crate::cuda::{peer, CudaError};
use crate::transfer::{self, copies_for, Hold, Leg, PeerAccess, TransferMethod};

/// NCCL iterations per sample at most (large sizes would take long).
const NCCL_MAX_ITERS: u32 = 50;

fn label(job: &Job) -> String {
    match (job.src, job.dst) {
        (Some(s), Some(d)) => {
            let (dir, arrow) = match job.direction {
                Direction::Bi => ("bi", "<->"),
                Direction::Uni => ("uni", "->"),
            };
            format!("{} {dir} {s}{arrow}{d} {}", job.mode, ByteSize(job.bytes))
        }
        _ => format!("{} all GPUs {}", job.mode, ByteSize(job.bytes)),
    }
}

impl Run<'_> {
    pub(super) fn all(&mut self, jobs: &[Job]) -> Result<Vec<Measurement>, BenchError> {
        let copy_max = jobs
            .iter()
            .filter(|j| j.mode.is_copy())
            .map(|j| j.bytes)
            .max();
        let buffers = copy_max
            .map(|max| Buffers::new(&self.rig.gpus, max))
            .transpose()?;
        self.progress.start(jobs.len() as u64);
        let mut out = Vec::new();
        let mut skipped: Vec<String> = Vec::new();
        let mut all_reduce = None;
        let mut methods: BTreeMap<Mode, Box<dyn TransferMethod>> = BTreeMap::new();
        for job in jobs {
            let label = label(job);
            self.progress.step(&label);
            let m = match job.mode {
                Mode::Pingpong => {
                    let (s, d) = job.pair();
                    if !self.has_access(s, d, true) {
                        self.skip(&mut skipped, job);
                        continue;
                    }
                    self.set_access(s, d, PeerAccess::Required)?;
                    let mut run = PingPongRun::new(&self.rig, s, d, self.cfg.pingpong_rounds)?;
                    self.sampled(job, &mut run)?
                }
                Mode::Nccl | Mode::NcclNoP2p => {
                    if all_reduce.is_none() {
                        let max = jobs
                            .iter()
                            .filter(|j| j.mode == job.mode)
                            .map(|j| j.bytes)
                            .max()
                            .unwrap_or(job.bytes);
                        all_reduce = Some(AllReduce::new(&self.rig, max)?);
                    }
                    let ar = all_reduce
                        .as_mut()
                        .ok_or(BenchError::NoCuda("NCCL".into()))?;
                    let mut run = NcclRun {
                        all_reduce: ar,
                        bytes: job.bytes,
                        iters: copies_for(job.bytes).min(NCCL_MAX_ITERS),
                    };
                    self.sampled(job, &mut run)?
                }
                mode => {
                    let method = match methods.entry(mode) {
                        Entry::Occupied(e) => e.into_mut(),
                        Entry::Vacant(e) => match transfer::method(mode, &self.method_cfg) {
                            Some(m) => e.insert(m),
                            None => continue,
                        },
                    };
                    let bufs = buffers
                        .as_ref()
                        .ok_or(BenchError::NoCuda("buffers".into()))?;
                    match self.copy(bufs, method.as_mut(), job)? {
                        Some(m) => m,
                        None => {
                            self.skip(&mut skipped, job);
                            continue;
                        }
                    }
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

    fn skip(&self, skipped: &mut Vec<String>, job: &Job) {
        let (s, d) = job.pair();
        let msg = format!(
            "{} {s}->{d} skipped: peer access is off for the pair",
            job.mode
        );
        if !skipped.contains(&msg) {
            self.progress.note(&msg);
            skipped.push(msg);
        }
    }

    /// Whether the pair has peer access (both ways when `both`); a GPU with
    /// itself always has.
    fn has_access(&self, s: GpuIndex, d: GpuIndex, both: bool) -> bool {
        s == d || (self.access[s.0][d.0] && (!both || self.access[d.0][s.0]))
    }

    /// Peer access for the run of a method: off where it must be, else as decided.
    fn set_access(&self, s: GpuIndex, d: GpuIndex, want: PeerAccess) -> Result<(), CudaError> {
        if s == d {
            return Ok(());
        }
        for (x, y) in [(s, d), (d, s)] {
            let (a, b) = (self.rig.gpu(x), self.rig.gpu(y));
            if want == PeerAccess::Off || !self.access[x.0][y.0] {
                peer::disable(a, b)?;
            } else {
                peer::enable(a, b)?;
            }
        }
        Ok(())
    }

    /// The sampling loop on `m`, with the notes it leaves.
    fn sampled(&mut self, job: &Job, m: &mut dyn Sampled) -> Result<Measurement, BenchError> {
        let s = sample(m, &self.rig, self.cfg.samples, &mut self.seeds)?;
        for n in &s.notes {
            self.progress.note(n);
        }
        self.notes.extend(s.notes.iter().cloned());
        Ok(measurement(job, m, s))
    }

    /// Copies by `method` for `job`; None when the pair lacks the peer
    /// access the method requires.
    pub(super) fn copy(
        &mut self,
        bufs: &Buffers,
        method: &mut dyn TransferMethod,
        job: &Job,
    ) -> Result<Option<Measurement>, BenchError> {
        let (s, d) = job.pair();
        let needs = method.needs();
        let bi = job.direction == Direction::Bi;
        if needs.peer_access == PeerAccess::Required && !self.has_access(s, d, bi) {
            return Ok(None);
        }
        self.set_access(s, d, needs.peer_access)?;
        let mut legs = vec![Leg {
            src: s,
            dst: d,
            src_buf: &bufs.a[s.0],
            dst_buf: &bufs.b[d.0],
        }];
        if bi {
            legs.push(Leg {
                src: d,
                dst: s,
                src_buf: &bufs.a[d.0],
                dst_buf: &bufs.b[s.0],
            });
        }
        let per_copy = method.ops_per_copy(job.bytes);
        let mut copies = copies_for(job.bytes);
        if per_copy > 1 {
            // Keep copies of many operations inside the hold budget.
            copies = copies.min((plan::HOLD_BUDGET_OPS / per_copy).max(4) as u32);
        }
        let holdable = match needs.hold {
            Hold::Always => true,
            Hold::WithPeerAccess => self.has_access(s, d, true),
            Hold::Never => false,
        };
        let hold = holdable && per_copy * u64::from(copies) <= plan::HOLD_BUDGET_OPS;
        method.calibrate(&self.rig, &legs, job.bytes)?;
        let mut run = CopyRun {
            method,
            legs,
            bytes: job.bytes,
            copies,
            warmup: self.cfg.warmup,
            hold,
        };
        let m = self.sampled(job, &mut run)?;
        self.set_access(s, d, PeerAccess::Used)?;
        Ok(Some(m))
    }
}
