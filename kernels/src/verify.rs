//! `vp2p_verify`: counts the bytes that differ from the pattern for a seed
//! and records the first bad offset.

/// The kernel's source.
pub const SOURCE: &str = include_str!("verify.cu");
/// Its entry point.
pub const ENTRY: &str = "vp2p_verify";

/// Queues `vp2p_verify(data, bytes, seed, mismatches, first_bad)` on `stream`.
///
/// # Safety
/// `data` must be valid for reading `bytes` bytes, and `mismatches` and
/// `first_bad` for an 8-byte atomic each, from `stream`'s context until the
/// kernel has run; `f` must be [`ENTRY`] loaded in that context.
#[cfg(feature = "launch")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch(
    stream: &cudarc::driver::CudaStream,
    f: &cudarc::driver::CudaFunction,
    grid: u32,
    data: u64,
    bytes: u64,
    seed: u32,
    mismatches: u64,
    first_bad: u64,
) -> Result<(), cudarc::driver::DriverError> {
    use cudarc::driver::PushKernelArg;
    let mut b = stream.launch_builder(f);
    b.arg(&data)
        .arg(&bytes)
        .arg(&seed)
        .arg(&mismatches)
        .arg(&first_bad);
    // SAFETY: the arguments are the kernel's (const u8*, u64, u32, u64*,
    // u64*) in order; the caller vouches for the pointers and `f`.
    unsafe { b.launch(crate::shape(grid, crate::BLOCK_THREADS)) }.map(|_| ())
}
