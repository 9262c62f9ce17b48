//! SM copies: the copy kernel on the destination GPU reading the peer's
//! memory (`sm-read`), or on the source GPU writing it (`sm-write`).

use p2p_report::bench::Mode;
use p2p_topology::GpuIndex;

use super::{Hold, Leg, Needs, PeerAccess, TransferMethod};
use crate::cuda::rig::{Lane, Rig};
use crate::cuda::CudaError;

/// `sm-read` or `sm-write`.
pub struct SmCopyMethod {
    write: bool,
}

impl SmCopyMethod {
    /// The destination's kernel reads the source.
    pub fn read() -> Self {
        SmCopyMethod { write: false }
    }

    /// The source's kernel writes the destination.
    pub fn write() -> Self {
        SmCopyMethod { write: true }
    }

    /// The GPU and stream the kernel runs on.
    fn lane(&self, leg: &Leg<'_>) -> (GpuIndex, Lane) {
        if self.write {
            (leg.src, Lane::OUT)
        } else {
            (leg.dst, Lane::IN)
        }
    }
}

impl TransferMethod for SmCopyMethod {
    fn mode(&self) -> Mode {
        if self.write {
            Mode::SmWrite
        } else {
            Mode::SmRead
        }
    }

    fn needs(&self) -> Needs {
        Needs {
            peer_access: PeerAccess::Required,
            host_staging: false,
            sm_kernel: true,
            hold: Hold::Always,
        }
    }

    fn lanes(&self, _rig: &Rig, leg: &Leg<'_>) -> Vec<(GpuIndex, Lane)> {
        vec![self.lane(leg)]
    }

    fn enqueue(&mut self, rig: &Rig, leg: &Leg<'_>, bytes: u64) -> Result<(), CudaError> {
        let (gpu, lane) = self.lane(leg);
        rig.sm_copy(gpu, lane, leg.src_buf, 0, leg.dst_buf, 0, bytes)
    }
}
