//! The rig of a run (`bench`, `probe --verify`): every GPU with its streams
//! ("lanes"), its kernels, and one page of mapped pinned memory holding the
//! release flag the spin kernels poll. GPUs are addressed by [`GpuIndex`] (their place in the run);
//! errors name the CUDA ordinal.

use std::sync::Arc;

use cudarc::driver::{sys, CudaEvent, CudaStream};
use p2p_kernels::BLOCK_THREADS;
use p2p_topology::{CudaOrdinal, GpuIndex};

use crate::cuda::kernels::Kernels;
use crate::cuda::memory::{DeviceBuffer, PinnedBuffer};
use crate::cuda::{program, stream, CudaError, Gpu};

/// One of a GPU's streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lane(u8);

impl Lane {
    /// What leaves the GPU: copies it issues, kernels that write a peer.
    pub const OUT: Lane = Lane(0);
    /// What arrives: kernels that read a peer, the staged path's uploads.
    pub const IN: Lane = Lane(1);
    /// Extra streams per GPU for split transfers (one per copy engine driven).
    pub const EXTRA: usize = 4;
    const COUNT: usize = 2 + Self::EXTRA;

    /// Extra stream `k` (0..[`Lane::EXTRA`]).
    pub fn extra(k: usize) -> Lane {
        Lane(2 + k.min(Self::EXTRA - 1) as u8)
    }

    fn index(self) -> usize {
        usize::from(self.0)
    }
}

impl std::fmt::Display for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            0 => f.write_str("out"),
            1 => f.write_str("in"),
            k => write!(f, "extra{}", k - 2),
        }
    }
}

/// SM cycles a spin kernel waits for release before giving up (about 5 s at
/// 2 GHz): a safety net against a host that cannot queue its work.
const SPIN_TIMEOUT_CYCLES: i64 = 10_000_000_000;

/// How SM copy kernels are launched: which variant, and the grid shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmCopy {
    /// Index into `p2p_kernels::copy::VARIANTS`.
    pub variant: usize,
    /// Blocks per SM.
    pub blocks_per_sm: u32,
    /// Threads per block.
    pub threads: u32,
}

impl Default for SmCopy {
    fn default() -> Self {
        // vp2p_copy_cs4, 4 x 1024: the best of `p2p-guest tune-sm` on 2x H200.
        Self {
            variant: p2p_kernels::copy::DEFAULT,
            blocks_per_sm: 4,
            threads: 1024,
        }
    }
}

/// The GPUs of a run with their streams, kernels and spin control page.
pub struct Rig {
    /// The GPUs, `gpus[i]` being GPU index i.
    pub gpus: Vec<Gpu>,
    /// How SM copies are launched.
    pub sm_copy: SmCopy,
    kernels: Vec<Kernels>,
    streams: Vec<Vec<Arc<CudaStream>>>,
    /// Word 0: release flag; word 1 + slot: that stream's spin timed out;
    /// then a u64 per slot with the cycles its spin waited.
    control: PinnedBuffer,
    counters: Vec<DeviceBuffer>,
    sms: Vec<u32>,
    copy_engines: Vec<u32>,
}

impl Rig {
    /// Opens streams, loads kernels and allocates the control page.
    pub fn new(gpus: Vec<Gpu>) -> Result<Rig, CudaError> {
        // The control words live in pinned memory of the first GPU's context.
        if gpus.is_empty() {
            return Err(CudaError::NoGpu);
        }
        let kernels = program::load_all(&gpus)?;
        let mut streams = Vec::new();
        let mut counters = Vec::new();
        let mut sms = Vec::new();
        let mut copy_engines = Vec::new();
        for g in &gpus {
            let lanes = (0..Lane::COUNT)
                .map(|_| {
                    g.ctx
                        .new_stream()
                        .map_err(CudaError::at("cuStreamCreate", g.ordinal))
                })
                .collect::<Result<Vec<_>, _>>()?;
            streams.push(lanes);
            counters.push(DeviceBuffer::new(g, 16)?);
            use sys::CUdevice_attribute as A;
            sms.push(
                g.attribute(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?
                    .max(1) as u32,
            );
            copy_engines.push(
                g.attribute(A::CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT)?
                    .max(1) as u32,
            );
        }
        let slots = gpus.len() * Lane::COUNT;
        let control = PinnedBuffer::new(&gpus[0], Self::waited_offset(slots) + 8 * slots)?;
        Ok(Rig {
            gpus,
            sm_copy: SmCopy::default(),
            kernels,
            streams,
            control,
            counters,
            sms,
            copy_engines,
        })
    }

    /// The GPU at `i`.
    pub fn gpu(&self, i: GpuIndex) -> &Gpu {
        &self.gpus[i.0]
    }

    /// CUDA's ordinal for GPU `i`, for error messages.
    pub fn ordinal(&self, i: GpuIndex) -> CudaOrdinal {
        self.gpus[i.0].ordinal
    }

    /// Every GPU index of the run.
    pub fn indices(&self) -> impl Iterator<Item = GpuIndex> {
        (0..self.gpus.len()).map(GpuIndex)
    }

    /// GPU `i`'s loaded kernels.
    pub fn kernels(&self, i: GpuIndex) -> &Kernels {
        &self.kernels[i.0]
    }

    /// GPU `i`'s stream `lane`.
    pub fn stream(&self, i: GpuIndex, lane: Lane) -> &Arc<CudaStream> {
        &self.streams[i.0][lane.index()]
    }

    /// Copy engines the driver reports for GPU `i` (CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT).
    pub fn copy_engines(&self, i: GpuIndex) -> u32 {
        self.copy_engines[i.0]
    }

    fn slot(i: GpuIndex, lane: Lane) -> usize {
        i.0 * Lane::COUNT + lane.index()
    }

    fn waited_offset(slots: usize) -> usize {
        // Flags first (release + one per slot), then 8-byte aligned counters.
        (4 * (1 + slots)).next_multiple_of(8)
    }

    /// A timing event in GPU `i`'s context.
    pub fn event(&self, i: GpuIndex) -> Result<CudaEvent, CudaError> {
        self.gpu(i)
            .ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(CudaError::at("cuEventCreate", self.ordinal(i)))
    }

    /// An event without timing, for ordering streams.
    pub fn sync_event(&self, i: GpuIndex) -> Result<CudaEvent, CudaError> {
        self.gpu(i)
            .ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
            .map_err(CudaError::at("cuEventCreate", self.ordinal(i)))
    }

    /// Records `ev` on GPU `i`'s `lane`.
    pub fn record(&self, i: GpuIndex, lane: Lane, ev: &CudaEvent) -> Result<(), CudaError> {
        stream::record(self.stream(i, lane), ev)
    }

    /// Makes GPU `i`'s `lane` wait for `ev` (of any GPU).
    pub fn wait(&self, i: GpuIndex, lane: Lane, ev: &CudaEvent) -> Result<(), CudaError> {
        stream::wait(self.stream(i, lane), ev)
    }

    /// Blocks for a kernel covering `work` items on GPU `i`: enough to fill
    /// it, never more than the work needs.
    pub fn grid_for(&self, i: GpuIndex, work: u64) -> u32 {
        let full = self.sms[i.0] * 4;
        let needed = work.div_ceil(u64::from(BLOCK_THREADS)).max(1);
        needed.min(u64::from(full)) as u32
    }

    /// Grid and block for an SM copy of `bytes` on GPU `i`.
    pub fn copy_shape(&self, i: GpuIndex, bytes: u64) -> (u32, u32) {
        let t = self.sm_copy.threads;
        let full = self.sms[i.0] * self.sm_copy.blocks_per_sm;
        let vecs = bytes.div_ceil(16);
        (
            vecs.div_ceil(u64::from(t)).clamp(1, u64::from(full)) as u32,
            t,
        )
    }

    /// Queues an SM copy of `bytes` from `src[src_off..]` to `dst[dst_off..]`
    /// on GPU `i`'s `lane` (GPU `i` reads or writes its peer).
    #[allow(clippy::too_many_arguments)]
    pub fn sm_copy(
        &self,
        i: GpuIndex,
        lane: Lane,
        src: &DeviceBuffer,
        src_off: u64,
        dst: &DeviceBuffer,
        dst_off: u64,
        bytes: u64,
    ) -> Result<(), CudaError> {
        self.kernels(i).copy(
            self.stream(i, lane),
            self.sm_copy.variant,
            self.copy_shape(i, bytes),
            src,
            src_off,
            dst,
            dst_off,
            bytes,
        )
    }

    /// Arms the release flag (streams that spin now wait).
    pub fn arm(&self) {
        let slots = self.gpus.len() * Lane::COUNT;
        for w in 0..=slots {
            self.control.write_u32(w, 0);
        }
        let base = Self::waited_offset(slots) / 8;
        for s in 0..slots {
            self.control.write_u64(base + s, 0);
        }
    }

    /// Releases every spinning stream.
    pub fn release(&self) {
        self.control.write_u32(0, 1);
    }

    /// Queues a spin kernel that holds GPU `i`'s `lane` until [`Rig::release`].
    pub fn hold(&self, i: GpuIndex, lane: Lane) -> Result<(), CudaError> {
        let slot = Self::slot(i, lane);
        let slots = self.gpus.len() * Lane::COUNT;
        let waited = (Self::waited_offset(slots) + 8 * slot) as u64;
        self.kernels(i).spin(
            self.stream(i, lane),
            &self.control,
            slot,
            waited,
            SPIN_TIMEOUT_CYCLES,
        )
    }

    /// The (GPU, lane, cycles waited) of every spin kernel that gave up
    /// waiting since the last [`Rig::arm`].
    pub fn spin_timeouts(&self) -> Vec<(GpuIndex, Lane, u64)> {
        let slots = self.gpus.len() * Lane::COUNT;
        let base = Self::waited_offset(slots) / 8;
        (0..slots)
            .filter(|&s| self.control.read_u32(1 + s) != 0)
            .map(|s| {
                (
                    GpuIndex(s / Lane::COUNT),
                    Lane((s % Lane::COUNT) as u8),
                    self.control.read_u64(base + s),
                )
            })
            .collect()
    }

    /// Fills `buf[..bytes]` with the pattern for `seed`, on GPU `i`'s `lane`.
    pub fn fill(
        &self,
        i: GpuIndex,
        lane: Lane,
        buf: &DeviceBuffer,
        bytes: u64,
        seed: u32,
    ) -> Result<(), CudaError> {
        let grid = self.grid_for(i, bytes);
        self.kernels(i)
            .fill(self.stream(i, lane), grid, buf, bytes, seed)
    }

    /// Counts bytes of `buf[..bytes]` that differ from the pattern for
    /// `seed`. Synchronises GPU `i`'s `lane`.
    pub fn verify(
        &self,
        i: GpuIndex,
        lane: Lane,
        buf: &DeviceBuffer,
        bytes: u64,
        seed: u32,
    ) -> Result<u64, CudaError> {
        let counter = &self.counters[i.0];
        let s = self.stream(i, lane);
        // Set the counters on the stream the kernel runs on, so it cannot
        // start before they are: the count to 0, the first bad offset to ~0.
        stream::memset(s, counter, 16, 0xff)?;
        stream::memset(s, counter, 8, 0)?;
        let grid = self.grid_for(i, bytes);
        self.kernels(i).verify(s, grid, buf, bytes, seed, counter)?;
        self.synchronize(i, lane)?;
        let out = counter.to_host()?;
        Ok(u64::from_le_bytes(
            out[0..8].try_into().unwrap_or([0xff; 8]),
        ))
    }

    /// Sets `buf[..bytes]` to `value` on GPU `i`'s `lane` (poisoning a destination).
    pub fn poison(
        &self,
        i: GpuIndex,
        lane: Lane,
        buf: &DeviceBuffer,
        bytes: u64,
        value: u8,
    ) -> Result<(), CudaError> {
        stream::memset(self.stream(i, lane), buf, bytes, value)
    }

    /// Waits for GPU `i`'s `lane`.
    pub fn synchronize(&self, i: GpuIndex, lane: Lane) -> Result<(), CudaError> {
        self.stream(i, lane)
            .synchronize()
            .map_err(CudaError::at("cuStreamSynchronize", self.ordinal(i)))
    }

    /// Waits for every stream of every GPU.
    pub fn synchronize_all(&self) -> Result<(), CudaError> {
        for i in self.indices() {
            for l in 0..Lane::COUNT {
                self.synchronize(i, Lane(l as u8))?;
            }
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

    #[test]
    fn lanes_name_themselves_and_extra_lanes_stay_in_range() {
        assert_eq!(Lane::OUT.to_string(), "out");
        assert_eq!(Lane::IN.to_string(), "in");
        assert_eq!(Lane::extra(1).to_string(), "extra1");
        assert_eq!(Lane::extra(99), Lane::extra(Lane::EXTRA - 1));
        assert_eq!(Rig::waited_offset(12) % 8, 0);
        assert!(Rig::waited_offset(12) >= 4 * 13);
    }
}
