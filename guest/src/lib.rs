//! p2p-guest: vp2p inside the VM.

pub mod cuda;
pub mod decide;
pub mod probe;
