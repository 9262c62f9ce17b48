//! The copy engine: `cuMemcpyPeerAsync` issued on the source GPU. With peer
//! access on it is a direct peer copy (`ce`); with peer access off the same
//! call takes the driver's own staged path (`driver`), as an application
//! without P2P gets it.

use p2p_report::bench::Mode;
use p2p_topology::GpuIndex;

use super::{Hold, Leg, Needs, PeerAccess, TransferMethod};
use crate::cuda::rig::{Lane, Rig};
use crate::cuda::{stream, CudaError};

/// `ce` or `driver`.
pub struct PeerCopy {
    driver: bool,
}

impl PeerCopy {
    /// `ce`: a peer copy by the source GPU's copy engine.
    pub fn engine() -> Self {
        PeerCopy { driver: false }
    }

    /// `driver`: the same call with peer access off.
    pub fn driver() -> Self {
        PeerCopy { driver: true }
    }
}

impl TransferMethod for PeerCopy {
    fn mode(&self) -> Mode {
        if self.driver {
            Mode::Driver
        } else {
            Mode::Ce
        }
    }

    fn needs(&self) -> Needs {
        let (peer_access, hold) = if self.driver {
            (PeerAccess::Off, Hold::Never)
        } else {
            (PeerAccess::Used, Hold::WithPeerAccess)
        };
        Needs {
            peer_access,
            host_staging: false,
            sm_kernel: false,
            hold,
        }
    }

    fn lanes(&self, _rig: &Rig, leg: &Leg<'_>) -> Vec<(GpuIndex, Lane)> {
        vec![(leg.src, Lane::OUT)]
    }

    fn enqueue(&mut self, rig: &Rig, leg: &Leg<'_>, bytes: u64) -> Result<(), CudaError> {
        let s = rig.stream(leg.src, Lane::OUT);
        stream::copy_peer(s, leg.src_buf, 0, leg.dst_buf, 0, bytes)
    }
}
