//! `vp2p_spin`: holds a stream until the host writes the release flag (or a
//! timeout passes), so queued work starts together.

/// The kernel's source.
pub const SOURCE: &str = include_str!("spin.cu");
/// Its entry point.
pub const ENTRY: &str = "vp2p_spin";

/// Queues `vp2p_spin(release, timeout_cycles, timed_out, waited)` on `stream`
/// (one warp).
///
/// # Safety
/// `release` and `timed_out` must be device addresses of 4-byte words and
/// `waited` of an 8-byte word, valid from `stream`'s context until the
/// kernel has run (mapped pinned host memory, so the host can release it);
/// `f` must be [`ENTRY`] loaded in that context.
#[cfg(feature = "launch")]
pub unsafe fn launch(
    stream: &cudarc::driver::CudaStream,
    f: &cudarc::driver::CudaFunction,
    release: u64,
    timeout_cycles: i64,
    timed_out: u64,
    waited: u64,
) -> Result<(), cudarc::driver::DriverError> {
    use cudarc::driver::PushKernelArg;
    let mut b = stream.launch_builder(f);
    b.arg(&release)
        .arg(&timeout_cycles)
        .arg(&timed_out)
        .arg(&waited);
    // SAFETY: the arguments are the kernel's (volatile u32*, long long,
    // u32*, long long*) in order; the caller vouches for the pointers.
    unsafe { b.launch(crate::shape(1, 32)) }.map(|_| ())
}
