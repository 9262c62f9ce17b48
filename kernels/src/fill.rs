//! `vp2p_fill`: writes the pattern for a seed, the bytes every transfer is
//! checked against.

/// The kernel's source.
pub const SOURCE: &str = include_str!("fill.cu");
/// Its entry point.
pub const ENTRY: &str = "vp2p_fill";

/// Queues `vp2p_fill(dst, bytes, seed)` on `stream`.
///
/// # Safety
/// `dst` must be a device address valid for writing `bytes` bytes from
/// `stream`'s context until the kernel has run, and `f` must be [`ENTRY`]
/// loaded in that context.
#[cfg(feature = "launch")]
pub unsafe fn launch(
    stream: &cudarc::driver::CudaStream,
    f: &cudarc::driver::CudaFunction,
    grid: u32,
    dst: u64,
    bytes: u64,
    seed: u32,
) -> Result<(), cudarc::driver::DriverError> {
    use cudarc::driver::PushKernelArg;
    let mut b = stream.launch_builder(f);
    b.arg(&dst).arg(&bytes).arg(&seed);
    // SAFETY: the arguments are the kernel's (u8*, u64, u32) in order; the
    // caller vouches for `dst` and `f`.
    unsafe { b.launch(crate::shape(grid, crate::BLOCK_THREADS)) }.map(|_| ())
}
