//! p2p-test-support: what vp2p's tests, benches and fuzzers share, so that
//! none of them includes another crate's files by path.
//!
//! - [`fixtures`]: the repository's committed trees and where builds go;
//! - [`topologies`]: topologies built in memory, one builder for every test
//!   and bench that needs a host the fixtures do not have;
//! - [`capability_invariants`], [`walker_invariants`]: what must hold for any
//!   bytes given to the capability codec and the config-space walkers, checked
//!   by the fuzz targets and the property tests alike;
//! - [`vfio_user_client`]: the captured H200 served on a socket, and a raw
//!   vfio-user client that can send anything;
//! - [`process`]: child processes that end when their test does, pass or fail.
//!
//! The end-to-end harness (the Kubernetes control plane, the kubelet's
//! clients, QEMU guests) is `p2p-tests`' library, which builds on this one.

pub mod capability_invariants;
pub mod fixtures;
pub mod process;
pub mod topologies;
pub mod vfio_user_client;
pub mod walker_invariants;

pub use fixtures::{fixture_dir, repo_root, target_dir, unpack_fixture};
