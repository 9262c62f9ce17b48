//! The one sampling loop every measurement goes through, copies, NCCL and
//! ping-pong alike: a verified warm-up, then samples, each from fresh inputs
//! (a new seed), timed, and checked after. What differs between modes is a
//! [`Sampled`]: how it prepares, runs, checks, and turns seconds into rates.

use p2p_report::bench::{Measurement, Stats, TransferPart, Verification};

use super::plan::Job;
use crate::cuda::rig::Rig;
use crate::cuda::CudaError;

/// One sample's time, and a note when something about it must be said (a
/// spin hold that gave up and was retaken without holding).
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// Seconds for all the sample's repetitions.
    pub seconds: f64,
    /// What the report should say about the sample.
    pub note: Option<String>,
}

/// Something measured the bench's way.
pub trait Sampled {
    /// Repetitions per timed sample (copies, collectives, round trips).
    fn reps(&self) -> u32;
    /// Repetitions of the warm-up; 0 skips it.
    fn warmup_reps(&self) -> u32;
    /// Sets the inputs for `seed` and poisons what the run must overwrite,
    /// so a run that moves nothing cannot pass.
    fn prepare(&mut self, rig: &Rig, seed: u32) -> Result<(), CudaError>;
    /// Runs `reps` repetitions (`warm_up`: untimed use, no spin hold).
    fn run(&mut self, rig: &Rig, reps: u32, warm_up: bool) -> Result<Timing, CudaError>;
    /// What the last run left, compared with what `seed` must give.
    fn check(&mut self, rig: &Rig, seed: u32) -> Result<Verification, CudaError>;
    /// GB/s of a sample of [`Sampled::reps`] that took `seconds`.
    fn gbps(&self, seconds: f64) -> f64;
    /// Microseconds per repetition of such a sample.
    fn latency_us(&self, seconds: f64) -> f64;
    /// The parts of a split transfer, for the report.
    fn parts(&self) -> Vec<TransferPart> {
        Vec::new()
    }
    /// What the split itself moved in the calibration, for the report.
    fn split_gbps(&self) -> Option<f64> {
        None
    }
}

/// Seeds for successive runs: every run gets a pattern of its own.
#[derive(Debug, Clone)]
pub struct Seeds(u32);

impl Default for Seeds {
    fn default() -> Self {
        Seeds(1)
    }
}

impl Seeds {
    /// The next seed (a golden-ratio step, so neighbours differ in every byte).
    pub fn next_seed(&mut self) -> u32 {
        self.0 = self.0.wrapping_add(0x9e37_79b9);
        self.0
    }
}

/// What the loop gathered: every sample's seconds, everything compared, and
/// the notes the samples left.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampling {
    /// Seconds per timed sample.
    pub seconds: Vec<f64>,
    /// Bytes compared over the warm-up and every sample, and how many differed.
    pub verification: Verification,
    /// Notes to report.
    pub notes: Vec<String>,
}

fn add(total: &mut Verification, v: Verification) {
    total.checked_bytes += v.checked_bytes;
    total.mismatches += v.mismatches;
}

/// The loop: a warm-up (prepared and checked like a sample, not timed), then
/// `samples` timed samples.
pub fn sample(
    m: &mut dyn Sampled,
    rig: &Rig,
    samples: u32,
    seeds: &mut Seeds,
) -> Result<Sampling, CudaError> {
    let mut out = Sampling {
        seconds: Vec::new(),
        verification: Verification {
            checked_bytes: 0,
            mismatches: 0,
        },
        notes: Vec::new(),
    };
    if m.warmup_reps() > 0 {
        let seed = seeds.next_seed();
        m.prepare(rig, seed)?;
        m.run(rig, m.warmup_reps(), true)?;
        add(&mut out.verification, m.check(rig, seed)?);
    }
    for _ in 0..samples {
        let seed = seeds.next_seed();
        m.prepare(rig, seed)?;
        let t = m.run(rig, m.reps(), false)?;
        out.seconds.push(t.seconds);
        out.notes.extend(t.note);
        add(&mut out.verification, m.check(rig, seed)?);
    }
    Ok(out)
}

/// The report's measurement of `job` from what the loop gathered.
pub fn measurement(job: &Job, m: &dyn Sampled, s: Sampling) -> Measurement {
    let zero = Stats {
        median: 0.0,
        min: 0.0,
        max: 0.0,
        mean: 0.0,
        spread_pct: 0.0,
    };
    let stats = |f: &dyn Fn(f64) -> f64| {
        let v: Vec<f64> = s.seconds.iter().map(|&t| f(t)).collect();
        Stats::of(&v).unwrap_or(zero)
    };
    Measurement {
        mode: job.mode,
        direction: job.direction,
        src: job.src,
        dst: job.dst,
        bytes: job.bytes,
        copies: m.reps(),
        gbps: stats(&|t| m.gbps(t)),
        latency_us: stats(&|t| m.latency_us(t)),
        sample_seconds: s.seconds,
        verification: s.verification,
        parts: m.parts(),
        split_gbps: m.split_gbps(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_never_repeat_soon() {
        let mut s = Seeds::default();
        let v: std::collections::BTreeSet<u32> = (0..10_000).map(|_| s.next_seed()).collect();
        assert_eq!(v.len(), 10_000);
    }
}
