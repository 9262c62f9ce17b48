//! p2p-nccl: what NCCL will do in a VM, and why: NCCL 2.28.3's own rules applied to the
//! system it would build from a topology file and the VM.
//!
//! [`xml`] reads a file or NCCL's dump; [`fill`] makes NCCL's system of it in
//! a VM (`ncclTopoGetSystem`); [`graph`] builds NCCL's nodes, links and paths;
//! [`predict`] applies the P2P, SHM, network and GPUDirect RDMA rules under
//! the variables of [`env`]. [`loader`] says first whether NCCL accepts the
//! file at all. The rules are NCCL's as its source states them
//! (src/graph/paths.cc, topo.cc, xml.cc; src/transport/p2p.cc, shm.cc); not
//! modelled: PXN (reaching a NIC through an NVLink peer; `NCCL_PXN_DISABLE=1`
//! makes the model exact), C2C platforms, multi-node (MNNVL), NIC filters
//! (`NCCL_IB_HCA`), NCCL_NET plugins other than IB and sockets.

pub mod env;
pub mod fill;
pub mod graph;
pub mod loader;
pub mod observed;
pub mod path;
pub mod predict;
pub mod xml;

pub use env::NcclEnv;
pub use fill::{effective, CpuIdentity, Effective, VmFacts, VmFunction, VmNic};
pub use graph::Graph;
pub use path::PathType;
pub use predict::{predict, DriverP2p, GpuVerdict, PairVerdict, Prediction, Transport};
pub use xml::{parse, TopoXml, TopoXmlError};
