//! Asynchronous copies and sets on a stream, over typed buffers whose ranges
//! are checked before anything is queued. The bench's transfer methods are
//! written in these, not in raw driver calls.

use cudarc::driver::{result, sys, CudaEvent, CudaStream};

use super::memory::{bind, DeviceBuffer, PinnedBuffer};
use super::{check, CudaError};

/// Sets `buf[..bytes]` to `value` on `stream` (poisoning a destination).
pub fn memset(
    stream: &CudaStream,
    buf: &DeviceBuffer,
    bytes: u64,
    value: u8,
) -> Result<(), CudaError> {
    let ptr = buf.range(0, bytes, "memset")?;
    bind(stream.context(), buf.ordinal)?;
    // SAFETY: ptr..ptr+bytes lies inside `buf` (checked above); the stream
    // belongs to the current context; cuMemFree waits for queued work, so
    // the buffer outlives the set.
    let status = unsafe { sys::cuMemsetD8Async(ptr, value, bytes as usize, stream.cu_stream()) };
    check(status, "cuMemsetD8Async", buf.ordinal)
}

/// Copies `len` bytes from `src[src_off..]` to `dst[dst_off..]` on `stream`
/// with the copy engine. Between GPUs with peer access on this is a direct
/// peer copy; without it the driver stages through host memory (and blocks
/// the host at enqueue until the stream is idle).
pub fn copy_peer(
    stream: &CudaStream,
    src: &DeviceBuffer,
    src_off: u64,
    dst: &DeviceBuffer,
    dst_off: u64,
    len: u64,
) -> Result<(), CudaError> {
    let from = src.range(src_off, len, "peer copy source")?;
    let to = dst.range(dst_off, len, "peer copy destination")?;
    bind(stream.context(), src.ordinal)?;
    // SAFETY: both ranges lie inside live allocations of the named contexts
    // (checked above); the stream belongs to the current context.
    unsafe {
        result::memcpy_peer_async(
            dst.ctx.cu_ctx(),
            to,
            src.ctx.cu_ctx(),
            from,
            len as usize,
            stream.cu_stream(),
        )
    }
    .map_err(CudaError::at("cuMemcpyPeerAsync", src.ordinal))
}

/// Copies `len` bytes from `src[src_off..]` into pinned `dst[..len]` on `stream`.
pub fn copy_to_host(
    stream: &CudaStream,
    src: &DeviceBuffer,
    src_off: u64,
    dst: &PinnedBuffer,
    len: u64,
) -> Result<(), CudaError> {
    let from = src.range(src_off, len, "device-to-host copy")?;
    dst.device_at(0, len, "device-to-host copy")?;
    bind(stream.context(), src.ordinal)?;
    // SAFETY: the source range is inside `src` and the pinned buffer holds at
    // least `len` bytes (both checked); the stream belongs to the current context.
    let status = unsafe {
        sys::cuMemcpyDtoHAsync_v2(dst.host.cast(), from, len as usize, stream.cu_stream())
    };
    check(status, "cuMemcpyDtoHAsync", src.ordinal)
}

/// Copies pinned `src[..len]` into `dst[dst_off..]` on `stream`.
pub fn copy_from_host(
    stream: &CudaStream,
    src: &PinnedBuffer,
    dst: &DeviceBuffer,
    dst_off: u64,
    len: u64,
) -> Result<(), CudaError> {
    let to = dst.range(dst_off, len, "host-to-device copy")?;
    src.device_at(0, len, "host-to-device copy")?;
    bind(stream.context(), dst.ordinal)?;
    // SAFETY: the destination range is inside `dst` and the pinned buffer
    // holds at least `len` bytes (both checked); the stream belongs to the
    // current context.
    let status = unsafe {
        sys::cuMemcpyHtoDAsync_v2(
            to,
            src.host.cast_const().cast(),
            len as usize,
            stream.cu_stream(),
        )
    };
    check(status, "cuMemcpyHtoDAsync", dst.ordinal)
}

/// Makes `stream` wait for `event` (which may belong to another GPU).
pub fn wait(stream: &CudaStream, event: &CudaEvent) -> Result<(), CudaError> {
    stream.wait(event).map_err(|source| CudaError::Global {
        call: "cuStreamWaitEvent",
        source,
    })
}

/// Records `event` on `stream`.
pub fn record(stream: &CudaStream, event: &CudaEvent) -> Result<(), CudaError> {
    event.record(stream).map_err(|source| CudaError::Global {
        call: "cuEventRecord",
        source,
    })
}
