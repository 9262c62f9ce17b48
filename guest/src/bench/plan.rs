//! What a bench run measures, decided before any GPU work: the jobs, how many
//! copies per sample, and whether queued work may be held by a spin kernel.

use p2p_shared::report::bench::{Direction, Mode};

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
    pub mode: Mode,
    pub direction: Direction,
    pub src: Option<usize>,
    pub dst: Option<usize>,
    pub bytes: u64,
}

/// Copies per sample: enough bytes to time well (about 2 GiB), at least 4,
/// at most 300 (small copies: enough to amortise the restart after release,
/// few enough to stay inside the hold budget).
pub fn copies_for(bytes: u64) -> u32 {
    ((2u64 << 30) / bytes.max(1)).clamp(4, 300) as u32
}

/// Lists the jobs for `modes` over `pairs` (ordered) and `sizes`; `bi`
/// measures each unordered pair once. NCCL jobs cover all GPUs; ping-pong
/// runs once per ordered pair.
pub fn jobs(
    modes: &[Mode],
    directions: &[Direction],
    pairs: &[(usize, usize)],
    sizes: &[u64],
) -> Vec<Job> {
    let mut out = Vec::new();
    for &mode in modes {
        match mode {
            Mode::Pingpong => {
                for &(s, d) in pairs {
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
                        if direction == Direction::Bi && s > d {
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

/// Parses "4,16K,256M,1G" (K/M/G are powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (want 4, 16K, 256M, 1G)"))?;
    let bytes = n
        .checked_mul(mult)
        .ok_or_else(|| format!("'{s}' is too large"))?;
    if bytes == 0 || bytes > 16 << 30 {
        return Err(format!("'{s}': sizes run from 1 byte to 16 GiB"));
    }
    Ok(bytes)
}

pub use p2p_shared::report::size_label;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_and_sizes() {
        assert_eq!(copies_for(4), 300);
        assert_eq!(copies_for(256 << 20), 8);
        assert_eq!(copies_for(1 << 30), 4);
        assert_eq!(parse_size("16K").unwrap(), 16384);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert!(parse_size("0").is_err() && parse_size("x").is_err() && parse_size("32G").is_err());
        assert_eq!(size_label(256 << 20), "256 MiB");
        assert_eq!(size_label(16), "16 B");
    }

    #[test]
    fn jobs_cover_every_ordered_pair_and_each_unordered_pair_once() {
        let pairs = [(0, 1), (1, 0)];
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
            .all(|x| x.src == Some(0)));
        let j = jobs(
            &[Mode::Nccl, Mode::Pingpong],
            &[Direction::Uni],
            &pairs,
            &[16, 1 << 20],
        );
        assert_eq!(j.len(), 2 + 2);
    }
}
