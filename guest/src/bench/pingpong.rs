//! One-way latency: a kernel on each GPU bounces a counter through the
//! other's memory; elapsed time over twice the rounds is one peer write seen
//! by a poll on the other side.

use std::ffi::c_void;

use super::rig::{Lane, Rig};
use crate::cuda::memory::DeviceBuffer;
use crate::cuda::CudaError;

/// SM cycles after which a pair whose writes do not arrive gives up (~10 s).
const TIMEOUT_CYCLES: i64 = 20_000_000_000;

/// Flags and results for one pair.
pub struct PingPong {
    flags: [DeviceBuffer; 2],
    results: [DeviceBuffer; 2],
}

impl PingPong {
    pub fn new(rig: &Rig, a: usize, b: usize) -> Result<Self, CudaError> {
        Ok(Self {
            flags: [
                DeviceBuffer::new(&rig.gpus[a], 256)?,
                DeviceBuffer::new(&rig.gpus[b], 256)?,
            ],
            results: [
                DeviceBuffer::new(&rig.gpus[a], 16)?,
                DeviceBuffer::new(&rig.gpus[b], 16)?,
            ],
        })
    }

    /// Runs `rounds` round trips with `a` initiating. Both GPUs need peer
    /// access to each other. Every round's value is compared on the GPU that
    /// receives it (it waits for exactly that value); afterwards the host reads
    /// both flags and both round counters back and compares them.
    pub fn run(&self, rig: &Rig, a: usize, b: usize, rounds: u32) -> Result<PingResult, CudaError> {
        for buf in self.flags.iter().chain(self.results.iter()) {
            buf.fill_bytes(0)?;
        }
        // Responder first, so it is polling when the first write lands; the
        // initiator's kernel is timed with events around it.
        let (start, stop) = (rig.event(a)?, rig.event(a)?);
        for (side, gpu, peer, initiator) in [(1usize, b, 0usize, 0i32), (0, a, 1, 1)] {
            let mut mine = self.flags[side].ptr;
            let mut peers = self.flags[peer].ptr;
            let mut n = rounds;
            let mut init = initiator;
            let mut timeout = TIMEOUT_CYCLES;
            let mut result = self.results[side].ptr;
            let mut params = [
                (&mut mine) as *mut u64 as *mut c_void,
                (&mut peers) as *mut u64 as *mut c_void,
                (&mut n) as *mut u32 as *mut c_void,
                (&mut init) as *mut i32 as *mut c_void,
                (&mut timeout) as *mut i64 as *mut c_void,
                (&mut result) as *mut u64 as *mut c_void,
            ];
            let lane = if initiator == 1 { Lane::Out } else { Lane::In };
            if initiator == 1 {
                start
                    .record(rig.stream(a, Lane::Out))
                    .map_err(CudaError::at("cuEventRecord", a))?;
            }
            rig.launch(gpu, lane, &rig.kernels[gpu].pingpong, 1, 32, &mut params)?;
            if initiator == 1 {
                stop.record(rig.stream(a, Lane::Out))
                    .map_err(CudaError::at("cuEventRecord", a))?;
            }
        }
        rig.synchronize(b, Lane::In)?;
        rig.synchronize(a, Lane::Out)?;
        let ms = start
            .elapsed_ms(&stop)
            .map_err(CudaError::at("cuEventElapsedTime", a))?;
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
                ordinal: a,
                what: format!(
                    "ping-pong with GPU {b} stopped after {} of {rounds} rounds: peer writes are not arriving",
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
    pub seconds: f64,
    /// Bytes compared: the GPUs' per-round values and the host's read-back.
    pub checked_bytes: u64,
    /// Bytes of the read-back that differ from what the rounds must leave.
    pub mismatched_bytes: u64,
}
