//! p2p-allocation: which GPUs a VM gets, and which of them may peer.
//!
//! The clique plan (GPUs grouped by the class of their paths, with reasons),
//! the chooser (the best set of GPUs and NICs for a VM on a host), and the
//! DRA ResourceSlices that publish both to Kubernetes' scheduler. Pure: the
//! host's topology comes in, plans and publications go out.

pub mod chooser;
pub mod clique;
pub mod dra;
