//! p2p-host: vp2p on the host.
//!
//! Reads the real PCI topology from sysfs (works with GPUs bound to vfio-pci,
//! where `nvidia-smi` cannot run), discovers NVLink, writes what each VMM
//! needs, overlays the P2P capability on config space and serves GPUs over
//! vfio-user. The `p2p-host` command is host/cli; the Kubernetes edge is
//! p2p-host-kube (host/kube), which this library does not depend on.

pub mod check;
pub mod nvlink;
pub mod overlay;
pub mod serve;
pub mod snapshot;
pub mod sysfs;
pub mod vmm;
