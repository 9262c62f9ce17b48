//! p2p-shared: the pure core of vp2p.
//!
//! No I/O lives here: every function takes bytes or values and returns values,
//! so the host tool, the guest tool, the fuzzers and the tests share one
//! implementation of the capability codec, the config-space walkers, the
//! topology model and the path classification.

pub mod bare_metal;
pub mod bdf;
pub mod capability;
pub mod check;
pub mod chooser;
pub mod classify;
#[cfg(feature = "cli")]
pub mod cli_assets;
pub mod clique;
pub mod dra;
pub mod excerpt;
pub mod gpu;
pub mod guest_layout;
pub mod hex;
pub mod iommu_groups;
pub mod kernel_cmdline;
pub mod nccl_rules;
pub mod nccl_topo;
pub mod pci;
pub mod pcie_cost;
pub mod picture;
pub mod report;
pub mod select;
pub mod size;
pub mod topology;

pub use bdf::Bdf;
pub use capability::{Clique, P2pCapability};
pub use classify::{classify, classify_functions, NvLinkBond, PairPath, PathClass, PeerRoute};
pub use gpu::{CudaOrdinal, GpuIndex};
pub use select::{GpuSelector, Role};
pub use size::{ByteSize, ByteSizeError};
pub use topology::{Topology, TopologyReadError, TopologyReader};
