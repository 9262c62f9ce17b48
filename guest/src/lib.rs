//! p2p-guest: vp2p inside the VM.

pub mod bench;
pub mod compare;
pub mod cuda;
pub mod decide;
pub mod doctor;
pub mod nccl_topo;
pub mod probe;
pub mod transfer;
pub mod verify;
