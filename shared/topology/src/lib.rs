//! p2p-topology: the ground the rest of vp2p stands on.
//!
//! PCI addresses and config-space walkers, the P2P clique capability the
//! NVIDIA driver reads, the host's PCI topology with its path classes and
//! IOMMU groups, the guest's PCI tree (and NCCL's topology file of it), and
//! the pre-boot check built from them. Pure: every function takes bytes or values and returns values, so
//! the host tool, the guest tool, the fuzzers and the tests share one
//! implementation.

pub mod bdf;
pub mod capability;
pub mod check;
pub mod classify;
pub mod excerpt;
pub mod gpu;
pub mod guest_layout;
pub mod hex;
pub mod iommu_groups;
pub mod kernel_cmdline;
pub mod nccl_topo;
pub mod pci;
pub mod pcie_cost;
pub mod select;
pub mod size;
pub mod topology;

pub use bdf::Bdf;
pub use capability::{Clique, P2pCapability};
pub use classify::{classify, classify_functions, NvLinkBond, PairPath, PathClass, PeerRoute};
pub use gpu::{CudaOrdinal, GpuIndex};
pub use iommu_groups::IommuGroup;
pub use select::{GpuSelector, Role};
pub use size::{ByteSize, ByteSizeError};
pub use topology::{Topology, TopologyReadError, TopologyReader};
