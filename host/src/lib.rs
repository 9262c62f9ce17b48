//! p2p-host: vp2p on the host.
//!
//! Reads the real PCI topology from sysfs (works with GPUs bound to vfio-pci,
//! where `nvidia-smi` cannot run), discovers NVLink, and captures trees for tests.

pub mod bounded_file;
pub mod check;
pub mod device_plugin;
pub mod dra_driver;
pub mod grpc;
pub mod kubevirt_plugin;
pub mod nvlink;
pub mod overlay;
pub mod serve;
pub mod snapshot;
pub mod sysfs;
pub mod vmm;
