//! [`ServedGpu`]: a backend with the P2P capability laid over its config
//! space, as the vfio-user protocol thread serves it.

use std::fs::File;
use std::io;

use p2p_topology::Clique;
use vfio_bindings::bindings::vfio::{
    vfio_region_info, vfio_region_sparse_mmap_area, VFIO_DMA_UNMAP_FLAG_ALL,
    VFIO_REGION_INFO_FLAG_MMAP, VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_user::{DmaMapFlags, DmaUnmapFlags, ServerBackend, ServerRegion, SparseArea};

use super::backend::{
    DmaMapping, GpuBackend, IrqIndex, IrqInfo, IrqSet, RegionIndex, RegionInfo, IRQ_INDEX_COUNT,
    REGION_COUNT,
};
use super::error::ServeError;
use super::events::{discard, EventSink, ServeEvent};
use super::wire::cmd;
use crate::overlay::{ConfigOverlay, OverlayOptions, PhysicalConfig, Placement};

/// The backend's config space, as the overlay's physical side.
#[derive(Debug)]
pub struct BackendConfig<B>(pub B);

impl<B: GpuBackend> PhysicalConfig for BackendConfig<B> {
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.0.config_read(offset, buf)
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.0.config_write(offset, data)
    }
}

/// Regions and interrupts of a served GPU: what the protocol announces and
/// what every access is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceShape {
    /// Indexed by VFIO region index (0..=8).
    pub regions: [RegionInfo; REGION_COUNT as usize],
    /// Indexed by VFIO interrupt index (0..=4).
    pub irqs: [IrqInfo; IRQ_INDEX_COUNT as usize],
}

impl DeviceShape {
    /// The region with VFIO index `raw`; None past index 8.
    pub fn region(&self, raw: u32) -> Option<&RegionInfo> {
        self.regions.get(usize::try_from(raw).ok()?)
    }

    /// The interrupt index with VFIO number `raw`; None past index 4.
    pub fn irq(&self, raw: u32) -> Option<&IrqInfo> {
        self.irqs.get(usize::try_from(raw).ok()?)
    }
}

/// A backend served with the P2P capability; see the module docs.
pub struct ServedGpu<B: GpuBackend> {
    overlay: ConfigOverlay<BackendConfig<B>>,
    events: EventSink,
}

impl<B: GpuBackend> std::fmt::Debug for ServedGpu<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServedGpu")
            .field("placement", self.overlay.placement())
            .finish_non_exhaustive()
    }
}

impl<B: GpuBackend> ServedGpu<B> {
    /// Places the capability for `clique` in the backend's config space.
    pub fn new(backend: B, clique: Clique, options: OverlayOptions) -> Result<Self, ServeError> {
        let overlay = ConfigOverlay::from_physical(BackendConfig(backend), clique, options)?;
        Ok(Self {
            overlay,
            events: discard(),
        })
    }

    /// Where the events of this GPU go (default: nowhere).
    pub fn set_events(&mut self, sink: EventSink) {
        self.events = sink;
    }

    /// Where the overlay put the P2P capability and which bytes it patched.
    pub fn placement(&self) -> &Placement {
        self.overlay.placement()
    }

    /// The device behind the overlay; its config reads do not show the capability.
    pub fn backend(&self) -> &B {
        &self.overlay.physical().0
    }

    /// The device behind the overlay, mutably; writes through it bypass the overlay.
    pub fn backend_mut(&mut self) -> &mut B {
        &mut self.overlay.physical_mut().0
    }

    /// Regions (config from the backend's length, the rest from the backend)
    /// and interrupts.
    pub fn shape(&self) -> DeviceShape {
        let b = self.backend();
        let mut regions = [RegionInfo::ABSENT; REGION_COUNT as usize];
        for idx in RegionIndex::all() {
            regions[idx.raw() as usize] = b.region(idx);
        }
        regions[RegionIndex::Config.raw() as usize] = RegionInfo {
            size: b.config_len(),
            access: super::backend::RegionAccess {
                read: true,
                write: true,
                mmap: false,
            },
        };
        DeviceShape {
            regions,
            irqs: IrqIndex::ALL.map(|i| b.irq_info(i)),
        }
    }

    /// The region table `vfio_user::Server` announces, with mmap descriptors
    /// (borrowed from the backend: the GPU must outlive the server).
    pub fn server_regions(&self) -> Vec<ServerRegion> {
        let shape = self.shape();
        RegionIndex::all()
            .map(|idx| {
                let info = shape.regions[idx.raw() as usize];
                let mut flags = 0;
                if info.access.read {
                    flags |= VFIO_REGION_INFO_FLAG_READ;
                }
                if info.access.write {
                    flags |= VFIO_REGION_INFO_FLAG_WRITE;
                }
                let fd = info
                    .access
                    .mmap
                    .then(|| self.backend().mmap_fd(idx))
                    .flatten();
                let mut sparse_areas = Vec::new();
                let mut offset = 0;
                if fd.is_some() {
                    flags |= VFIO_REGION_INFO_FLAG_MMAP;
                    offset = self.backend().mmap_offset(idx);
                    // The crate sends the descriptor with the sparse-mmap capability.
                    sparse_areas.extend(self.backend().mmap_areas(idx).into_iter().map(
                        |(offset, size)| SparseArea {
                            area: vfio_region_sparse_mmap_area { offset, size },
                        },
                    ));
                }
                ServerRegion {
                    region_info: vfio_region_info {
                        argsz: std::mem::size_of::<vfio_region_info>() as u32,
                        flags,
                        index: idx.raw(),
                        cap_offset: 0,
                        size: info.size,
                        offset,
                    },
                    sparse_areas,
                    mmap_fd: fd.map(|f| std::os::fd::AsRawFd::as_raw_fd(&f)),
                }
            })
            .collect()
    }

    /// The interrupt table `vfio_user::Server` announces.
    pub fn server_irqs(&self) -> Vec<vfio_user::IrqInfo> {
        let shape = self.shape();
        IrqIndex::ALL
            .iter()
            .map(|&i| vfio_user::IrqInfo {
                index: i.raw(),
                flags: shape.irqs[i as usize].flags,
                count: shape.irqs[i as usize].count,
            })
            .collect()
    }

    /// Reads the virtual config space (what the guest sees).
    pub fn config_read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.overlay.read(offset, buf)
    }

    /// A guest config write: the bits the overlay owns are dropped (and
    /// reported), the rest reaches the backend.
    pub fn config_write(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        let owned = (0..data.len() as u64).any(|k| self.overlay.owned_mask(offset + k) != 0);
        if owned {
            (self.events)(ServeEvent::DroppedWrite {
                offset,
                len: data.len(),
            });
        }
        self.overlay.write(offset, data)
    }

    /// Resets the backend.
    pub fn reset(&mut self) -> io::Result<()> {
        (self.events)(ServeEvent::Reset);
        self.backend_mut().reset()
    }

    /// The client went away: the backend unmaps its DMA and resets
    /// ([`GpuBackend::release`]) before the next one is served.
    pub fn release(&mut self) -> io::Result<()> {
        (self.events)(ServeEvent::Reset);
        self.backend_mut().release()
    }
}

impl<B: GpuBackend> ServedGpu<B> {
    /// Reports a backend's refusal as [`ServeEvent::Rejected`]: the crate
    /// answers it with an error reply that carries no reason (EIO after the
    /// session guard), so the reason goes to the server's log.
    fn reported<T>(&self, command: u16, r: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &r {
            (self.events)(ServeEvent::Rejected {
                command,
                errno: libc::EIO,
                why: e.to_string(),
            });
        }
        r
    }
}

fn region_of(raw: u32) -> io::Result<RegionIndex> {
    RegionIndex::from_raw(raw)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("no region {raw}")))
}

fn config_bounds(len: u64, offset: u64, n: usize) -> io::Result<()> {
    match offset.checked_add(n as u64) {
        Some(end) if end <= len => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "config access of {n} bytes at {offset:#x} is outside the {len}-byte config space"
            ),
        )),
    }
}

impl<B: GpuBackend> ServerBackend for ServedGpu<B> {
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> io::Result<()> {
        match region_of(region)? {
            RegionIndex::Config => {
                config_bounds(self.backend().config_len(), offset, data.len())?;
                self.config_read(offset, data)
            }
            idx => {
                let r = self.backend().region_read(idx, offset, data);
                self.reported(cmd::REGION_READ, r)
            }
        }
    }

    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> io::Result<()> {
        match region_of(region)? {
            RegionIndex::Config => {
                config_bounds(self.backend().config_len(), offset, data.len())?;
                self.config_write(offset, data)
            }
            idx => {
                let r = self.backend_mut().region_write(idx, offset, data);
                self.reported(cmd::REGION_WRITE, r)
            }
        }
    }

    fn dma_map(
        &mut self,
        flags: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<File>,
    ) -> io::Result<()> {
        let map = DmaMapping {
            iova: address,
            size,
            offset,
            readable: flags.contains(DmaMapFlags::READ),
            writable: flags.contains(DmaMapFlags::WRITE),
        };
        (self.events)(ServeEvent::DmaMap {
            iova: address,
            size,
            shared: fd.is_some(),
        });
        let r = self.backend_mut().dma_map(map, fd);
        self.reported(cmd::DMA_MAP, r)
    }

    fn dma_unmap(&mut self, flags: DmaUnmapFlags, address: u64, size: u64) -> io::Result<()> {
        let all = flags.bits() & VFIO_DMA_UNMAP_FLAG_ALL != 0;
        (self.events)(ServeEvent::DmaUnmap {
            iova: address,
            size,
            all,
        });
        let r = self.backend_mut().dma_unmap(address, size, all);
        self.reported(cmd::DMA_UNMAP, r)
    }

    fn reset(&mut self) -> io::Result<()> {
        ServedGpu::reset(self)
    }

    fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> io::Result<()> {
        let index = IrqIndex::from_raw(index).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("no interrupt index {index}"),
            )
        })?;
        let set = IrqSet {
            index,
            flags,
            start,
            count,
        };
        let r = self.backend_mut().set_irqs(set, fds);
        self.reported(cmd::DEVICE_SET_IRQS, r)
    }
}
