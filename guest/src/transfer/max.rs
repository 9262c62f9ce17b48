//! `max`: one transfer split over every copy engine the source GPU reports
//! (a stream each, `cuMemcpyPeerAsync`) and SM copy kernels on both GPUs (the
//! source writing, the destination reading), each part's share of the bytes
//! in proportion to what it moved alone at the same size. What the link
//! carries when every engine works on it at once. Where the split loses to
//! its fastest part alone (small copies, where joining several streams costs
//! more than the engines bring), that part moves the whole copy.

use p2p_report::bench::{Mode, TransferPart, GB};
use p2p_topology::GpuIndex;

use super::{copies_for, timed, Hold, Leg, Needs, PeerAccess, TransferMethod};
use crate::cuda::rig::{Lane, Rig};
use crate::cuda::{stream, CudaError};

/// Parts are cut at multiples of this (keeps SM copies 16-byte aligned and
/// every part big enough to be worth an engine).
const GRANULE: u64 = 64 << 10;

/// Copies per calibration run of one part.
const CALIBRATION_COPIES: u32 = 8;

/// What moves one part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    /// Copy engine stream k of the source GPU.
    Ce(usize),
    /// The source GPU's SM copy kernel writing the peer.
    SmWrite,
    /// The destination GPU's SM copy kernel reading the peer.
    SmRead,
}

impl Engine {
    fn name(self) -> String {
        match self {
            Engine::Ce(k) => format!("ce{k}"),
            Engine::SmWrite => "sm-write".into(),
            Engine::SmRead => "sm-read".into(),
        }
    }

    fn lane(self, leg: &Leg<'_>) -> (GpuIndex, Lane) {
        match self {
            Engine::Ce(k) => (leg.src, Lane::extra(k)),
            Engine::SmWrite => (leg.src, Lane::OUT),
            Engine::SmRead => (leg.dst, Lane::IN),
        }
    }

    fn enqueue(self, rig: &Rig, leg: &Leg<'_>, off: u64, len: u64) -> Result<(), CudaError> {
        let (gpu, lane) = self.lane(leg);
        match self {
            Engine::Ce(_) => stream::copy_peer(
                rig.stream(gpu, lane),
                leg.src_buf,
                off,
                leg.dst_buf,
                off,
                len,
            ),
            Engine::SmWrite | Engine::SmRead => {
                rig.sm_copy(gpu, lane, leg.src_buf, off, leg.dst_buf, off, len)
            }
        }
    }
}

/// The split transfer and its calibration.
#[derive(Debug, Default)]
pub struct Max {
    engines: Vec<Engine>,
    /// GB/s each engine moved alone (both legs counted).
    alone_gbps: Vec<f64>,
    /// While calibrating, or when splitting lost to the fastest part alone:
    /// the one engine that runs.
    only: Option<usize>,
    /// Splitting lost to the fastest part alone at this size.
    whole: bool,
    /// GB/s the split itself moved in the calibration.
    split_gbps: Option<f64>,
    /// The size and the legs' (source, destination) the shares were
    /// measured for: another pair or direction is measured again.
    calibrated: Option<(u64, Vec<(GpuIndex, GpuIndex)>)>,
}

impl Max {
    fn engines_for(rig: &Rig, leg: &Leg<'_>) -> Vec<Engine> {
        let ces = (rig.copy_engines(leg.src) as usize).clamp(1, Lane::EXTRA);
        (0..ces)
            .map(Engine::Ce)
            .chain([Engine::SmWrite, Engine::SmRead])
            .collect()
    }

    /// (engine, offset, length) of each part of a copy of `bytes`.
    fn split(&self, bytes: u64) -> Vec<(Engine, u64, u64)> {
        if let Some(i) = self.only {
            return vec![(self.engines[i], 0, bytes)];
        }
        let n = self.engines.len();
        let weights: Vec<f64> = if self.alone_gbps.len() == n {
            self.alone_gbps.clone()
        } else {
            vec![1.0; n]
        };
        let total: f64 = weights.iter().sum();
        let granules = bytes / GRANULE;
        if n == 0 || total <= 0.0 || granules < n as u64 || self.whole {
            // Too small to split: the fastest part takes it all.
            let best = (0..n)
                .max_by(|&a, &b| weights[a].total_cmp(&weights[b]))
                .unwrap_or(0);
            return self
                .engines
                .get(best)
                .map_or(Vec::new(), |e| vec![(*e, 0, bytes)]);
        }
        let mut out = Vec::new();
        let mut off = 0;
        for (i, e) in self.engines.iter().enumerate() {
            let len = if i + 1 == n {
                bytes - off
            } else {
                ((weights[i] / total * granules as f64) as u64) * GRANULE
            };
            if len > 0 {
                out.push((*e, off, len));
            }
            off += len;
        }
        out
    }
}

impl TransferMethod for Max {
    fn mode(&self) -> Mode {
        Mode::Max
    }

    fn needs(&self) -> Needs {
        Needs {
            peer_access: PeerAccess::Required,
            host_staging: false,
            sm_kernel: true,
            hold: Hold::Always,
        }
    }

    fn lanes(&self, rig: &Rig, leg: &Leg<'_>) -> Vec<(GpuIndex, Lane)> {
        let engines = if self.engines.is_empty() {
            Self::engines_for(rig, leg)
        } else {
            self.engines.clone()
        };
        engines.iter().map(|e| e.lane(leg)).collect()
    }

    fn calibrate(&mut self, rig: &Rig, legs: &[Leg<'_>], bytes: u64) -> Result<(), CudaError> {
        let key = (
            bytes,
            legs.iter().map(|l| (l.src, l.dst)).collect::<Vec<_>>(),
        );
        if self.calibrated.as_ref() == Some(&key) || legs.is_empty() {
            return Ok(());
        }
        self.engines = Self::engines_for(rig, &legs[0]);
        self.alone_gbps.clear();
        let copies = copies_for(bytes).min(CALIBRATION_COPIES);
        let mut alone = Vec::new();
        for i in 0..self.engines.len() {
            self.only = Some(i);
            let t = timed(rig, self, legs, bytes, copies, false);
            self.only = None;
            let secs = t?.seconds.into_iter().fold(0.0, f64::max);
            let moved = bytes as f64 * f64::from(copies) * legs.len() as f64;
            alone.push(if secs > 0.0 { moved / secs / GB } else { 0.0 });
        }
        self.alone_gbps = alone;
        // The split itself, once: when the join of several streams costs more
        // than the extra engines bring (small copies), the fastest part alone
        // moves the whole copy.
        self.whole = false;
        let t = timed(rig, self, legs, bytes, copies, false)?;
        let secs = t.seconds.into_iter().fold(0.0, f64::max);
        let moved = bytes as f64 * f64::from(copies) * legs.len() as f64;
        let split_gbps = if secs > 0.0 { moved / secs / GB } else { 0.0 };
        let best = self.alone_gbps.iter().copied().fold(0.0, f64::max);
        self.whole = split_gbps < best;
        self.split_gbps = Some(split_gbps);
        self.calibrated = Some(key);
        Ok(())
    }

    fn enqueue(&mut self, rig: &Rig, leg: &Leg<'_>, bytes: u64) -> Result<(), CudaError> {
        if self.engines.is_empty() {
            self.engines = Self::engines_for(rig, leg);
        }
        for (engine, off, len) in self.split(bytes) {
            engine.enqueue(rig, leg, off, len)?;
        }
        Ok(())
    }

    fn parts(&self) -> Vec<TransferPart> {
        let Some((bytes, _)) = &self.calibrated else {
            return Vec::new();
        };
        let split = self.split(*bytes);
        self.engines
            .iter()
            .zip(&self.alone_gbps)
            .map(|(e, gbps)| TransferPart {
                engine: e.name(),
                bytes: split
                    .iter()
                    .filter(|(x, _, _)| x == e)
                    .map(|(_, _, len)| len)
                    .sum(),
                alone_gbps: *gbps,
            })
            .collect()
    }

    fn split_gbps(&self) -> Option<f64> {
        self.calibrated.as_ref().and(self.split_gbps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn max(alone: &[f64]) -> Max {
        Max {
            engines: vec![
                Engine::Ce(0),
                Engine::Ce(1),
                Engine::SmWrite,
                Engine::SmRead,
            ],
            alone_gbps: alone.to_vec(),
            only: None,
            whole: false,
            split_gbps: None,
            calibrated: None,
        }
    }

    #[test]
    fn a_split_covers_every_byte_once_in_proportion() {
        let m = max(&[300.0, 100.0, 200.0, 200.0]);
        let bytes = (256 << 20) + 12345;
        let parts = m.split(bytes);
        let mut off = 0;
        for (_, o, len) in &parts {
            assert_eq!(*o, off, "contiguous");
            assert_eq!(o % 16, 0, "SM kernels need 16-byte aligned parts");
            off += len;
        }
        assert_eq!(off, bytes);
        // ce0 moved 3/8 of the total alone: it gets 3/8 of the bytes, to a granule.
        let ce0 = parts[0].2 as f64 / bytes as f64;
        assert!((ce0 - 0.375).abs() < 0.001, "{ce0}");
    }

    #[test]
    fn small_copies_go_whole_to_the_fastest_part() {
        let m = max(&[100.0, 100.0, 400.0, 50.0]);
        assert_eq!(m.split(4096), vec![(Engine::SmWrite, 0, 4096)]);
        let mut one = max(&[1.0; 4]);
        one.only = Some(3);
        assert_eq!(one.split(1 << 20), vec![(Engine::SmRead, 0, 1 << 20)]);
        // A split that lost to its fastest part: that part takes every copy.
        let mut lost = max(&[100.0, 300.0, 200.0, 200.0]);
        lost.whole = true;
        assert_eq!(lost.split(256 << 20), vec![(Engine::Ce(1), 0, 256 << 20)]);
    }
}
