//! NCCL all-reduce (sum of floats) across every GPU from one process, with
//! bus bandwidth as nccl-tests defines it: algbw * 2(n-1)/n.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};
use cudarc::nccl::result as nccl;
use cudarc::nccl::safe::{Comm, ReduceOp};
use p2p_report::bench::Verification;
use p2p_topology::{CudaOrdinal, GpuIndex};

use super::sampling::{Sampled, Timing};
use crate::cuda::memory::DeviceBuffer;
use crate::cuda::rig::{Lane, Rig};
use crate::cuda::CudaError;

/// Why NCCL could not be used.
fn nccl_err(what: &str, e: impl std::fmt::Debug) -> CudaError {
    CudaError::Device {
        ordinal: CudaOrdinal(0),
        what: format!("NCCL {what}: {e:?}"),
    }
}

/// Communicators and buffers for every rank.
pub struct AllReduce {
    comms: Vec<Comm>,
    send: Vec<CudaSlice<f32>>,
    recv: Vec<CudaSlice<f32>>,
    streams: Vec<Arc<CudaStream>>,
}

/// NCCL's version as "2.28.3".
pub fn version() -> Option<String> {
    if !crate::cuda::nccl_present() {
        return None;
    }
    let v = nccl::get_nccl_version().ok()?;
    Some(format!("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100))
}

impl AllReduce {
    /// One communicator per GPU; buffers for `max_bytes` per rank, where rank
    /// r's element i holds r + 1 + (i % 7).
    pub fn new(rig: &Rig, max_bytes: u64) -> Result<Self, CudaError> {
        if !crate::cuda::nccl_present() {
            return Err(nccl_err(
                "library",
                "libnccl.so is not installed or not in the loader path",
            ));
        }
        let streams: Vec<Arc<CudaStream>> = rig
            .indices()
            .map(|g| Arc::clone(rig.stream(g, Lane::OUT)))
            .collect();
        let comms =
            Comm::from_devices(streams.clone()).map_err(|e| nccl_err("ncclCommInitAll", e))?;
        let count = (max_bytes / 4).max(1) as usize;
        let mut send = Vec::new();
        let mut recv = Vec::new();
        for (r, s) in streams.iter().enumerate() {
            let host: Vec<f32> = (0..count)
                .map(|i| (r + 1) as f32 + (i % 7) as f32)
                .collect();
            let call = CudaError::at("cuMemAlloc", rig.ordinal(GpuIndex(r)));
            send.push(s.clone_htod(&host).map_err(call)?);
            let call = CudaError::at("cuMemAlloc", rig.ordinal(GpuIndex(r)));
            recv.push(s.alloc_zeros::<f32>(count).map_err(call)?);
        }
        rig.synchronize_all()?;
        Ok(Self {
            comms,
            send,
            recv,
            streams,
        })
    }

    /// `iters` all-reduces of `bytes` per rank; returns the slowest rank's seconds.
    pub fn timed(&mut self, rig: &Rig, bytes: u64, iters: u32) -> Result<f64, CudaError> {
        let count = (bytes / 4).max(1) as usize;
        let mut marks = Vec::new();
        for g in rig.indices().take(self.comms.len()) {
            let (start, stop) = (rig.event(g)?, rig.event(g)?);
            start
                .record(&self.streams[g.0])
                .map_err(|e| nccl_err("event", e))?;
            marks.push((start, stop));
        }
        for _ in 0..iters {
            nccl::group_start().map_err(|e| nccl_err("ncclGroupStart", e))?;
            for (r, comm) in self.comms.iter().enumerate() {
                let src = self.send[r].slice(0..count);
                let mut dst = self.recv[r].slice_mut(0..count);
                comm.all_reduce(&src, &mut dst, &ReduceOp::Sum)
                    .map_err(|e| nccl_err("ncclAllReduce", e))?;
            }
            nccl::group_end().map_err(|e| nccl_err("ncclGroupEnd", e))?;
        }
        let mut worst = 0f64;
        for (g, (start, stop)) in marks.iter().enumerate() {
            stop.record(&self.streams[g])
                .map_err(|e| nccl_err("event", e))?;
            let ms = start.elapsed_ms(stop).map_err(CudaError::at(
                "cuEventElapsedTime",
                rig.ordinal(GpuIndex(g)),
            ))?;
            worst = worst.max(f64::from(ms) / 1e3);
        }
        Ok(worst)
    }

    /// Elements of every rank's result that differ from the expected sum.
    pub fn verify(&self, rig: &Rig, bytes: u64) -> Result<u64, CudaError> {
        let count = (bytes / 4).max(1);
        let ranks = self.comms.len() as u32;
        let mut bad_total = 0;
        for g in rig.indices().take(self.comms.len()) {
            let counter = DeviceBuffer::new(rig.gpu(g), 8)?;
            counter.fill_bytes(0)?;
            let grid = rig.grid_for(g, count);
            rig.kernels(g).reduce_check(
                &self.streams[g.0],
                grid,
                &self.recv[g.0],
                count,
                ranks,
                &counter,
            )?;
            rig.synchronize(g, Lane::OUT)?;
            let v = counter.to_host()?;
            bad_total += u64::from_le_bytes(v[..8].try_into().unwrap_or([0xff; 8]));
        }
        Ok(bad_total)
    }

    /// Every rank sends `block_bytes` to every other rank and receives as
    /// much from each, all in one NCCL group (an all-to-all made of
    /// ncclSend/ncclRecv), so NCCL connects every ordered pair; then every
    /// received block is read back and checked against what its sender wrote.
    pub fn exchange_every_pair(
        &mut self,
        rig: &Rig,
        block_bytes: u64,
    ) -> Result<PairExchange, CudaError> {
        let n = self.comms.len();
        let count = (block_bytes / 4).max(1) as usize;
        // Rank r's block for peer p holds what `pair_value` says, so a block
        // landing at the wrong rank or from the wrong sender is caught.
        let mut send = Vec::with_capacity(n);
        let mut recv = Vec::with_capacity(n);
        for (r, s) in self.streams.iter().enumerate() {
            let host: Vec<f32> = (0..n * count)
                .map(|i| pair_value(r, i / count, i % count))
                .collect();
            let call = CudaError::at("cuMemAlloc", rig.ordinal(GpuIndex(r)));
            send.push(s.clone_htod(&host).map_err(call)?);
            let call = CudaError::at("cuMemAlloc", rig.ordinal(GpuIndex(r)));
            recv.push(s.alloc_zeros::<f32>(n * count).map_err(call)?);
        }
        rig.synchronize_all()?;
        nccl::group_start().map_err(|e| nccl_err("ncclGroupStart", e))?;
        for (r, comm) in self.comms.iter().enumerate() {
            for p in (0..n).filter(|&p| p != r) {
                let block = p * count..(p + 1) * count;
                comm.send(&send[r].slice(block.clone()), p as i32)
                    .map_err(|e| nccl_err("ncclSend", e))?;
                comm.recv(&mut recv[r].slice_mut(block), p as i32)
                    .map_err(|e| nccl_err("ncclRecv", e))?;
            }
        }
        nccl::group_end().map_err(|e| nccl_err("ncclGroupEnd", e))?;
        let mut mismatches = 0;
        for (r, s) in self.streams.iter().enumerate() {
            let host = s
                .clone_dtoh(&recv[r])
                .map_err(CudaError::at("cuMemcpyDtoH", rig.ordinal(GpuIndex(r))))?;
            for (i, v) in host.iter().enumerate() {
                let from = i / count;
                if from != r && *v != pair_value(from, r, i % count) {
                    mismatches += 1;
                }
            }
        }
        Ok(PairExchange {
            transfers: n * n.saturating_sub(1),
            mismatches,
        })
    }

    /// Ranks (one per GPU).
    pub fn ranks(&self) -> usize {
        self.comms.len()
    }

    /// Zeroes the first `bytes` of every rank's result, on its stream.
    pub fn clear_results(&mut self, bytes: u64) -> Result<(), CudaError> {
        let count = (bytes / 4).max(1) as usize;
        for (r, recv) in self.recv.iter_mut().enumerate() {
            let mut part = recv.slice_mut(0..count);
            self.streams[r]
                .memset_zeros(&mut part)
                .map_err(|e| nccl_err("result reset (cuMemsetD8Async)", e))?;
        }
        Ok(())
    }

    /// Result bytes one verification compares (every rank's).
    pub fn result_bytes(&self, bytes: u64) -> u64 {
        (bytes / 4).max(1) * 4 * self.comms.len() as u64
    }
}

/// What [`AllReduce::exchange_every_pair`] moved and found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairExchange {
    /// Ordered pairs that exchanged a block: n(n-1).
    pub transfers: usize,
    /// Received elements that differ from what their sender wrote.
    pub mismatches: u64,
}

/// Element `i` of the block rank `from` sends to rank `to`: distinct per
/// ordered pair and exact in f32.
fn pair_value(from: usize, to: usize, i: usize) -> f32 {
    (from * 64 + to) as f32 * 8.0 + (i % 7) as f32
}

/// nccl-tests' bus bandwidth for all-reduce.
pub fn bus_gbps(bytes: u64, seconds: f64, ranks: usize) -> f64 {
    let algbw = bytes as f64 / seconds / 1e9;
    algbw * 2.0 * (ranks as f64 - 1.0) / ranks as f64
}

/// All-reduces of one size as the sampling loop sees them: results zeroed
/// before a run (no sum of the inputs is zero), every rank's checked after.
pub struct NcclRun<'a> {
    /// The communicators and buffers.
    pub all_reduce: &'a mut AllReduce,
    /// Bytes per rank.
    pub bytes: u64,
    /// All-reduces per sample.
    pub iters: u32,
}

/// All-reduces in the warm-up.
const WARMUP_ITERS: u32 = 2;

impl Sampled for NcclRun<'_> {
    fn reps(&self) -> u32 {
        self.iters
    }

    fn warmup_reps(&self) -> u32 {
        WARMUP_ITERS
    }

    fn prepare(&mut self, _rig: &Rig, _seed: u32) -> Result<(), CudaError> {
        self.all_reduce.clear_results(self.bytes)
    }

    fn run(&mut self, rig: &Rig, reps: u32, _warm_up: bool) -> Result<Timing, CudaError> {
        Ok(Timing {
            seconds: self.all_reduce.timed(rig, self.bytes, reps)?,
            note: None,
        })
    }

    fn check(&mut self, rig: &Rig, _seed: u32) -> Result<Verification, CudaError> {
        Ok(Verification {
            checked_bytes: self.all_reduce.result_bytes(self.bytes),
            mismatches: 4 * self.all_reduce.verify(rig, self.bytes)?,
        })
    }

    fn gbps(&self, seconds: f64) -> f64 {
        bus_gbps(
            self.bytes,
            seconds / f64::from(self.iters),
            self.all_reduce.ranks(),
        )
    }

    fn latency_us(&self, seconds: f64) -> f64 {
        seconds / f64::from(self.iters) * 1e6
    }
}
