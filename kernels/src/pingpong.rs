//! `vp2p_pingpong`: one thread per GPU bounces a counter through the other's
//! memory; every step is one peer write seen by a local poll.

/// The kernel's source.
pub const SOURCE: &str = include_str!("pingpong.cu");
/// Its entry point.
pub const ENTRY: &str = "vp2p_pingpong";

/// Queues `vp2p_pingpong(mine, peers, rounds, initiator, timeout_cycles,
/// result)` on `stream` (one warp).
///
/// # Safety
/// `mine` must be a 4-byte word of this GPU's memory and `peers` one of the
/// peer's, mapped into `stream`'s context (peer access on), and `result` two
/// 8-byte words, all valid until the kernel has run; `f` must be [`ENTRY`]
/// loaded in that context.
#[cfg(feature = "launch")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch(
    stream: &cudarc::driver::CudaStream,
    f: &cudarc::driver::CudaFunction,
    mine: u64,
    peers: u64,
    rounds: u32,
    initiator: bool,
    timeout_cycles: i64,
    result: u64,
) -> Result<(), cudarc::driver::DriverError> {
    use cudarc::driver::PushKernelArg;
    let initiator = i32::from(initiator);
    let mut b = stream.launch_builder(f);
    b.arg(&mine)
        .arg(&peers)
        .arg(&rounds)
        .arg(&initiator)
        .arg(&timeout_cycles)
        .arg(&result);
    // SAFETY: the arguments are the kernel's (volatile u32*, volatile u32*,
    // u32, int, long long, u64*) in order; the caller vouches for the rest.
    unsafe { b.launch(crate::shape(1, 32)) }.map(|_| ())
}
