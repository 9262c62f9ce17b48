//! [`VfioGpu`]: a real device bound to vfio-pci, as a [`GpuBackend`](super::GpuBackend).
//!
//! - `group`: the IOMMU group from sysfs and whether it is viable.
//! - `sys`: every ioctl (the only `unsafe` of the backend).
//! - `regions`: region info, sparse mmap areas, where the MSI-X table is.
//! - `dma`: the client's DMA windows, vm-memory regions, in the type-1 IOMMU.
//! - `gpu`: the backend itself.
//!
//! What crosses the socket and what does not: config accesses go through
//! the server (the overlay lays the P2P capability over the device's config,
//! read through the VFIO device fd); BARs are announced as mmap-able regions
//! whose descriptor *is* the VFIO device fd at the region's offset, so the
//! client maps the device itself and its loads and stores never reach the
//! server; only the parts VFIO leaves out of the sparse mmap areas (the
//! MSI-X table and PBA) would, and those the server refuses: the client
//! emulates MSI-X and wires vectors with `SET_IRQS`. The client's eventfds
//! go to `VFIO_DEVICE_SET_IRQS`, so the kernel signals them directly; DMA
//! windows map the client's own memory into the IOMMU.

mod dma;
mod gpu;
mod group;
mod regions;
mod sys;

use std::io;
use std::path::PathBuf;

use p2p_topology::Bdf;

pub use dma::{DmaWindows, Iommu, PAGE};
pub use gpu::VfioGpu;
pub use group::{driver_of, GroupMembers};
pub use regions::{find_cap, MsixTrap, VfioRegion};
pub use sys::HostVirtAddr;
/// The IOVA a client's DMA window is mapped at (vm-memory's guest address:
/// the windows are guest memory keyed by IOVA).
pub use vm_memory::GuestAddress;

/// Why a VFIO device cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum VfioError {
    /// No such function in sysfs.
    #[error("{bdf}: no such PCI function ({} does not exist)", path.display())]
    NoDevice {
        /// The function asked for.
        bdf: Bdf,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// The function has no IOMMU group (no IOMMU, or it is off).
    #[error("{bdf}: no IOMMU group (is the IOMMU on? intel_iommu=on / amd_iommu=on on the kernel command line)")]
    NoGroup {
        /// The function.
        bdf: Bdf,
    },
    /// A sysfs directory could not be read.
    #[error("{}: {source}", path.display())]
    Sysfs {
        /// The directory.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// Another function of the group is bound to a driver that keeps VFIO out.
    #[error("{bdf}: IOMMU group {group} is not viable: {function} is bound to {driver} (bind every function of the group to vfio-pci, or unbind it)")]
    NotViable {
        /// The function to serve.
        bdf: Bdf,
        /// Its group.
        group: p2p_topology::IommuGroup,
        /// The function in the way.
        function: String,
        /// Its driver.
        driver: String,
    },
    /// The function itself is not bound to vfio-pci.
    #[error("{bdf}: is bound to {driver}, not vfio-pci (echo vfio-pci > /sys/bus/pci/devices/{bdf}/driver_override, then bind it)")]
    NotVfioPci {
        /// The function.
        bdf: Bdf,
        /// Its driver, or "no driver".
        driver: String,
    },
    /// A step of opening the device failed.
    #[error("{bdf}: {step}: {source}")]
    Open {
        /// The function.
        bdf: Bdf,
        /// What was being done ("opening /dev/vfio/vfio", "VFIO_SET_IOMMU", ...).
        step: String,
        /// The error.
        source: io::Error,
    },
    /// The device does not look like a PCI device VFIO serves.
    #[error("{bdf}: {why}")]
    Unsupported {
        /// The function.
        bdf: Bdf,
        /// What is missing.
        why: String,
    },
}
