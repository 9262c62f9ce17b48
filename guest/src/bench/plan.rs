//! What a bench run measures, decided before any GPU work: the jobs, how many
//! copies per sample, and whether queued work may be held by a spin kernel.

use p2p_report::bench::{Direction, Mode};
use p2p_topology::{ByteSize, ByteSizeError, GpuIndex};

/// Default size sweep: 4 B to 1 GiB.
pub const DEFAULT_SIZES: [u64; 10] = [
    4,
    16,
    256,
    4 << 10,
    64 << 10,
    1 << 20,
    16 << 20,
    64 << 20,
    256 << 20,
    1 << 30,
];

/// Most operations one stream may queue behind a spin kernel: the driver's
/// queue is finite, and a host blocked on a full queue would never release it.
pub const HOLD_BUDGET_OPS: u64 = 768;

/// One measurement to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job {
    /// How the bytes move.
    pub mode: Mode,
    /// One direction or both.
    pub direction: Direction,
    /// Source GPU; None for NCCL (all GPUs).
    pub src: Option<GpuIndex>,
    /// Destination GPU; None for NCCL.
    pub dst: Option<GpuIndex>,
    /// Bytes per copy (per rank for NCCL).
    pub bytes: u64,
}

impl Job {
    /// The pair of a pairwise job (GPU 0 and 1 for a collective, which has none).
    pub fn pair(&self) -> (GpuIndex, GpuIndex) {
        (
            self.src.unwrap_or(GpuIndex(0)),
            self.dst.unwrap_or(GpuIndex(1)),
        )
    }
}

/// Lists the jobs for `modes` over `pairs` (ordered) and `sizes`; `bi`
/// measures each unordered pair once. NCCL jobs cover all GPUs; ping-pong
/// runs once per ordered pair. A GPU paired with itself (a device-local
/// copy) gets one-way copies only.
pub fn jobs(
    modes: &[Mode],
    directions: &[Direction],
    pairs: &[(GpuIndex, GpuIndex)],
    sizes: &[u64],
) -> Vec<Job> {
    let mut out = Vec::new();
    for &mode in modes {
        match mode {
            Mode::Pingpong => {
                for &(s, d) in pairs.iter().filter(|(s, d)| s != d) {
                    out.push(Job {
                        mode,
                        direction: Direction::Uni,
                        src: Some(s),
                        dst: Some(d),
                        bytes: 4,
                    });
                }
            }
            Mode::Nccl | Mode::NcclNoP2p => {
                for &bytes in sizes {
                    out.push(Job {
                        mode,
                        direction: Direction::Bi,
                        src: None,
                        dst: None,
                        bytes,
                    });
                }
            }
            _ => {
                for &direction in directions {
                    for &(s, d) in pairs {
                        if direction == Direction::Bi && s >= d {
                            continue;
                        }
                        for &bytes in sizes {
                            out.push(Job {
                                mode,
                                direction,
                                src: Some(s),
                                dst: Some(d),
                                bytes,
                            });
                        }
                    }
                }
            }
        }
    }
    out
}

/// Why a bench size was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BenchSizeError {
    /// Not a size at all.
    #[error(transparent)]
    NotASize(#[from] ByteSizeError),
    /// Outside what one buffer per GPU can hold here.
    #[error("'{0}': sizes run from 1 byte to 16 GiB")]
    OutOfRange(String),
}

/// A copy size for `bench`, `tune-sm` and `probe --verify`: a [`ByteSize`]
/// from 1 byte to 16 GiB.
pub fn bench_size(s: &str) -> Result<ByteSize, BenchSizeError> {
    let size: ByteSize = s.parse()?;
    if size.0 == 0 || size.0 > 16 << 30 {
        return Err(BenchSizeError::OutOfRange(s.to_string()));
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(bench_size("16K").unwrap(), ByteSize(16384));
        assert_eq!(bench_size("1GiB").unwrap(), ByteSize(1 << 30));
        assert_eq!(
            bench_size("0").unwrap_err(),
            BenchSizeError::OutOfRange("0".into())
        );
        assert!(matches!(bench_size("x"), Err(BenchSizeError::NotASize(_))));
        assert!(bench_size("32G").is_err());
    }

    #[test]
    fn jobs_cover_every_ordered_pair_and_each_unordered_pair_once() {
        let pairs = [(GpuIndex(0), GpuIndex(1)), (GpuIndex(1), GpuIndex(0))];
        let j = jobs(
            &[Mode::Ce],
            &[Direction::Uni, Direction::Bi],
            &pairs,
            &[16, 1 << 20],
        );
        assert_eq!(j.len(), 2 * 2 + 2);
        assert!(j
            .iter()
            .filter(|x| x.direction == Direction::Bi)
            .all(|x| x.src == Some(GpuIndex(0))));
        let j = jobs(
            &[Mode::Nccl, Mode::Pingpong],
            &[Direction::Uni],
            &pairs,
            &[16, 1 << 20],
        );
        assert_eq!(j.len(), 2 + 2);
        // A GPU with itself: one-way copies, no ping-pong.
        let own = [(GpuIndex(0), GpuIndex(0))];
        let j = jobs(
            &[Mode::Ce, Mode::Pingpong],
            &[Direction::Uni, Direction::Bi],
            &own,
            &[16],
        );
        assert_eq!(j.len(), 1);
        assert_eq!(j[0].direction, Direction::Uni);
    }
}
