//! Checking that data moved between GPUs arrives whole, for `probe --verify`:
//! for a pair the decision enables, distinct host-made patterns are moved
//! both ways with the copy engine and with SM kernels (reading from and
//! writing to the peer), and each destination is read back to the host and
//! compared byte for byte with what was sent. A pair granted P2P whose data
//! does not arrive is `p2p_data_lost`.
//!
//! It sits below both `probe` (whose report holds [`VerifyCheck`]s) and
//! `bench` (whose copies poison their destinations with the same [`POISON`]),
//! on the copy machinery they share: [`crate::cuda::rig`] and
//! [`crate::transfer`].

use p2p_report::bench::Mode;
pub use p2p_report::probe::VerifyCheck;
use p2p_topology::{ByteSize, GpuIndex};

use crate::cuda::memory::DeviceBuffer;
use crate::cuda::rig::Rig;
use crate::cuda::{peer, CudaError, Gpu};
use crate::transfer::{self, timed, Leg, MethodConfig};

/// The byte every destination is set to before a copy, here and in `bench`:
/// bytes that never arrive keep it.
pub const POISON: u8 = 0xa5;

/// Copies per check: the last one's bytes are compared.
pub const VERIFY_COPIES: u32 = 3;

/// Bytes from a xorshift generator: a pattern distinct per check, made on the
/// host so the comparison does not trust any GPU code.
fn pattern(seed: u64, bytes: usize) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(bytes + 8);
    while out.len() < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(bytes);
    out
}

fn one(
    rig: &Rig,
    (s, d): (GpuIndex, GpuIndex),
    mode: Mode,
    bytes: usize,
    seed: u64,
) -> Result<(u64, u64, Option<u64>), CudaError> {
    let sent = pattern(seed, bytes);
    let src = DeviceBuffer::new(rig.gpu(s), bytes)?;
    let dst = DeviceBuffer::new(rig.gpu(d), bytes)?;
    src.copy_from_host(&sent)?;
    dst.fill_bytes(POISON)?;
    rig.synchronize_all()?;
    let leg = Leg {
        src: s,
        dst: d,
        src_buf: &src,
        dst_buf: &dst,
    };
    let cfg = MethodConfig {
        staged_chunk: ByteSize(8 << 20),
        staged_depth: 4,
    };
    let mut method = transfer::method(mode, &cfg).ok_or_else(|| CudaError::Device {
        ordinal: rig.ordinal(s),
        what: format!("{mode} is not a copy"),
    })?;
    timed(
        rig,
        method.as_mut(),
        &[leg],
        bytes as u64,
        VERIFY_COPIES,
        false,
    )?;
    rig.synchronize_all()?;
    let got = dst.to_host()?;
    let mut bad = 0u64;
    let mut first = None;
    for (i, (a, b)) in sent.iter().zip(&got).enumerate() {
        if a != b {
            bad += 1;
            first.get_or_insert(i as u64);
        }
    }
    Ok((got.len() as u64, bad, first))
}

/// The methods every enabled pair is checked with.
pub const VERIFY_MODES: [Mode; 3] = [Mode::Ce, Mode::SmRead, Mode::SmWrite];

/// Moves `bytes` both ways between `a` and `b` (CUDA GPUs the decision
/// enables) with every method, peer access on.
///
/// `a` and `b` may be the same GPU: the same copies then run inside it, which
/// checks the method on a machine with one GPU (no peer access involved).
pub fn pair(a: &Gpu, b: &Gpu, bytes: usize) -> Result<Vec<VerifyCheck>, CudaError> {
    if a.ordinal != b.ordinal {
        peer::enable(a, b)?;
        peer::enable(b, a)?;
    }
    let rig = Rig::new(vec![a.clone(), b.clone()])?;
    let mut out = Vec::new();
    let (ia, ib) = (GpuIndex(0), GpuIndex(1));
    for (k, (s, d)) in [(ia, ib), (ib, ia)].into_iter().enumerate() {
        for (m, mode) in VERIFY_MODES.into_iter().enumerate() {
            let seed = 0x9e37_79b9_7f4a_7c15 ^ ((k as u64) << 8 | m as u64);
            let (src, dst) = (rig.gpu(s).bdf, rig.gpu(d).bdf);
            let check = match one(&rig, (s, d), mode, bytes, seed) {
                Ok((checked, bad, first)) => VerifyCheck {
                    src,
                    dst,
                    mode,
                    bytes: bytes as u64,
                    copies: VERIFY_COPIES,
                    checked_bytes: checked,
                    mismatched_bytes: bad,
                    first_bad: first,
                    error: None,
                },
                Err(e) => VerifyCheck {
                    src,
                    dst,
                    mode,
                    bytes: bytes as u64,
                    copies: VERIFY_COPIES,
                    checked_bytes: 0,
                    mismatched_bytes: bytes as u64,
                    first_bad: None,
                    error: Some(e.to_string()),
                },
            };
            out.push(check);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{pattern, POISON};

    #[test]
    fn patterns_differ_by_seed_and_cover_the_bytes() {
        let (a, b) = (pattern(1, 4096), pattern(2, 4096));
        assert_eq!(a.len(), 4096);
        assert_ne!(a, b);
        let distinct: std::collections::BTreeSet<u8> = a.iter().copied().collect();
        assert!(distinct.len() > 200);
        assert!(a.iter().any(|&x| x != POISON), "never the poison");
    }
}
