//! The SM copy kernels: `(src, dst, bytes)`, 16-byte vectors then a byte
//! tail. Either pointer may be a peer's memory: launched on the reading GPU
//! the copy is a peer read, on the writing GPU a peer write. Variants differ
//! in vectors in flight per thread and in how work is spread, for tuning.

/// The kernels' source.
pub const SOURCE: &str = include_str!("copy.cu");

/// Every variant's entry point; [`DEFAULT`] indexes the one the bench uses.
pub const VARIANTS: [&str; 8] = [
    "vp2p_copy",
    "vp2p_copy_u2",
    "vp2p_copy_u8",
    "vp2p_copy_cs4",
    "vp2p_copy_chunk4",
    "vp2p_copy_chunk8",
    "vp2p_copy_plain4",
    "vp2p_copy_tma",
];

/// `vp2p_copy_cs4`, the best of `p2p-guest tune-sm` on 2x H200.
pub const DEFAULT: usize = 3;

/// Queues one copy variant `f(src, dst, bytes)` on `stream`.
///
/// # Safety
/// `src` must be valid for reading and `dst` for writing `bytes` bytes from
/// `stream`'s context (a peer's memory needs peer access on) until the kernel
/// has run, both 16-byte aligned; `f` must be one of [`VARIANTS`] loaded in
/// that context.
#[cfg(feature = "launch")]
pub unsafe fn launch(
    stream: &cudarc::driver::CudaStream,
    f: &cudarc::driver::CudaFunction,
    grid: u32,
    block: u32,
    src: u64,
    dst: u64,
    bytes: u64,
) -> Result<(), cudarc::driver::DriverError> {
    use cudarc::driver::PushKernelArg;
    let mut b = stream.launch_builder(f);
    b.arg(&src).arg(&dst).arg(&bytes);
    // SAFETY: the arguments are the kernels' (const u8*, u8*, u64) in order;
    // the caller vouches for the pointers and `f`.
    unsafe { b.launch(crate::shape(grid, block)) }.map(|_| ())
}
