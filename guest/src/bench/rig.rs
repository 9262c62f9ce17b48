//! The benchmark rig: every GPU with two streams ("out" issues what leaves
//! it, "in" what arrives), its kernels, and one page of mapped pinned memory
//! holding the release flag the spin kernels poll.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::{result, sys, CudaEvent, CudaFunction, CudaStream};
use p2p_kernels::BLOCK_THREADS;

use crate::cuda::memory::{DeviceBuffer, PinnedBuffer};
use crate::cuda::program::{self, Kernels};
use crate::cuda::{check, CudaError, Gpu};

/// Which of a GPU's two streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    Out = 0,
    In = 1,
}

/// SM cycles a spin kernel waits for release before giving up (about 5 s at
/// 2 GHz): a safety net against a host that cannot queue its work.
const SPIN_TIMEOUT_CYCLES: i64 = 10_000_000_000;

/// Control words in the pinned page: 0 is the release flag; 1 + stream index
/// records a spin timeout.
const CONTROL_WORDS: usize = 64;
/// Byte offset of the u64 slots where spin kernels leave the cycles they waited.
const WAITED_OFFSET: usize = CONTROL_WORDS * 4;

/// How SM copy kernels are launched: which variant, and the grid shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmCopy {
    /// Index into `p2p_kernels::entry::COPY_VARIANTS`.
    pub variant: usize,
    pub blocks_per_sm: u32,
    pub threads: u32,
}

impl Default for SmCopy {
    fn default() -> Self {
        // vp2p_copy_cs4, 4 x 1024: the best of `p2p-guest tune-sm` on 2x H200.
        Self {
            variant: 3,
            blocks_per_sm: 4,
            threads: 1024,
        }
    }
}

pub struct Rig {
    pub gpus: Vec<Gpu>,
    pub sm_copy: SmCopy,
    pub kernels: Vec<Kernels>,
    streams: Vec<[Arc<CudaStream>; 2]>,
    control: PinnedBuffer,
    counters: Vec<DeviceBuffer>,
    sms: Vec<u32>,
}

impl Rig {
    pub fn new(gpus: Vec<Gpu>) -> Result<Rig, CudaError> {
        // The control words live in pinned memory of the first GPU's context.
        if gpus.is_empty() {
            return Err(CudaError::NoGpu);
        }
        let kernels = program::load_all(&gpus)?;
        let mut streams = Vec::new();
        let mut counters = Vec::new();
        let mut sms = Vec::new();
        for g in &gpus {
            let call = |call, source| CudaError::Call {
                call,
                ordinal: g.ordinal,
                source,
            };
            let out = g.ctx.new_stream().map_err(|e| call("cuStreamCreate", e))?;
            let inn = g.ctx.new_stream().map_err(|e| call("cuStreamCreate", e))?;
            streams.push([out, inn]);
            counters.push(DeviceBuffer::new(g, 16)?);
            let n = g
                .ctx
                .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
                .map_err(|e| call("cuDeviceGetAttribute", e))?;
            sms.push(n.max(1) as u32);
        }
        let control = PinnedBuffer::new(&gpus[0], WAITED_OFFSET + CONTROL_WORDS * 8)?;
        Ok(Rig {
            gpus,
            sm_copy: SmCopy::default(),
            kernels,
            streams,
            control,
            counters,
            sms,
        })
    }

    pub fn stream(&self, gpu: usize, lane: Lane) -> &Arc<CudaStream> {
        &self.streams[gpu][lane as usize]
    }

    fn stream_index(gpu: usize, lane: Lane) -> usize {
        gpu * 2 + lane as usize
    }

    /// A timing event in `gpu`'s context.
    pub fn event(&self, gpu: usize) -> Result<CudaEvent, CudaError> {
        self.gpus[gpu]
            .ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(CudaError::at("cuEventCreate", gpu))
    }

    /// An event without timing, for ordering streams.
    pub fn sync_event(&self, gpu: usize) -> Result<CudaEvent, CudaError> {
        self.gpus[gpu]
            .ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
            .map_err(CudaError::at("cuEventCreate", gpu))
    }

    /// Blocks for a kernel covering `work` items on `gpu`: enough to fill it,
    /// never more than the work needs.
    pub fn grid_for(&self, gpu: usize, work: u64) -> u32 {
        let full = self.sms[gpu] * 4;
        let needed = work.div_ceil(u64::from(BLOCK_THREADS)).max(1);
        needed.min(u64::from(full)) as u32
    }

    /// Grid and block for an SM copy of `vecs` 16-byte vectors on `gpu`.
    pub fn copy_shape(&self, gpu: usize, vecs: u64) -> (u32, u32) {
        let t = self.sm_copy.threads;
        let full = self.sms[gpu] * self.sm_copy.blocks_per_sm;
        (
            vecs.div_ceil(u64::from(t)).clamp(1, u64::from(full)) as u32,
            t,
        )
    }

    /// The SM copy kernel in use on `gpu`.
    pub fn copy_kernel(&self, gpu: usize) -> &CudaFunction {
        let v = &self.kernels[gpu].copy_variants;
        &v[self.sm_copy.variant.min(v.len() - 1)].1
    }

    /// Launches `f` on `gpu`'s `lane` with raw parameter pointers.
    pub fn launch(
        &self,
        gpu: usize,
        lane: Lane,
        f: &CudaFunction,
        grid: u32,
        block: u32,
        params: &mut [*mut c_void],
    ) -> Result<(), CudaError> {
        crate::cuda::memory::bind(&self.gpus[gpu].ctx, gpu)?;
        let stream = self.stream(gpu, lane).cu_stream();
        // SAFETY: each parameter points at a live value of the kernel's declared
        // type (pointers and sizes as u64, seeds as u32); the call copies them.
        let launched = unsafe {
            result::launch_kernel(
                f.cu_function(),
                (grid, 1, 1),
                (block, 1, 1),
                0,
                stream,
                params,
            )
        };
        launched.map_err(CudaError::at("cuLaunchKernel", gpu))
    }

    /// Arms the release flag (streams that spin now wait).
    pub fn arm(&self) {
        for i in 0..CONTROL_WORDS {
            self.control.write_u32(i, 0);
            self.control.write_u64(WAITED_OFFSET / 8 + i, 0);
        }
    }

    /// Releases every spinning stream.
    pub fn release(&self) {
        self.control.write_u32(0, 1);
    }

    /// Queues a spin kernel that holds `gpu`'s `lane` until [`Rig::release`].
    pub fn hold(&self, gpu: usize, lane: Lane) -> Result<(), CudaError> {
        let mut flag: u64 = self.control.device;
        let mut timeout = SPIN_TIMEOUT_CYCLES;
        let idx = Self::stream_index(gpu, lane);
        let mut timed_out: u64 = self.control.device + 4 * (1 + idx) as u64;
        let mut waited: u64 = self.control.device + (WAITED_OFFSET + 8 * idx) as u64;
        let mut params = [
            (&mut flag) as *mut u64 as *mut c_void,
            (&mut timeout) as *mut i64 as *mut c_void,
            (&mut timed_out) as *mut u64 as *mut c_void,
            (&mut waited) as *mut u64 as *mut c_void,
        ];
        self.launch(gpu, lane, &self.kernels[gpu].spin, 1, 32, &mut params)
    }

    /// The (gpu, lane, cycles waited) of every spin kernel that gave up
    /// waiting since the last [`Rig::arm`].
    pub fn spin_timeouts(&self) -> Vec<(usize, &'static str, u64)> {
        (1..CONTROL_WORDS)
            .filter(|&i| self.control.read_u32(i) != 0)
            .map(|i| {
                let lane = if (i - 1) % 2 == 0 { "out" } else { "in" };
                (
                    (i - 1) / 2,
                    lane,
                    self.control.read_u64(WAITED_OFFSET / 8 + i - 1),
                )
            })
            .collect()
    }

    /// Fills `buf[..bytes]` with the pattern for `seed`, on `gpu`'s `lane`.
    pub fn fill(
        &self,
        gpu: usize,
        lane: Lane,
        buf: &DeviceBuffer,
        bytes: u64,
        seed: u32,
    ) -> Result<(), CudaError> {
        let (mut ptr, mut n, mut s) = (buf.ptr, bytes, seed);
        let mut params = [
            (&mut ptr) as *mut u64 as *mut c_void,
            (&mut n) as *mut u64 as *mut c_void,
            (&mut s) as *mut u32 as *mut c_void,
        ];
        let grid = self.grid_for(gpu, bytes);
        self.launch(
            gpu,
            lane,
            &self.kernels[gpu].fill,
            grid,
            BLOCK_THREADS,
            &mut params,
        )
    }

    /// Counts bytes of `buf[..bytes]` that differ from the pattern for `seed`.
    /// Synchronises `gpu`'s `lane`.
    pub fn verify(
        &self,
        gpu: usize,
        lane: Lane,
        buf: &DeviceBuffer,
        bytes: u64,
        seed: u32,
    ) -> Result<u64, CudaError> {
        let counter = &self.counters[gpu];
        crate::cuda::memory::bind(&self.gpus[gpu].ctx, gpu)?;
        // Initialise the counters on the stream the kernel runs on, so the
        // kernel cannot start before they are set.
        let stream = self.stream(gpu, lane).cu_stream();
        // SAFETY: the counter buffer holds 16 bytes: 8 for the mismatch count
        // (zeroed), 8 for the first bad index (all ones).
        let status = unsafe { sys::cuMemsetD8Async(counter.ptr, 0, 8, stream) };
        check(status, "cuMemsetD8Async", gpu)?;
        // SAFETY: as above, the second 8 bytes.
        let status = unsafe { sys::cuMemsetD8Async(counter.ptr + 8, 0xff, 8, stream) };
        check(status, "cuMemsetD8Async", gpu)?;
        let (mut data, mut n, mut s) = (buf.ptr, bytes, seed);
        let (mut bad, mut first) = (counter.ptr, counter.ptr + 8);
        let mut params = [
            (&mut data) as *mut u64 as *mut c_void,
            (&mut n) as *mut u64 as *mut c_void,
            (&mut s) as *mut u32 as *mut c_void,
            (&mut bad) as *mut u64 as *mut c_void,
            (&mut first) as *mut u64 as *mut c_void,
        ];
        let grid = self.grid_for(gpu, bytes);
        self.launch(
            gpu,
            lane,
            &self.kernels[gpu].verify,
            grid,
            BLOCK_THREADS,
            &mut params,
        )?;
        self.synchronize(gpu, lane)?;
        let out = counter.to_host()?;
        Ok(u64::from_le_bytes(
            out[0..8].try_into().unwrap_or([0xff; 8]),
        ))
    }

    /// Sets `buf[..bytes]` to `value` on `gpu`'s `lane` (poisoning a destination).
    pub fn poison(
        &self,
        gpu: usize,
        lane: Lane,
        buf: &DeviceBuffer,
        bytes: u64,
        value: u8,
    ) -> Result<(), CudaError> {
        crate::cuda::memory::bind(&self.gpus[gpu].ctx, gpu)?;
        // SAFETY: buf holds at least `bytes` bytes (callers size buffers for
        // the largest transfer); the stream belongs to the current context.
        let status = unsafe {
            sys::cuMemsetD8Async(
                buf.ptr,
                value,
                bytes as usize,
                self.stream(gpu, lane).cu_stream(),
            )
        };
        check(status, "cuMemsetD8Async", gpu)
    }

    pub fn synchronize(&self, gpu: usize, lane: Lane) -> Result<(), CudaError> {
        self.stream(gpu, lane)
            .synchronize()
            .map_err(CudaError::at("cuStreamSynchronize", gpu))
    }

    /// Waits for every stream of every GPU.
    pub fn synchronize_all(&self) -> Result<(), CudaError> {
        for g in 0..self.gpus.len() {
            self.synchronize(g, Lane::Out)?;
            self.synchronize(g, Lane::In)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_rig_is_an_error_not_a_panic() {
        // What `bench --modes nccl-nop2p` reached on a machine whose CUDA saw
        // no GPU: the in-process part had no GPU to build a rig on.
        assert!(matches!(Rig::new(Vec::new()), Err(CudaError::NoGpu)));
    }
}
