//! NCCL all-reduce (sum of floats) across every GPU from one process, with
//! bus bandwidth as nccl-tests defines it: algbw * 2(n-1)/n.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};
use cudarc::nccl::result as nccl;
use cudarc::nccl::safe::{Comm, ReduceOp};
use p2p_kernels::BLOCK_THREADS;

use super::rig::{Lane, Rig};
use crate::cuda::CudaError;

/// Why NCCL could not be used.
fn nccl_err(what: &str, e: impl std::fmt::Debug) -> CudaError {
    CudaError::Device {
        ordinal: 0,
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
        let streams: Vec<Arc<CudaStream>> = (0..rig.gpus.len())
            .map(|g| Arc::clone(rig.stream(g, Lane::Out)))
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
            let call = |e| CudaError::Call {
                call: "cuMemAlloc",
                ordinal: r,
                source: e,
            };
            send.push(s.clone_htod(&host).map_err(call)?);
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
        for g in 0..self.comms.len() {
            let (start, stop) = (rig.event(g)?, rig.event(g)?);
            start
                .record(&self.streams[g])
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
            let ms = start
                .elapsed_ms(stop)
                .map_err(CudaError::at("cuEventElapsedTime", g))?;
            worst = worst.max(f64::from(ms) / 1e3);
        }
        Ok(worst)
    }

    /// Elements of every rank's result that differ from the expected sum.
    pub fn verify(&self, rig: &Rig, bytes: u64) -> Result<u64, CudaError> {
        let count = (bytes / 4).max(1);
        let ranks = self.comms.len() as u32;
        let mut bad_total = 0;
        for g in 0..self.comms.len() {
            let counter = crate::cuda::memory::DeviceBuffer::new(&rig.gpus[g], 8)?;
            counter.fill_bytes(0)?;
            let (slice_ptr, _guard) =
                cudarc::driver::DevicePtr::device_ptr(&self.recv[g], &self.streams[g]);
            let (mut data, mut n, mut r, mut bad) = (slice_ptr, count, ranks, counter.ptr);
            let mut params = [
                (&mut data) as *mut u64 as *mut std::ffi::c_void,
                (&mut n) as *mut u64 as *mut std::ffi::c_void,
                (&mut r) as *mut u32 as *mut std::ffi::c_void,
                (&mut bad) as *mut u64 as *mut std::ffi::c_void,
            ];
            let grid = rig.grid_for(g, count);
            rig.launch(
                g,
                Lane::Out,
                &rig.kernels[g].reduce_check,
                grid,
                BLOCK_THREADS,
                &mut params,
            )?;
            rig.synchronize(g, Lane::Out)?;
            let v = counter.to_host()?;
            bad_total += u64::from_le_bytes(v[..8].try_into().unwrap_or([0xff; 8]));
        }
        Ok(bad_total)
    }

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
                .map_err(CudaError::at("cuMemsetD8Async", r))?;
        }
        Ok(())
    }

    /// Result bytes one verification compares (every rank's).
    pub fn result_bytes(&self, bytes: u64) -> u64 {
        (bytes / 4).max(1) * 4 * self.comms.len() as u64
    }
}

/// nccl-tests' bus bandwidth for all-reduce.
pub fn bus_gbps(bytes: u64, seconds: f64, ranks: usize) -> f64 {
    let algbw = bytes as f64 / seconds / 1e9;
    algbw * 2.0 * (ranks as f64 - 1.0) / ranks as f64
}
