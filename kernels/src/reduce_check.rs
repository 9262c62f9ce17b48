//! `vp2p_reduce_check`: counts the elements of an all-reduce (sum) result
//! that differ from the expected sums.

/// The kernel's source.
pub const SOURCE: &str = include_str!("reduce_check.cu");
/// Its entry point.
pub const ENTRY: &str = "vp2p_reduce_check";

/// Queues `vp2p_reduce_check(data, count, ranks, mismatches)` on `stream`.
///
/// # Safety
/// `data` must be valid for reading `count` floats and `mismatches` for an
/// 8-byte atomic from `stream`'s context until the kernel has run; `f` must
/// be [`ENTRY`] loaded in that context.
#[cfg(feature = "launch")]
pub unsafe fn launch(
    stream: &cudarc::driver::CudaStream,
    f: &cudarc::driver::CudaFunction,
    grid: u32,
    data: u64,
    count: u64,
    ranks: u32,
    mismatches: u64,
) -> Result<(), cudarc::driver::DriverError> {
    use cudarc::driver::PushKernelArg;
    let mut b = stream.launch_builder(f);
    b.arg(&data).arg(&count).arg(&ranks).arg(&mismatches);
    // SAFETY: the arguments are the kernel's (const float*, u64, u32, u64*)
    // in order; the caller vouches for the pointers and `f`.
    unsafe { b.launch(crate::shape(grid, crate::BLOCK_THREADS)) }.map(|_| ())
}
