//! Invariants the fuzz targets assert. The capability and walker invariants
//! are p2p-test-support's, which the property tests check too: one list for
//! both.

pub use p2p_test_support::capability_invariants as capability;
pub use p2p_test_support::walker_invariants as walkers;

pub mod nccl_xml;
pub mod vfio_tree;
