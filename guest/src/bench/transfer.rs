//! One timed sample: the legs of a transfer (one direction, or two at once)
//! are queued behind spin kernels, released together, and timed with events
//! on the stream each leg finishes on.

use std::collections::BTreeMap;
use std::ffi::c_void;

use cudarc::driver::{result, sys, CudaEvent};
use p2p_shared::report::bench::Mode;
use p2p_shared::report::size_label;

use super::rig::{Lane, Rig};
use crate::cuda::memory::{DeviceBuffer, PinnedBuffer};
use crate::cuda::{check, CudaError};

/// One direction of a transfer.
#[derive(Clone, Copy)]
pub struct Leg<'a> {
    pub mode: Mode,
    pub src: usize,
    pub dst: usize,
    pub src_buf: &'a DeviceBuffer,
    pub dst_buf: &'a DeviceBuffer,
}

impl Leg<'_> {
    /// The stream the leg's last operation runs on (where it is timed).
    pub fn finish_lane(&self) -> (usize, Lane) {
        match self.mode {
            Mode::SmRead | Mode::Staged => (self.dst, Lane::In),
            _ => (self.src, Lane::Out),
        }
    }

    /// Every stream the leg uses.
    fn lanes(&self) -> Vec<(usize, Lane)> {
        match self.mode {
            Mode::Staged => vec![(self.src, Lane::Out), (self.dst, Lane::In)],
            _ => vec![self.finish_lane()],
        }
    }
}

/// A ring of pinned chunks for one direction of the staged path, with the
/// events that order D2H (on the source) before H2D (on the destination) and
/// H2D before the chunk is reused.
struct Ring {
    chunks: Vec<PinnedBuffer>,
    chunk_bytes: usize,
    d2h_done: Vec<CudaEvent>,
    h2d_done: Vec<CudaEvent>,
    next: usize,
}

/// The staged path's rings, one per ordered pair, made on first use.
pub struct Staging {
    chunk_bytes: usize,
    depth: usize,
    rings: BTreeMap<(usize, usize), Ring>,
}

impl Staging {
    pub fn new(chunk_bytes: usize, depth: usize) -> Self {
        Self {
            chunk_bytes,
            depth: depth.max(2),
            rings: BTreeMap::new(),
        }
    }

    pub fn chunk_bytes(&self) -> usize {
        self.chunk_bytes
    }

    fn ring(&mut self, rig: &Rig, src: usize, dst: usize) -> Result<&mut Ring, CudaError> {
        if !self.rings.contains_key(&(src, dst)) {
            let mut chunks = Vec::new();
            let mut d2h_done = Vec::new();
            let mut h2d_done = Vec::new();
            for _ in 0..self.depth {
                chunks.push(PinnedBuffer::new(&rig.gpus[src], self.chunk_bytes)?);
                d2h_done.push(rig.sync_event(src)?);
                h2d_done.push(rig.sync_event(dst)?);
            }
            self.rings.insert(
                (src, dst),
                Ring {
                    chunks,
                    chunk_bytes: self.chunk_bytes,
                    d2h_done,
                    h2d_done,
                    next: 0,
                },
            );
        }
        self.rings.get_mut(&(src, dst)).ok_or(CudaError::Device {
            ordinal: src,
            what: "staging ring vanished".into(),
        })
    }
}

/// Operations a staged copy of `bytes` queues (for the queue-depth budget).
pub fn staged_ops(bytes: u64, chunk: usize) -> u64 {
    bytes.div_ceil(chunk as u64).max(1) * 6
}

fn bind(rig: &Rig, gpu: usize) -> Result<(), CudaError> {
    crate::cuda::memory::bind(&rig.gpus[gpu].ctx, gpu)
}

fn wait(rig: &Rig, gpu: usize, lane: Lane, ev: &CudaEvent) -> Result<(), CudaError> {
    bind(rig, gpu)?;
    // SAFETY: both handles are live; waiting on another context's event is allowed.
    unsafe {
        result::stream::wait_event(
            rig.stream(gpu, lane).cu_stream(),
            ev.cu_event(),
            sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
        )
    }
    .map_err(CudaError::at("cuStreamWaitEvent", gpu))
}

fn record(rig: &Rig, gpu: usize, lane: Lane, ev: &CudaEvent) -> Result<(), CudaError> {
    ev.record(rig.stream(gpu, lane))
        .map_err(CudaError::at("cuEventRecord", gpu))
}

/// Queues one copy of `bytes` for `leg`.
fn enqueue(rig: &Rig, staging: &mut Staging, leg: &Leg<'_>, bytes: u64) -> Result<(), CudaError> {
    let (src, dst) = (&rig.gpus[leg.src], &rig.gpus[leg.dst]);
    match leg.mode {
        Mode::Ce | Mode::Driver => {
            bind(rig, leg.src)?;
            // SAFETY: both pointers address allocations of at least `bytes`
            // bytes in the named contexts; the stream belongs to src's context.
            unsafe {
                result::memcpy_peer_async(
                    dst.ctx.cu_ctx(),
                    leg.dst_buf.ptr,
                    src.ctx.cu_ctx(),
                    leg.src_buf.ptr,
                    bytes as usize,
                    rig.stream(leg.src, Lane::Out).cu_stream(),
                )
            }
            .map_err(CudaError::at("cuMemcpyPeerAsync", leg.src))
        }
        Mode::SmWrite | Mode::SmRead => {
            let (gpu, lane) = leg.finish_lane();
            let (mut s, mut d, mut n) = (leg.src_buf.ptr, leg.dst_buf.ptr, bytes);
            let mut params = [
                (&mut s) as *mut u64 as *mut c_void,
                (&mut d) as *mut u64 as *mut c_void,
                (&mut n) as *mut u64 as *mut c_void,
            ];
            let (grid, block) = rig.copy_shape(gpu, bytes.div_ceil(16));
            rig.launch(gpu, lane, rig.copy_kernel(gpu), grid, block, &mut params)
        }
        Mode::Staged => enqueue_staged(rig, staging, leg, bytes),
        other => Err(CudaError::Device {
            ordinal: leg.src,
            what: format!("{other} is not a copy mode"),
        }),
    }
}

/// The staged pipeline: chunk i goes D2H into ring slot i % depth on the
/// source's out-stream, then H2D from that slot on the destination's
/// in-stream; a slot is reused only after its H2D finished.
fn enqueue_staged(
    rig: &Rig,
    staging: &mut Staging,
    leg: &Leg<'_>,
    bytes: u64,
) -> Result<(), CudaError> {
    let ring = staging.ring(rig, leg.src, leg.dst)?;
    let depth = ring.chunks.len();
    let mut off = 0u64;
    while off < bytes.max(1) {
        let len = (bytes - off).min(ring.chunk_bytes as u64) as usize;
        let slot = ring.next % depth;
        if ring.next >= depth {
            wait(rig, leg.src, Lane::Out, &ring.h2d_done[slot])?;
        }
        bind(rig, leg.src)?;
        // SAFETY: the slot holds chunk_bytes >= len bytes; the source range is
        // inside the source buffer; the stream belongs to src's context.
        let status = unsafe {
            sys::cuMemcpyDtoHAsync_v2(
                ring.chunks[slot].host.cast(),
                leg.src_buf.ptr + off,
                len,
                rig.stream(leg.src, Lane::Out).cu_stream(),
            )
        };
        check(status, "cuMemcpyDtoHAsync", leg.src)?;
        record(rig, leg.src, Lane::Out, &ring.d2h_done[slot])?;
        wait(rig, leg.dst, Lane::In, &ring.d2h_done[slot])?;
        bind(rig, leg.dst)?;
        // SAFETY: as above, for the destination range and dst's stream.
        let status = unsafe {
            sys::cuMemcpyHtoDAsync_v2(
                leg.dst_buf.ptr + off,
                ring.chunks[slot].host.cast_const().cast(),
                len,
                rig.stream(leg.dst, Lane::In).cu_stream(),
            )
        };
        check(status, "cuMemcpyHtoDAsync", leg.dst)?;
        record(rig, leg.dst, Lane::In, &ring.h2d_done[slot])?;
        ring.next += 1;
        off += len as u64;
        if bytes == 0 {
            break;
        }
    }
    Ok(())
}

/// What one timed sample gave: seconds per leg, and, when a hold failed,
/// why (the sample is then retried without holding).
pub struct Timed {
    pub seconds: Vec<f64>,
    pub hold_failed: Option<String>,
}

/// Runs `copies` copies of `bytes` on every leg at once and returns the
/// seconds each leg took. With `hold`, every stream involved is held by a
/// spin kernel while the copies are queued, so queuing cost is not timed; if
/// a spin kernel gives up before the host releases it (the host blocked
/// while queuing), the sample is taken again without a hold and says so.
pub fn timed(
    rig: &Rig,
    staging: &mut Staging,
    legs: &[Leg<'_>],
    bytes: u64,
    copies: u32,
    hold: bool,
) -> Result<Timed, CudaError> {
    match timed_once(rig, staging, legs, bytes, copies, hold)? {
        Ok(seconds) => Ok(Timed {
            seconds,
            hold_failed: None,
        }),
        Err(why) => {
            let seconds = timed_once(rig, staging, legs, bytes, copies, false)?.map_err(|w| {
                CudaError::Device {
                    ordinal: legs[0].src,
                    what: w,
                }
            })?;
            Ok(Timed {
                seconds,
                hold_failed: Some(why),
            })
        }
    }
}

fn timed_once(
    rig: &Rig,
    staging: &mut Staging,
    legs: &[Leg<'_>],
    bytes: u64,
    copies: u32,
    hold: bool,
) -> Result<Result<Vec<f64>, String>, CudaError> {
    let mut lanes: Vec<(usize, Lane)> = legs.iter().flat_map(|l| l.lanes()).collect();
    lanes.sort_by_key(|(g, l)| (*g, *l as usize));
    lanes.dedup();
    if hold {
        rig.arm();
        for (g, l) in &lanes {
            rig.hold(*g, *l)?;
        }
    }
    let mut marks = Vec::new();
    for leg in legs {
        let (g, l) = leg.finish_lane();
        let start = rig.event(g)?;
        if leg.mode == Mode::Staged {
            // The D2H side starts on the source's stream: make the timed
            // stream start from the same point.
            let go = rig.sync_event(leg.src)?;
            record(rig, leg.src, Lane::Out, &go)?;
            wait(rig, g, l, &go)?;
        }
        record(rig, g, l, &start)?;
        marks.push((start, rig.event(g)?));
    }
    let queued = std::time::Instant::now();
    for _ in 0..copies {
        for leg in legs {
            enqueue(rig, staging, leg, bytes)?;
        }
    }
    let queue_time = queued.elapsed();
    for (leg, (_, stop)) in legs.iter().zip(&marks) {
        let (g, l) = leg.finish_lane();
        record(rig, g, l, stop)?;
    }
    if hold {
        rig.release();
    }
    let mut secs = Vec::new();
    for (leg, (start, stop)) in legs.iter().zip(&marks) {
        let ms = start
            .elapsed_ms(stop)
            .map_err(CudaError::at("cuEventElapsedTime", leg.finish_lane().0))?;
        secs.push(f64::from(ms) / 1e3);
    }
    let stuck = if hold {
        rig.spin_timeouts()
    } else {
        Vec::new()
    };
    rig.synchronize_all()?;
    if let Some((gpu, lane, cycles)) = stuck.first() {
        return Ok(Err(format!(
            "{} {}: the spin kernel holding GPU{gpu}'s {lane} stream gave up after {cycles} cycles \
             ({} of {} held streams); queuing {copies} copies took the host {:.1} ms",
            legs[0].mode,
            size_label(bytes),
            stuck.len(),
            lanes.len(),
            queue_time.as_secs_f64() * 1e3
        )));
    }
    Ok(Ok(secs))
}
