//! `staged`: vp2p's host-staged pipeline. Chunk i goes device-to-host into
//! pinned ring slot i % depth on the source's out-stream, then host-to-device
//! from that slot on the destination's in-stream; a slot is reused only after
//! its upload finished. What an application without P2P can do at best.

use std::collections::BTreeMap;

use cudarc::driver::CudaEvent;
use p2p_report::bench::Mode;
use p2p_topology::{ByteSize, GpuIndex};

use super::{Hold, Leg, Needs, PeerAccess, TransferMethod};
use crate::cuda::memory::PinnedBuffer;
use crate::cuda::rig::{Lane, Rig};
use crate::cuda::{stream, CudaError};

/// A ring of pinned chunks for one ordered pair, with the events that order
/// each download before its upload and each upload before the slot's reuse.
struct Ring {
    chunks: Vec<PinnedBuffer>,
    downloaded: Vec<CudaEvent>,
    uploaded: Vec<CudaEvent>,
    next: usize,
}

/// The staged pipeline, its rings made on first use per ordered pair.
pub struct StagedPipeline {
    chunk: u64,
    depth: usize,
    rings: BTreeMap<(GpuIndex, GpuIndex), Ring>,
}

impl StagedPipeline {
    /// Chunks of `chunk` bytes, `depth` (at least 2) in flight.
    pub fn new(chunk: ByteSize, depth: usize) -> Self {
        Self {
            chunk: chunk.0.max(1),
            depth: depth.max(2),
            rings: BTreeMap::new(),
        }
    }

    fn ring(&mut self, rig: &Rig, src: GpuIndex, dst: GpuIndex) -> Result<&mut Ring, CudaError> {
        if !self.rings.contains_key(&(src, dst)) {
            let mut ring = Ring {
                chunks: Vec::new(),
                downloaded: Vec::new(),
                uploaded: Vec::new(),
                next: 0,
            };
            for _ in 0..self.depth {
                ring.chunks
                    .push(PinnedBuffer::new(rig.gpu(src), self.chunk as usize)?);
                ring.downloaded.push(rig.sync_event(src)?);
                ring.uploaded.push(rig.sync_event(dst)?);
            }
            self.rings.insert((src, dst), ring);
        }
        self.rings
            .get_mut(&(src, dst))
            .ok_or_else(|| CudaError::Device {
                ordinal: rig.ordinal(src),
                what: "staging ring vanished".into(),
            })
    }
}

impl TransferMethod for StagedPipeline {
    fn mode(&self) -> Mode {
        Mode::Staged
    }

    fn needs(&self) -> Needs {
        Needs {
            peer_access: PeerAccess::Unused,
            host_staging: true,
            sm_kernel: false,
            hold: Hold::Always,
        }
    }

    fn lanes(&self, _rig: &Rig, leg: &Leg<'_>) -> Vec<(GpuIndex, Lane)> {
        // Timed where the last upload lands; the downloads start with it.
        vec![(leg.dst, Lane::IN), (leg.src, Lane::OUT)]
    }

    fn ops_per_copy(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.chunk).max(1) * 6
    }

    fn enqueue(&mut self, rig: &Rig, leg: &Leg<'_>, bytes: u64) -> Result<(), CudaError> {
        let chunk = self.chunk;
        let ring = self.ring(rig, leg.src, leg.dst)?;
        let depth = ring.chunks.len();
        let (down, up) = (
            rig.stream(leg.src, Lane::OUT),
            rig.stream(leg.dst, Lane::IN),
        );
        let mut off = 0u64;
        loop {
            let len = (bytes - off).min(chunk);
            let slot = ring.next % depth;
            if ring.next >= depth {
                stream::wait(down, &ring.uploaded[slot])?;
            }
            stream::copy_to_host(down, leg.src_buf, off, &ring.chunks[slot], len)?;
            stream::record(down, &ring.downloaded[slot])?;
            stream::wait(up, &ring.downloaded[slot])?;
            stream::copy_from_host(up, &ring.chunks[slot], leg.dst_buf, off, len)?;
            stream::record(up, &ring.uploaded[slot])?;
            ring.next += 1;
            off += len;
            if off >= bytes {
                return Ok(());
            }
        }
    }
}
