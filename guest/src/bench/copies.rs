//! Copies of one transfer method as the sampling loop sees them: every leg's
//! source filled with its pattern and its destination poisoned before a run,
//! the destination compared byte for byte after.

use p2p_report::bench::{TransferPart, Verification, GB};

use super::sampling::{Sampled, Timing};
use crate::cuda::rig::{Lane, Rig};
use crate::cuda::CudaError;
use crate::transfer::{timed, Leg, TransferMethod};
use crate::verify::POISON;

/// `copies` copies of `bytes` on every leg, by `method`.
pub struct CopyRun<'a> {
    /// How the bytes move.
    pub method: &'a mut dyn TransferMethod,
    /// One leg, or two for a bidirectional run.
    pub legs: Vec<Leg<'a>>,
    /// Bytes per copy.
    pub bytes: u64,
    /// Copies per sample.
    pub copies: u32,
    /// Copies of the warm-up.
    pub warmup: u32,
    /// Whether samples are queued behind spin kernels.
    pub hold: bool,
}

impl Sampled for CopyRun<'_> {
    fn reps(&self) -> u32 {
        self.copies
    }

    fn warmup_reps(&self) -> u32 {
        self.warmup
    }

    fn prepare(&mut self, rig: &Rig, seed: u32) -> Result<(), CudaError> {
        for (k, leg) in self.legs.iter().enumerate() {
            let s = seed.wrapping_add(k as u32);
            rig.fill(leg.src, Lane::OUT, leg.src_buf, self.bytes, s)?;
            rig.poison(leg.dst, Lane::IN, leg.dst_buf, self.bytes, POISON)?;
        }
        rig.synchronize_all()
    }

    fn run(&mut self, rig: &Rig, reps: u32, warm_up: bool) -> Result<Timing, CudaError> {
        let hold = self.hold && !warm_up;
        let t = timed(rig, self.method, &self.legs, self.bytes, reps, hold)?;
        Ok(Timing {
            seconds: t.seconds.into_iter().fold(0.0, f64::max),
            note: t
                .hold_failed
                .map(|why| format!("{why}; sample retaken without a hold")),
        })
    }

    fn check(&mut self, rig: &Rig, seed: u32) -> Result<Verification, CudaError> {
        let mut bad = 0;
        for (k, leg) in self.legs.iter().enumerate() {
            let s = seed.wrapping_add(k as u32);
            bad += rig.verify(leg.dst, Lane::IN, leg.dst_buf, self.bytes, s)?;
        }
        Ok(Verification {
            checked_bytes: self.bytes * self.legs.len() as u64,
            mismatches: bad,
        })
    }

    fn gbps(&self, seconds: f64) -> f64 {
        self.bytes as f64 * f64::from(self.copies) * self.legs.len() as f64 / seconds / GB
    }

    fn latency_us(&self, seconds: f64) -> f64 {
        seconds / f64::from(self.copies) * 1e6
    }

    fn parts(&self) -> Vec<TransferPart> {
        self.method.parts()
    }

    fn split_gbps(&self) -> Option<f64> {
        self.method.split_gbps()
    }
}
