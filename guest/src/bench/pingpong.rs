//! One-way latency: a kernel on each GPU bounces a counter through the
//! other's memory; elapsed time over twice the rounds is one peer write seen
//! by a poll on the other side.

use p2p_report::bench::{Verification, GB};
use p2p_topology::GpuIndex;

use super::sampling::{Sampled, Timing};
use crate::cuda::memory::DeviceBuffer;
use crate::cuda::rig::{Lane, Rig};
use crate::cuda::CudaError;

/// SM cycles after which a pair whose writes do not arrive gives up (~10 s).
const TIMEOUT_CYCLES: i64 = 20_000_000_000;

/// Flags and results for one pair.
pub struct PingPong {
    flags: [DeviceBuffer; 2],
    results: [DeviceBuffer; 2],
}

impl PingPong {
    /// Flags and result words on GPUs `a` and `b`.
    pub fn new(rig: &Rig, a: GpuIndex, b: GpuIndex) -> Result<Self, CudaError> {
        Ok(Self {
            flags: [
                DeviceBuffer::new(rig.gpu(a), 256)?,
                DeviceBuffer::new(rig.gpu(b), 256)?,
            ],
            results: [
                DeviceBuffer::new(rig.gpu(a), 16)?,
                DeviceBuffer::new(rig.gpu(b), 16)?,
            ],
        })
    }

    /// Runs `rounds` round trips with `a` initiating. Both GPUs need peer
    /// access to each other. Every round's value is compared on the GPU that
    /// receives it (it waits for exactly that value); afterwards the host reads
    /// both flags and both round counters back and compares them.
    pub fn run(
        &self,
        rig: &Rig,
        a: GpuIndex,
        b: GpuIndex,
        rounds: u32,
    ) -> Result<PingResult, CudaError> {
        for buf in self.flags.iter().chain(self.results.iter()) {
            buf.fill_bytes(0)?;
        }
        // Responder first, so it is polling when the first write lands; the
        // initiator's kernel is timed with events around it.
        let (start, stop) = (rig.event(a)?, rig.event(a)?);
        for (side, gpu, peer, initiator) in [(1usize, b, 0usize, false), (0, a, 1, true)] {
            let lane = if initiator { Lane::OUT } else { Lane::IN };
            if initiator {
                rig.record(a, Lane::OUT, &start)?;
            }
            rig.kernels(gpu).pingpong(
                rig.stream(gpu, lane),
                &self.flags[side],
                &self.flags[peer],
                rounds,
                initiator,
                TIMEOUT_CYCLES,
                &self.results[side],
            )?;
            if initiator {
                rig.record(a, Lane::OUT, &stop)?;
            }
        }
        rig.synchronize(b, Lane::IN)?;
        rig.synchronize(a, Lane::OUT)?;
        let ms = start
            .elapsed_ms(&stop)
            .map_err(CudaError::at("cuEventElapsedTime", rig.ordinal(a)))?;
        let u64_at = |r: &[u8], i: usize| {
            r.get(i * 8..i * 8 + 8)
                .and_then(|w| w.try_into().ok())
                .map(u64::from_le_bytes)
        };
        let u32_at = |r: &[u8]| {
            r.get(..4)
                .and_then(|w| w.try_into().ok())
                .map(u32::from_le_bytes)
        };
        // What the host compares: each side's last flag (the peer's last write)
        // and each side's count of completed rounds.
        let (mut checked, mut bad) = (0u64, 0u64);
        let mut done = [0u64; 2];
        for (side, count) in done.iter_mut().enumerate() {
            let flag = u32_at(&self.flags[side].to_host()?);
            checked += 4;
            if flag != Some(rounds) {
                bad += 4;
            }
            let result = self.results[side].to_host()?;
            *count = u64_at(&result, 1).unwrap_or(u64::MAX);
            checked += 8;
            if *count != u64::from(rounds) {
                bad += 8;
            }
        }
        if done[0] != u64::from(rounds) {
            return Err(CudaError::Device {
                ordinal: rig.ordinal(a),
                what: format!(
                    "ping-pong with {b} (CUDA device {}) stopped after {} of {rounds} rounds: peer writes are not arriving",
                    rig.ordinal(b),
                    done[0]
                ),
            });
        }
        Ok(PingResult {
            seconds: f64::from(ms) / 1e3,
            // The GPUs compared one 4-byte value per round each.
            checked_bytes: checked + 2 * 4 * u64::from(rounds),
            mismatched_bytes: bad,
        })
    }
}

/// One ping-pong run: its time and what was compared.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PingResult {
    /// Seconds the initiator's kernel ran.
    pub seconds: f64,
    /// Bytes compared: the GPUs' per-round values and the host's read-back.
    pub checked_bytes: u64,
    /// Bytes of the read-back that differ from what the rounds must leave.
    pub mismatched_bytes: u64,
}

/// Ping-pong between two GPUs as the sampling loop sees it: flags zeroed by
/// each run, the GPUs compare every round's value, the host reads both flags
/// and both round counters back.
pub struct PingPongRun {
    /// The flags and results.
    pub pair: PingPong,
    /// The initiating GPU.
    pub a: GpuIndex,
    /// The responding GPU.
    pub b: GpuIndex,
    /// Round trips per sample.
    pub rounds: u32,
    last: Option<PingResult>,
}

impl PingPongRun {
    /// `rounds` round trips per sample between `a` and `b`.
    pub fn new(rig: &Rig, a: GpuIndex, b: GpuIndex, rounds: u32) -> Result<Self, CudaError> {
        Ok(Self {
            pair: PingPong::new(rig, a, b)?,
            a,
            b,
            rounds: rounds.max(1),
            last: None,
        })
    }
}

impl Sampled for PingPongRun {
    fn reps(&self) -> u32 {
        self.rounds
    }

    fn warmup_reps(&self) -> u32 {
        (self.rounds / 10).max(1)
    }

    fn prepare(&mut self, _rig: &Rig, _seed: u32) -> Result<(), CudaError> {
        // Each run zeroes the flags itself, right before its kernels.
        self.last = None;
        Ok(())
    }

    fn run(&mut self, rig: &Rig, reps: u32, _warm_up: bool) -> Result<Timing, CudaError> {
        let r = self.pair.run(rig, self.a, self.b, reps)?;
        self.last = Some(r);
        Ok(Timing {
            seconds: r.seconds,
            note: None,
        })
    }

    fn check(&mut self, _rig: &Rig, _seed: u32) -> Result<Verification, CudaError> {
        Ok(self.last.map_or(
            Verification {
                checked_bytes: 0,
                mismatches: 0,
            },
            |r| Verification {
                checked_bytes: r.checked_bytes,
                mismatches: r.mismatched_bytes,
            },
        ))
    }

    fn gbps(&self, seconds: f64) -> f64 {
        // Four bytes per one-way step.
        4.0 * 2.0 * f64::from(self.rounds) / seconds / GB
    }

    fn latency_us(&self, seconds: f64) -> f64 {
        seconds / (2.0 * f64::from(self.rounds)) * 1e6
    }
}
