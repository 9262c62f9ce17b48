//! The copy engine: `cuMemcpyPeerAsync` issued on the source GPU. With peer
//! access on it is a direct peer copy ([`CopyEngine`]); with peer access off
//! the same call takes the driver's own staged path ([`DriverPath`]).

use p2p_shared::report::bench::Mode;
use p2p_shared::GpuIndex;

use super::{Hold, Leg, Needs, PeerAccess, TransferMethod};
use crate::bench::rig::{Lane, Rig};
use crate::cuda::{stream, CudaError};

/// `ce`: a peer copy by the source GPU's copy engine.
pub struct CopyEngine;

/// `driver`: the same call with peer access off, as an application without
/// P2P gets it.
pub struct DriverPath;

fn enqueue(rig: &Rig, leg: &Leg<'_>, bytes: u64) -> Result<(), CudaError> {
    let s = rig.stream(leg.src, Lane::OUT);
    stream::copy_peer(s, leg.src_buf, 0, leg.dst_buf, 0, bytes)
}

impl TransferMethod for CopyEngine {
    fn mode(&self) -> Mode {
        Mode::Ce
    }

    fn needs(&self) -> Needs {
        Needs {
            peer_access: PeerAccess::Used,
            host_staging: false,
            sm_kernel: false,
            hold: Hold::WithPeerAccess,
        }
    }

    fn lanes(&self, _rig: &Rig, leg: &Leg<'_>) -> Vec<(GpuIndex, Lane)> {
        vec![(leg.src, Lane::OUT)]
    }

    fn enqueue(&mut self, rig: &Rig, leg: &Leg<'_>, bytes: u64) -> Result<(), CudaError> {
        enqueue(rig, leg, bytes)
    }
}

impl TransferMethod for DriverPath {
    fn mode(&self) -> Mode {
        Mode::Driver
    }

    fn needs(&self) -> Needs {
        Needs {
            peer_access: PeerAccess::Off,
            host_staging: false,
            sm_kernel: false,
            hold: Hold::Never,
        }
    }

    fn lanes(&self, _rig: &Rig, leg: &Leg<'_>) -> Vec<(GpuIndex, Lane)> {
        vec![(leg.src, Lane::OUT)]
    }

    fn enqueue(&mut self, rig: &Rig, leg: &Leg<'_>, bytes: u64) -> Result<(), CudaError> {
        enqueue(rig, leg, bytes)
    }
}
