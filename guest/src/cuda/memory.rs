//! Device and pinned host buffers owned by one GPU's context, freed on drop.
//! Raw pointers, not cudarc slices: timed code passes them to copies and
//! kernels on streams of several GPUs without implicit synchronisation.

use std::sync::Arc;

use cudarc::driver::{result, sys, CudaContext};
use p2p_topology::CudaOrdinal;

use super::{check, CudaError, Gpu};

/// `bytes` of device memory on one GPU. Its address stays inside `cuda/`:
/// copies and kernels take the buffer and check their range against it.
#[derive(Debug)]
pub struct DeviceBuffer {
    pub(super) ptr: sys::CUdeviceptr,
    /// Its size.
    pub bytes: usize,
    pub(super) ctx: Arc<CudaContext>,
    pub(super) ordinal: CudaOrdinal,
}

impl DeviceBuffer {
    /// Allocates `bytes` (at least one) on `gpu`.
    pub fn new(gpu: &Gpu, bytes: usize) -> Result<Self, CudaError> {
        bind(&gpu.ctx, gpu.ordinal)?;
        // SAFETY: the GPU's context is current on this thread.
        let ptr = unsafe { result::malloc_sync(bytes.max(1)) }
            .map_err(CudaError::at("cuMemAlloc", gpu.ordinal))?;
        Ok(Self {
            ptr,
            bytes,
            ctx: Arc::clone(&gpu.ctx),
            ordinal: gpu.ordinal,
        })
    }

    /// Sets every byte to `value` and waits for the whole context, so work
    /// queued afterwards on any stream sees the new bytes (cuMemsetD8 alone
    /// may still be running when it returns, and our streams do not wait for
    /// the null stream).
    pub fn fill_bytes(&self, value: u8) -> Result<(), CudaError> {
        bind(&self.ctx, self.ordinal)?;
        // SAFETY: ptr..ptr+bytes is this allocation; the context is current.
        let status = unsafe { sys::cuMemsetD8_v2(self.ptr, value, self.bytes) };
        check(status, "cuMemsetD8", self.ordinal)?;
        self.ctx
            .synchronize()
            .map_err(CudaError::at("cuCtxSynchronize", self.ordinal))
    }

    /// Writes `data` (at most `bytes`) to the start of the buffer and waits.
    pub fn copy_from_host(&self, data: &[u8]) -> Result<(), CudaError> {
        bind(&self.ctx, self.ordinal)?;
        let n = data.len().min(self.bytes);
        // SAFETY: `data` holds at least `n` readable bytes; the destination is
        // this allocation of `bytes` >= n bytes; the context is current.
        let status = unsafe { sys::cuMemcpyHtoD_v2(self.ptr, data.as_ptr().cast(), n) };
        check(status, "cuMemcpyHtoD", self.ordinal)
    }

    /// The GPU it lives on.
    pub fn ordinal(&self) -> CudaOrdinal {
        self.ordinal
    }

    /// The device address of `off..off + len`, or a bounds error naming `what`.
    pub(super) fn range(&self, off: u64, len: u64, what: &str) -> Result<u64, CudaError> {
        match off.checked_add(len) {
            Some(end) if end <= self.bytes as u64 => Ok(self.ptr + off),
            _ => Err(CudaError::Bounds {
                ordinal: self.ordinal,
                what: format!("{what} of {len} bytes at offset {off}"),
                bytes: self.bytes,
            }),
        }
    }

    /// Reads the buffer back (for small checks and tests).
    pub fn to_host(&self) -> Result<Vec<u8>, CudaError> {
        bind(&self.ctx, self.ordinal)?;
        let mut out = vec![0u8; self.bytes];
        // SAFETY: `out` holds `bytes` bytes; the source is this allocation.
        let status = unsafe { sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), self.ptr, self.bytes) };
        check(status, "cuMemcpyDtoH", self.ordinal)?;
        Ok(out)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: the pointer came from cuMemAlloc in this context and
            // nothing uses it after drop. An error here cannot be acted upon.
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

/// Page-locked host memory mapped into every context (portable + device-mapped).
#[derive(Debug)]
pub struct PinnedBuffer {
    pub(super) host: *mut u8,
    pub(super) device: sys::CUdeviceptr,
    /// Its size.
    pub bytes: usize,
    ctx: Arc<CudaContext>,
    ordinal: CudaOrdinal,
}

// SAFETY: the buffer is plain memory owned by this value; the driver allows
// its use from any thread once allocated.
unsafe impl Send for PinnedBuffer {}

impl PinnedBuffer {
    /// Allocates `bytes` of pinned memory through `gpu`'s context.
    pub fn new(gpu: &Gpu, bytes: usize) -> Result<Self, CudaError> {
        bind(&gpu.ctx, gpu.ordinal)?;
        let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: writes the allocation's address into `host`.
        let status = unsafe { sys::cuMemHostAlloc(&mut host, bytes.max(1), flags) };
        check(status, "cuMemHostAlloc", gpu.ordinal)?;
        let mut device: sys::CUdeviceptr = 0;
        // SAFETY: `host` is a mapped pinned allocation of this context.
        let status = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host, 0) };
        check(status, "cuMemHostGetDevicePointer", gpu.ordinal)?;
        // SAFETY: `host` points to `bytes` writable bytes just allocated.
        unsafe { std::ptr::write_bytes(host.cast::<u8>(), 0, bytes.max(1)) };
        Ok(Self {
            host: host.cast(),
            device,
            bytes,
            ctx: Arc::clone(&gpu.ctx),
            ordinal: gpu.ordinal,
        })
    }

    /// The device address of byte `off` as kernels see it, or a bounds error.
    pub(super) fn device_at(&self, off: u64, len: u64, what: &str) -> Result<u64, CudaError> {
        match off.checked_add(len) {
            Some(end) if end <= self.bytes as u64 => Ok(self.device + off),
            _ => Err(CudaError::Bounds {
                ordinal: self.ordinal,
                what: format!("{what} of {len} bytes at offset {off}"),
                bytes: self.bytes,
            }),
        }
    }

    /// Writes a 32-bit word at `index` with a volatile store, for flags that
    /// running kernels poll.
    pub fn write_u32(&self, index: usize, value: u32) {
        assert!(
            (index + 1) * 4 <= self.bytes,
            "flag index {index} outside the buffer"
        );
        // SAFETY: in bounds (checked above) and 4-byte aligned (pinned
        // allocations are page aligned); volatile so the store is not elided.
        unsafe { std::ptr::write_volatile(self.host.cast::<u32>().add(index), value) };
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }

    /// Reads a 32-bit word at `index` with a volatile load.
    pub fn read_u32(&self, index: usize) -> u32 {
        assert!(
            (index + 1) * 4 <= self.bytes,
            "flag index {index} outside the buffer"
        );
        // SAFETY: in bounds and aligned, as in write_u32.
        unsafe { std::ptr::read_volatile(self.host.cast::<u32>().add(index)) }
    }

    /// Reads a 64-bit word at `index` with a volatile load.
    pub fn read_u64(&self, index: usize) -> u64 {
        assert!(
            (index + 1) * 8 <= self.bytes,
            "word index {index} outside the buffer"
        );
        // SAFETY: in bounds and 8-byte aligned (page-aligned base).
        unsafe { std::ptr::read_volatile(self.host.cast::<u64>().add(index)) }
    }

    /// Writes a 64-bit word at `index`.
    pub fn write_u64(&self, index: usize, value: u64) {
        assert!(
            (index + 1) * 8 <= self.bytes,
            "word index {index} outside the buffer"
        );
        // SAFETY: in bounds and 8-byte aligned (page-aligned base).
        unsafe { std::ptr::write_volatile(self.host.cast::<u64>().add(index), value) };
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: allocated by cuMemHostAlloc in this context; unused after drop.
            let _ = unsafe { sys::cuMemFreeHost(self.host.cast()) };
        }
    }
}

/// Makes `ctx` current on this thread.
pub(crate) fn bind(ctx: &Arc<CudaContext>, ordinal: CudaOrdinal) -> Result<(), CudaError> {
    ctx.bind_to_thread()
        .map_err(CudaError::at("cuCtxSetCurrent", ordinal))
}
