//! One GPU's loaded kernels, launched through their typed wrappers in
//! `p2p-kernels` (one beside each kernel's source). The methods here take
//! buffers, not addresses, and check every range first, so the code above
//! this layer queues kernels without `unsafe`.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr};
use p2p_kernels as k;
use p2p_topology::CudaOrdinal;

use super::memory::{DeviceBuffer, PinnedBuffer};
use super::CudaError;

/// One GPU's loaded kernels.
#[derive(Debug, Clone)]
pub struct Kernels {
    pub(super) ordinal: CudaOrdinal,
    pub(super) spin: CudaFunction,
    pub(super) pingpong: CudaFunction,
    pub(super) fill: CudaFunction,
    pub(super) verify: CudaFunction,
    pub(super) reduce_check: CudaFunction,
    /// Every SM copy variant, in `p2p_kernels::copy::VARIANTS` order.
    pub(super) copy_variants: Vec<CudaFunction>,
    pub(super) _module: Arc<CudaModule>,
}

impl Kernels {
    fn launched(
        &self,
        call: &'static str,
    ) -> impl FnOnce(cudarc::driver::DriverError) -> CudaError {
        CudaError::at(call, self.ordinal)
    }

    /// Fills `buf[..bytes]` with the pattern for `seed`.
    pub fn fill(
        &self,
        stream: &CudaStream,
        grid: u32,
        buf: &DeviceBuffer,
        bytes: u64,
        seed: u32,
    ) -> Result<(), CudaError> {
        let dst = buf.range(0, bytes, "fill")?;
        // SAFETY: dst..dst+bytes is inside `buf` (checked); `fill` is
        // vp2p_fill loaded in this GPU's context, which `stream` belongs to;
        // cuMemFree waits for queued work, so `buf` outlives the kernel.
        unsafe { k::fill::launch(stream, &self.fill, grid, dst, bytes, seed) }
            .map_err(self.launched("cuLaunchKernel(vp2p_fill)"))
    }

    /// Counts the bytes of `buf[..bytes]` that differ from the pattern for
    /// `seed` into `counters` (8 bytes of count, 8 of first bad offset, set
    /// by the caller to 0 and all ones).
    pub fn verify(
        &self,
        stream: &CudaStream,
        grid: u32,
        buf: &DeviceBuffer,
        bytes: u64,
        seed: u32,
        counters: &DeviceBuffer,
    ) -> Result<(), CudaError> {
        let data = buf.range(0, bytes, "verify")?;
        let count = counters.range(0, 16, "verify counters")?;
        // SAFETY: the data range and both counters are inside their buffers
        // (checked); `verify` is vp2p_verify in this context; the buffers
        // outlive the kernel (cuMemFree waits).
        unsafe {
            k::verify::launch(
                stream,
                &self.verify,
                grid,
                data,
                bytes,
                seed,
                count,
                count + 8,
            )
        }
        .map_err(self.launched("cuLaunchKernel(vp2p_verify)"))
    }

    /// Copies `src[src_off..][..bytes]` to `dst[dst_off..]` with SM copy
    /// kernel `variant`; either buffer may be a peer's (peer access on).
    #[allow(clippy::too_many_arguments)]
    pub fn copy(
        &self,
        stream: &CudaStream,
        variant: usize,
        (grid, block): (u32, u32),
        src: &DeviceBuffer,
        src_off: u64,
        dst: &DeviceBuffer,
        dst_off: u64,
        bytes: u64,
    ) -> Result<(), CudaError> {
        let from = src.range(src_off, bytes, "SM copy source")?;
        let to = dst.range(dst_off, bytes, "SM copy destination")?;
        if from % 16 != 0 || to % 16 != 0 {
            return Err(CudaError::Device {
                ordinal: self.ordinal,
                what: format!("SM copy offsets {src_off}/{dst_off} are not 16-byte aligned"),
            });
        }
        let f = &self.copy_variants[variant.min(self.copy_variants.len() - 1)];
        // SAFETY: both ranges are inside their buffers and 16-byte aligned
        // (checked); `f` is one of the copy variants in this context; a peer
        // buffer is reachable only with peer access on, and without it the
        // kernel faults and the error surfaces here or at the next sync.
        unsafe { k::copy::launch(stream, f, grid, block, from, to, bytes) }
            .map_err(self.launched("cuLaunchKernel(vp2p_copy)"))
    }

    /// Holds `stream` until word 0 of `control` becomes non-zero, or
    /// `timeout_cycles` pass (then word `slot + 1` is set); the cycles waited
    /// go to the 8-byte word at `waited_off`.
    pub fn spin(
        &self,
        stream: &CudaStream,
        control: &PinnedBuffer,
        slot: usize,
        waited_off: u64,
        timeout_cycles: i64,
    ) -> Result<(), CudaError> {
        let release = control.device_at(0, 4, "spin release flag")?;
        let timed_out = control.device_at(4 * (1 + slot as u64), 4, "spin timeout flag")?;
        let waited = control.device_at(waited_off, 8, "spin cycles")?;
        // SAFETY: the three words are inside the mapped pinned buffer
        // (checked), which lives as long as the rig that owns the streams;
        // `spin` is vp2p_spin in this context.
        unsafe {
            k::spin::launch(
                stream,
                &self.spin,
                release,
                timeout_cycles,
                timed_out,
                waited,
            )
        }
        .map_err(self.launched("cuLaunchKernel(vp2p_spin)"))
    }

    /// Starts one side of a ping-pong: polls `mine`, writes `peers`, counts
    /// into `result` (two 8-byte words).
    #[allow(clippy::too_many_arguments)]
    pub fn pingpong(
        &self,
        stream: &CudaStream,
        mine: &DeviceBuffer,
        peers: &DeviceBuffer,
        rounds: u32,
        initiator: bool,
        timeout_cycles: i64,
        result: &DeviceBuffer,
    ) -> Result<(), CudaError> {
        let m = mine.range(0, 4, "ping-pong flag")?;
        let p = peers.range(0, 4, "peer ping-pong flag")?;
        let r = result.range(0, 16, "ping-pong result")?;
        // SAFETY: the words are inside their buffers (checked); the peer's
        // flag needs peer access, which the caller turned on; `pingpong` is
        // vp2p_pingpong in this context.
        unsafe {
            k::pingpong::launch(
                stream,
                &self.pingpong,
                m,
                p,
                rounds,
                initiator,
                timeout_cycles,
                r,
            )
        }
        .map_err(self.launched("cuLaunchKernel(vp2p_pingpong)"))
    }

    /// Counts the elements of an all-reduce result `data[..count]` that
    /// differ from the expected sums of `ranks` ranks into `counter`.
    pub fn reduce_check(
        &self,
        stream: &Arc<CudaStream>,
        grid: u32,
        data: &CudaSlice<f32>,
        count: u64,
        ranks: u32,
        counter: &DeviceBuffer,
    ) -> Result<(), CudaError> {
        if count > data.len() as u64 {
            return Err(CudaError::Bounds {
                ordinal: self.ordinal,
                what: format!("reduce check of {count} floats"),
                bytes: data.len() * 4,
            });
        }
        let bad = counter.range(0, 8, "reduce check counter")?;
        let (ptr, _sync) = data.device_ptr(stream);
        // SAFETY: `count` floats are inside `data` (checked), which the
        // caller keeps alive (and cudarc's guard orders against its stream);
        // the counter is inside its buffer; `reduce_check` is loaded here.
        unsafe { k::reduce_check::launch(stream, &self.reduce_check, grid, ptr, count, ranks, bad) }
            .map_err(self.launched("cuLaunchKernel(vp2p_reduce_check)"))
    }
}
