//! What a served GPU must provide: [`GpuBackend`].
//!
//! The vfio-user server ([`super::ServedGpu`]) speaks the protocol and lays the
//! P2P capability over the config space; a backend is the device behind it.
//! [`super::CapturedGpu`] is one: a config space captured from sysfs, with
//! RAM behind its BARs. [`super::VfioGpu`] is the other: a real device
//! bound to vfio-pci (config and trapped BAR accesses through the VFIO device
//! fd, BARs mapped by the client from that fd at [`GpuBackend::mmap_offset`]
//! in [`GpuBackend::mmap_areas`], eventfds to `VFIO_DEVICE_SET_IRQS`, DMA
//! windows in the IOMMU): every method maps to one VFIO ioctl or region access.
//!
//! Conventions, the same as VFIO's:
//! - Offsets are relative to the start of the region (config offset 0 is the
//!   vendor id). Accesses have any width and alignment; a backend may refuse
//!   one it cannot do (for example an I/O BAR access wider than 4 bytes) with
//!   an [`io::Error`], which the server answers as a protocol error.
//! - The server checks every access against [`GpuBackend::region`] before it
//!   reaches the backend: an access outside a region never arrives.
//! - Config accesses never see the P2P capability: the overlay owns those
//!   bytes, answers reads of them and drops writes to them.

use std::fs::File;
use std::io;
use std::os::fd::BorrowedFd;

/// The VFIO PCI region indexes (`VFIO_PCI_*_REGION_INDEX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RegionIndex {
    /// BAR register `n`, 0..=5 (the upper half of a 64-bit BAR is a region of size 0).
    Bar(u8),
    /// The expansion ROM (index 6).
    Rom,
    /// Config space (index 7).
    Config,
    /// Legacy VGA ranges (index 8).
    Vga,
}

/// Number of PCI regions a vfio-user PCI device reports (`VFIO_PCI_NUM_REGIONS`).
pub const REGION_COUNT: u32 = 9;

impl RegionIndex {
    /// Every region, in index order.
    pub fn all() -> impl Iterator<Item = RegionIndex> {
        (0..REGION_COUNT).filter_map(RegionIndex::from_raw)
    }

    /// The region with VFIO index `raw`, if there is one.
    pub fn from_raw(raw: u32) -> Option<Self> {
        match raw {
            0..=5 => Some(Self::Bar(raw as u8)),
            6 => Some(Self::Rom),
            7 => Some(Self::Config),
            8 => Some(Self::Vga),
            _ => None,
        }
    }

    /// Its VFIO index.
    pub fn raw(self) -> u32 {
        match self {
            Self::Bar(n) => u32::from(n),
            Self::Rom => 6,
            Self::Config => 7,
            Self::Vga => 8,
        }
    }
}

/// What a region offers the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RegionAccess {
    /// The client may read the region (`VFIO_REGION_INFO_FLAG_READ`).
    pub read: bool,
    /// The client may write the region (`VFIO_REGION_INFO_FLAG_WRITE`).
    pub write: bool,
    /// The client may map the region's file descriptor ([`GpuBackend::mmap_fd`]).
    pub mmap: bool,
}

/// One region as `VFIO_USER_DEVICE_GET_REGION_INFO` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RegionInfo {
    /// Bytes; 0 means absent (an unimplemented BAR, the upper half of a 64-bit
    /// BAR, no ROM).
    pub size: u64,
    /// What the client may do with the region; all false when it is absent.
    pub access: RegionAccess,
}

impl RegionInfo {
    /// A region the device does not have: size 0, no access.
    pub const ABSENT: RegionInfo = RegionInfo {
        size: 0,
        access: RegionAccess {
            read: false,
            write: false,
            mmap: false,
        },
    };

    /// Whether `len` bytes at `offset` lie inside the region.
    pub fn contains(&self, offset: u64, len: u64) -> bool {
        offset.checked_add(len).is_some_and(|end| end <= self.size)
    }
}

/// The VFIO PCI interrupt indexes (`VFIO_PCI_*_IRQ_INDEX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IrqIndex {
    /// Legacy INTx pin interrupt (index 0).
    Intx,
    /// MSI, from the MSI capability (index 1).
    Msi,
    /// MSI-X, its table and PBA in a BAR (index 2).
    Msix,
    /// AER error notification.
    Err,
    /// Device release request.
    Req,
}

/// Number of interrupt indexes a vfio-user PCI device reports (`VFIO_PCI_NUM_IRQS`).
pub const IRQ_INDEX_COUNT: u32 = 5;

impl IrqIndex {
    /// Every interrupt index, in VFIO index order (`ALL[i].raw() == i`).
    pub const ALL: [IrqIndex; 5] = [
        IrqIndex::Intx,
        IrqIndex::Msi,
        IrqIndex::Msix,
        IrqIndex::Err,
        IrqIndex::Req,
    ];

    /// The interrupt index with VFIO number `raw` (0..=4), if there is one.
    pub fn from_raw(raw: u32) -> Option<Self> {
        Self::ALL.get(usize::try_from(raw).ok()?).copied()
    }

    /// Its VFIO interrupt index (`VFIO_PCI_*_IRQ_INDEX`).
    pub fn raw(self) -> u32 {
        self as u32
    }

    /// "INTx", "MSI", "MSI-X", "ERR", "REQ".
    pub fn label(self) -> &'static str {
        match self {
            IrqIndex::Intx => "INTx",
            IrqIndex::Msi => "MSI",
            IrqIndex::Msix => "MSI-X",
            IrqIndex::Err => "ERR",
            IrqIndex::Req => "REQ",
        }
    }
}

/// One interrupt index as `VFIO_USER_DEVICE_GET_IRQ_INFO` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IrqInfo {
    /// Vectors; 0 means the device has no such interrupt.
    pub count: u32,
    /// `VFIO_IRQ_INFO_*` flags (EVENTFD, MASKABLE, AUTOMASKED, NORESIZE).
    pub flags: u32,
}

/// A `VFIO_USER_DEVICE_SET_IRQS` request, already checked against
/// [`GpuBackend::irq_info`]: `start + count` vectors exist (or `count` is 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IrqSet {
    /// The interrupt index whose vectors the request addresses.
    pub index: IrqIndex,
    /// `VFIO_IRQ_SET_DATA_*` | `VFIO_IRQ_SET_ACTION_*`.
    pub flags: u32,
    /// First vector of the index affected.
    pub start: u32,
    /// Vectors affected from `start`; 0 with DATA_NONE and ACTION_TRIGGER
    /// unwires every vector of the index.
    pub count: u32,
}

/// A `VFIO_USER_DMA_MAP` request: guest memory the device may access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmaMapping {
    /// Device (I/O virtual) address.
    pub iova: u64,
    /// Bytes mapped from `iova`.
    pub size: u64,
    /// Offset of the range in the file descriptor that came with it.
    pub offset: u64,
    /// The device may read the range (`VFIO_DMA_MAP_FLAG_READ`).
    pub readable: bool,
    /// The device may write the range (`VFIO_DMA_MAP_FLAG_WRITE`).
    pub writable: bool,
}

/// The device behind a served GPU; see the module docs.
pub trait GpuBackend: Send {
    /// Bytes of config space: 256 (conventional) or 4096 (PCI Express).
    fn config_len(&self) -> u64;

    /// Reads config bytes as the device holds them (no P2P capability here).
    fn config_read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;

    /// Writes config bytes; read-only bits keep their value, as on hardware.
    fn config_write(&mut self, offset: u64, data: &[u8]) -> io::Result<()>;

    /// A BAR, the ROM or the VGA region (the server describes config itself
    /// from [`GpuBackend::config_len`]).
    fn region(&self, index: RegionIndex) -> RegionInfo;

    /// A descriptor the client may `mmap` for a region whose access has
    /// `mmap` set; the mapping at file offset 0 is the region's first byte.
    fn mmap_fd(&self, index: RegionIndex) -> Option<BorrowedFd<'_>>;

    /// Where the region starts in [`GpuBackend::mmap_fd`]'s file: the client
    /// maps the region's byte `o` at file offset `mmap_offset + o` (a VFIO
    /// device fd puts each region at its own offset). Default 0.
    fn mmap_offset(&self, index: RegionIndex) -> u64 {
        let _ = index;
        0
    }

    /// The parts of the region the client may map, `(offset, size)` relative
    /// to the region; the rest is accessed through the server. Default: the
    /// whole region when it is mappable.
    fn mmap_areas(&self, index: RegionIndex) -> Vec<(u64, u64)> {
        let info = self.region(index);
        if info.access.mmap {
            vec![(0, info.size)]
        } else {
            Vec::new()
        }
    }

    /// Reads BAR or ROM bytes.
    fn region_read(&self, index: RegionIndex, offset: u64, buf: &mut [u8]) -> io::Result<()>;

    /// Writes BAR bytes.
    fn region_write(&mut self, index: RegionIndex, offset: u64, data: &[u8]) -> io::Result<()>;

    /// The interrupts of one index.
    fn irq_info(&self, index: IrqIndex) -> IrqInfo;

    /// Wires, masks or triggers interrupts; `fds` are the eventfds that came
    /// with the request (`VFIO_IRQ_SET_DATA_EVENTFD`), one per vector or none.
    fn set_irqs(&mut self, set: IrqSet, fds: Vec<File>) -> io::Result<()>;

    /// Lets the device reach guest memory; `fd` backs it when the VMM shares it.
    fn dma_map(&mut self, map: DmaMapping, fd: Option<File>) -> io::Result<()>;

    /// Takes a range away again; `all` unmaps everything.
    fn dma_unmap(&mut self, iova: u64, size: u64, all: bool) -> io::Result<()>;

    /// Function-level reset: config back to its power-on state, interrupts unwired.
    fn reset(&mut self) -> io::Result<()>;

    /// The client is gone: nothing of it may stay reachable. Default: unmap
    /// every DMA range, then [`GpuBackend::reset`].
    fn release(&mut self) -> io::Result<()> {
        let unmapped = self.dma_unmap(0, 0, true);
        let reset = self.reset();
        unmapped.and(reset)
    }
}
