//! Transfer methods: one small type per way of moving bytes between two GPUs
//! (copy engine, the driver's own path, SM kernels, host staging, all of
//! them at once), each saying what it needs and queuing one copy; and the
//! timing every method shares (legs queued behind spin kernels, released
//! together, timed with events). Adding a copy mode is a new file here, a
//! line in [`method`], and its name in the report's `Mode`.

mod ce;
mod max;
mod sm;
mod staged;

use p2p_report::bench::{Mode, TransferPart};
use p2p_topology::{ByteSize, GpuIndex};

use crate::cuda::memory::DeviceBuffer;
use crate::cuda::rig::{Lane, Rig};
use crate::cuda::CudaError;

pub use staged::StagedPipeline;

/// One direction of a transfer: source GPU and buffer, destination GPU and
/// buffer. The two GPUs may be the same (a device-local copy).
#[derive(Clone, Copy)]
pub struct Leg<'a> {
    /// GPU the bytes leave.
    pub src: GpuIndex,
    /// GPU the bytes reach.
    pub dst: GpuIndex,
    /// Where they are read.
    pub src_buf: &'a DeviceBuffer,
    /// Where they are written.
    pub dst_buf: &'a DeviceBuffer,
}

/// What a method does with peer access between the pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerAccess {
    /// Cannot run without it (the pair is skipped when it is off).
    Required,
    /// Uses it when on; runs without it too (the copy engine then takes the
    /// driver's staged path).
    Used,
    /// Needs it off for the run (the driver's own path).
    Off,
    /// Does not care.
    Unused,
}

/// Whether a method's queued copies may wait behind a spin kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Always.
    Always,
    /// Only with peer access on: without it the driver blocks the host at
    /// enqueue until the stream is idle, so a held stream would never run.
    WithPeerAccess,
    /// Never (the driver's path always blocks).
    Never,
}

/// What a method needs, as `bench --list-modes` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needs {
    /// Peer access between the pair.
    pub peer_access: PeerAccess,
    /// Pinned host memory to stage through.
    pub host_staging: bool,
    /// The SM copy kernel.
    pub sm_kernel: bool,
    /// Whether copies may be held by the spin kernel.
    pub hold: Hold,
}

/// A way of moving bytes from one GPU to another.
pub trait TransferMethod {
    /// The mode it measures.
    fn mode(&self) -> Mode;
    /// What it needs before it can run.
    fn needs(&self) -> Needs;
    /// The streams one leg uses; the first is where the leg is timed.
    fn lanes(&self, rig: &Rig, leg: &Leg<'_>) -> Vec<(GpuIndex, Lane)>;
    /// Operations one copy of `bytes` queues on its busiest stream (the
    /// spin kernel's hold budget counts them).
    fn ops_per_copy(&self, _bytes: u64) -> u64 {
        1
    }
    /// Gets ready to move `bytes` on `legs` (a split method measures its
    /// parts here); called before the warm-up.
    fn calibrate(&mut self, _rig: &Rig, _legs: &[Leg<'_>], _bytes: u64) -> Result<(), CudaError> {
        Ok(())
    }
    /// Queues one copy of `bytes` for `leg`.
    fn enqueue(&mut self, rig: &Rig, leg: &Leg<'_>, bytes: u64) -> Result<(), CudaError>;
    /// The parts of a split transfer after [`TransferMethod::calibrate`], for
    /// the report; empty for a single engine.
    fn parts(&self) -> Vec<TransferPart> {
        Vec::new()
    }
    /// GB/s the split itself moved in the calibration; None for a single
    /// engine.
    fn split_gbps(&self) -> Option<f64> {
        None
    }
}

/// Settings the methods take from the bench's options.
#[derive(Debug, Clone, Copy)]
pub struct MethodConfig {
    /// Chunk of the staged pipeline.
    pub staged_chunk: ByteSize,
    /// Chunks in flight in the staged pipeline.
    pub staged_depth: usize,
}

/// The method for a copy mode; None for modes that are not copies (NCCL,
/// ping-pong).
pub fn method(mode: Mode, cfg: &MethodConfig) -> Option<Box<dyn TransferMethod>> {
    Some(match mode {
        Mode::Ce => Box::new(ce::PeerCopy::engine()),
        Mode::Driver => Box::new(ce::PeerCopy::driver()),
        Mode::SmRead => Box::new(sm::SmCopyMethod::read()),
        Mode::SmWrite => Box::new(sm::SmCopyMethod::write()),
        Mode::Staged => Box::new(StagedPipeline::new(cfg.staged_chunk, cfg.staged_depth)),
        Mode::Max => Box::new(max::Max::default()),
        Mode::Nccl | Mode::NcclNoP2p | Mode::Pingpong => return None,
    })
}

/// Copies per timed run (a bench sample, a calibration): enough bytes to time
/// well (about 2 GiB), at least 4, at most 300 (small copies: enough to
/// amortise the restart after release, few enough to stay inside the bench's
/// hold budget).
pub fn copies_for(bytes: u64) -> u32 {
    ((2u64 << 30) / bytes.max(1)).clamp(4, 300) as u32
}

/// What one timed run gave: seconds per leg, and, when a hold failed, why
/// (the run is then retaken without holding).
pub struct Timed {
    /// Seconds each leg took for all its copies.
    pub seconds: Vec<f64>,
    /// Why the spin hold gave up, when it did.
    pub hold_failed: Option<String>,
}

/// Runs `copies` copies of `bytes` on every leg at once and returns the
/// seconds each leg took. With `hold`, every stream involved is held by a
/// spin kernel while the copies are queued, so queuing cost is not timed; if
/// a spin kernel gives up before the host releases it (the host blocked
/// while queuing), the run is taken again without a hold and says so.
pub fn timed(
    rig: &Rig,
    method: &mut dyn TransferMethod,
    legs: &[Leg<'_>],
    bytes: u64,
    copies: u32,
    hold: bool,
) -> Result<Timed, CudaError> {
    match timed_once(rig, method, legs, bytes, copies, hold)? {
        Ok(seconds) => Ok(Timed {
            seconds,
            hold_failed: None,
        }),
        Err(why) => {
            let seconds = timed_once(rig, method, legs, bytes, copies, false)?.map_err(|w| {
                CudaError::Device {
                    ordinal: rig.ordinal(legs[0].src),
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

/// One timed run. A leg on several streams starts when its timing stream
/// does (the others wait for its start event) and ends when all of them have
/// (its timing stream waits for theirs before the stop event).
fn timed_once(
    rig: &Rig,
    method: &mut dyn TransferMethod,
    legs: &[Leg<'_>],
    bytes: u64,
    copies: u32,
    hold: bool,
) -> Result<Result<Vec<f64>, String>, CudaError> {
    let leg_lanes: Vec<Vec<(GpuIndex, Lane)>> = legs.iter().map(|l| method.lanes(rig, l)).collect();
    let mut all: Vec<(GpuIndex, Lane)> = leg_lanes.iter().flatten().copied().collect();
    all.sort();
    all.dedup();
    if hold {
        rig.arm();
        for (g, l) in &all {
            rig.hold(*g, *l)?;
        }
    }
    let mut marks = Vec::new();
    for lanes in &leg_lanes {
        let (g, l) = lanes[0];
        let start = rig.event(g)?;
        rig.record(g, l, &start)?;
        for &(g2, l2) in &lanes[1..] {
            rig.wait(g2, l2, &start)?;
        }
        marks.push((start, rig.event(g)?));
    }
    let queued = std::time::Instant::now();
    for _ in 0..copies {
        for leg in legs {
            method.enqueue(rig, leg, bytes)?;
        }
    }
    let queue_time = queued.elapsed();
    for (lanes, (_, stop)) in leg_lanes.iter().zip(&marks) {
        let (g, l) = lanes[0];
        for &(g2, l2) in &lanes[1..] {
            let done = rig.sync_event(g2)?;
            rig.record(g2, l2, &done)?;
            rig.wait(g, l, &done)?;
        }
        rig.record(g, l, stop)?;
    }
    if hold {
        rig.release();
    }
    let mut secs = Vec::new();
    for (lanes, (start, stop)) in leg_lanes.iter().zip(&marks) {
        let ms = start
            .elapsed_ms(stop)
            .map_err(CudaError::at("cuEventElapsedTime", rig.ordinal(lanes[0].0)))?;
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
            "{} {}: the spin kernel holding {gpu}'s {lane} stream gave up after {cycles} cycles \
             ({} of {} held streams); queuing {copies} copies took the host {:.1} ms",
            method.mode(),
            ByteSize(bytes),
            stuck.len(),
            all.len(),
            queue_time.as_secs_f64() * 1e3
        )));
    }
    Ok(Ok(secs))
}

#[cfg(test)]
mod tests {
    use super::copies_for;

    #[test]
    fn copies_time_about_two_gib_within_bounds() {
        assert_eq!(copies_for(4), 300);
        assert_eq!(copies_for(256 << 20), 8);
        assert_eq!(copies_for(1 << 30), 4);
    }
}
