//! `p2p-host serve`: a vfio-user server that presents GPUs with the P2P
//! clique capability in their config space, to any vfio-user VMM (QEMU >= 10.1
//! `-device vfio-user-pci`, Cloud Hypervisor `--user-device`).
//!
//! Layers, outermost first:
//! - [`start`] ([`endpoint`](self)): the socket (mode 0600, one client at a
//!   time, a second one refused with EBUSY) and the threads.
//! - The session guard (`session`, `wire`): frames every message and checks
//!   its size, indexes, ranges and descriptors against the device before the
//!   protocol code sees it; malformed messages get an error reply, never a crash.
//! - The protocol: `vfio_user::Server` from rust-vmm, serving [`ServedGpu`].
//! - [`ServedGpu`]: config accesses go through [`ConfigOverlay`](crate::overlay::ConfigOverlay),
//!   which owns the capability bytes and the patched next pointer (guest writes
//!   to them are dropped and reported as [`ServeEvent::DroppedWrite`]); BAR,
//!   interrupt, DMA and reset requests go to the backend.
//! - A [`GpuBackend`]: [`CapturedGpu`] (a captured config space with
//!   emulated BARs) or [`VfioGpu`] (a real device bound to vfio-pci: config
//!   through the VFIO device fd, BARs mapped by the client straight from
//!   that fd, interrupts and DMA handed to the kernel).
//!
//! ```no_run
//! use p2p_host::overlay::OverlayOptions;
//! use p2p_host::serve::{self, CaptureFiles, CapturedGpu, ServedGpu};
//! use p2p_topology::Clique;
//!
//! let files = CaptureFiles { config: "capture/0000:00:06.0/config".into(), resource: None };
//! let (gpu, scaled) = CapturedGpu::open(&files, Some(256 << 20))?;
//! for s in &scaled {
//!     eprintln!("{s}"); // "BAR2 scaled from 256 GiB to 256 MiB"
//! }
//! let served = ServedGpu::new(gpu, Clique::new(1)?, OverlayOptions::default())?;
//! let handle = serve::start(served, "/tmp/gpu0.sock".as_ref(), serve::discard())?;
//! handle.wait();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod backend;
mod bars;
mod captured;
mod device;
mod endpoint;
mod error;
mod events;
mod limits;
mod memory;
mod registers;
mod session;
mod socket;
mod spec;
pub mod vfio;
pub mod wire;

pub use backend::{
    DmaMapping, GpuBackend, IrqIndex, IrqInfo, IrqSet, RegionAccess, RegionIndex, RegionInfo,
    IRQ_INDEX_COUNT, REGION_COUNT,
};
pub use bars::{parse_resource, Bar, BarKind, BarLayout, ScaledBar};
pub use captured::{CaptureFiles, CapturedGpu};
pub use device::{BackendConfig, DeviceShape, ServedGpu};
pub use endpoint::{bind_socket, start, start_with_mode, ServeHandle, SocketMode};
pub use error::{ServeError, SpecError, SpecFileError};
pub use events::{discard, errno_name, EventSink, ServeEvent};
pub use limits::{
    quote, read_limited, ReadRefused, CONFIG_MAX, CONF_MAX, QUOTE_MAX, RESOURCE_MAX,
    SOCKET_PATH_MAX,
};
pub use memory::BarMemory;
pub use registers::{irq_infos, power_on, write_mask};
pub use spec::{
    check_distinct_sockets, parse_bar_size, parse_clique, parse_spec_file, read_spec_file, GpuSpec,
    SourcedSpec, SpecOrigin,
};
pub use vfio::{VfioError, VfioGpu};
