//! [`VfioGpu`]: the backend over a VFIO device fd; see the module docs.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::Path;

use p2p_topology::{Bdf, IommuGroup};
use vfio_bindings::bindings::vfio::{
    VFIO_TYPE1v2_IOMMU, VFIO_API_VERSION, VFIO_DEVICE_FLAGS_PCI, VFIO_DEVICE_FLAGS_RESET,
    VFIO_GROUP_FLAGS_VIABLE, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE, VFIO_TYPE1_IOMMU,
};

use super::dma::DmaWindows;
use super::group::GroupMembers;
use super::regions::{MsixTrap, VfioRegion};
use super::{sys, VfioError};
use crate::serve::backend::{
    DmaMapping, GpuBackend, IrqIndex, IrqInfo, IrqSet, RegionIndex, RegionInfo, REGION_COUNT,
};

/// A device bound to vfio-pci, opened through its group and a type-1
/// container; see the module docs.
#[derive(Debug)]
pub struct VfioGpu {
    bdf: Bdf,
    group_no: IommuGroup,
    resettable: bool,
    // Dropped in this order: windows, device, group, container.
    dma: DmaWindows,
    device: File,
    _group: File,
    container: File,
    regions: Vec<VfioRegion>,
    irqs: [IrqInfo; 5],
    msix: Option<MsixTrap>,
}

fn other(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, why)
}

impl VfioGpu {
    /// Opens `bdf` (bound to vfio-pci, its group viable: checked in `sysfs`,
    /// `/sys` on a live host) through `/dev/vfio`.
    pub fn open(sysfs: &Path, bdf: Bdf) -> Result<Self, VfioError> {
        let members = GroupMembers::read(sysfs, bdf)?;
        members.check(bdf)?;
        Self::open_group(bdf, members.group, Path::new("/dev/vfio"))
    }

    /// Opens `bdf` in group `group_no` under `dev` (`/dev/vfio`), without the sysfs check.
    pub fn open_group(bdf: Bdf, group_no: IommuGroup, dev: &Path) -> Result<Self, VfioError> {
        let step = |step: &str| {
            let step = step.to_string();
            move |source| VfioError::Open { bdf, step, source }
        };
        let rw = |p: &Path| OpenOptions::new().read(true).write(true).open(p);
        let container = rw(&dev.join("vfio")).map_err(step("opening /dev/vfio/vfio"))?;
        let api = sys::api_version(&container).map_err(step("VFIO_GET_API_VERSION"))?;
        if api != VFIO_API_VERSION as i32 {
            return Err(VfioError::Unsupported {
                bdf,
                why: format!("VFIO API version {api}, want {VFIO_API_VERSION}"),
            });
        }
        let iommu = if sys::check_extension(&container, VFIO_TYPE1v2_IOMMU).unwrap_or(false) {
            VFIO_TYPE1v2_IOMMU
        } else if sys::check_extension(&container, VFIO_TYPE1_IOMMU).unwrap_or(false) {
            VFIO_TYPE1_IOMMU
        } else {
            return Err(VfioError::Unsupported {
                bdf,
                why: "the VFIO container offers no type-1 IOMMU".into(),
            });
        };
        let group_path = dev.join(group_no.to_string());
        let group = rw(&group_path).map_err(step(&format!("opening {}", group_path.display())))?;
        let status = sys::group_status(&group).map_err(step("VFIO_GROUP_GET_STATUS"))?;
        if status & VFIO_GROUP_FLAGS_VIABLE == 0 {
            return Err(VfioError::Unsupported {
                bdf,
                why: format!("the kernel says IOMMU group {group_no} is not viable (a function in it is bound to a host driver)"),
            });
        }
        sys::group_set_container(&group, &container).map_err(step("VFIO_GROUP_SET_CONTAINER"))?;
        sys::set_iommu(&container, iommu).map_err(step("VFIO_SET_IOMMU"))?;
        let device = sys::group_device_fd(&group, &bdf.to_string())
            .map_err(step("VFIO_GROUP_GET_DEVICE_FD"))?;
        let info = sys::device_info(&device).map_err(step("VFIO_DEVICE_GET_INFO"))?;
        if info.flags & VFIO_DEVICE_FLAGS_PCI == 0 || info.num_regions < REGION_COUNT - 1 {
            return Err(VfioError::Unsupported {
                bdf,
                why: format!(
                    "not a VFIO PCI device (flags {:#x}, {} regions)",
                    info.flags, info.num_regions
                ),
            });
        }
        let mut regions = Vec::new();
        for index in 0..REGION_COUNT {
            // A region the device lacks (VGA on most) is absent, not an error.
            let r = match sys::region_info(&device, index) {
                Ok((ri, caps)) => VfioRegion::from_info(&ri, &caps),
                Err(_) => VfioRegion::default(),
            };
            regions.push(r);
        }
        let irqs = IrqIndex::ALL.map(|i| match sys::irq_info(&device, i.raw()) {
            Ok(x) => IrqInfo {
                count: x.count,
                flags: x.flags,
            },
            Err(_) => IrqInfo::default(),
        });
        let mut gpu = Self {
            bdf,
            group_no,
            resettable: info.flags & VFIO_DEVICE_FLAGS_RESET != 0,
            dma: DmaWindows::default(),
            device,
            _group: group,
            container,
            regions,
            irqs,
            msix: None,
        };
        let len = gpu.config_len();
        if len != 256 && len != 4096 {
            return Err(VfioError::Unsupported {
                bdf,
                why: format!("config region of {len} bytes, want 256 or 4096"),
            });
        }
        let mut config = vec![0; len as usize];
        gpu.config_read(0, &mut config)
            .map_err(step("reading config space"))?;
        gpu.msix = MsixTrap::from_config(&config);
        Ok(gpu)
    }

    /// The function served.
    pub fn bdf(&self) -> Bdf {
        self.bdf
    }

    /// Its IOMMU group.
    pub fn group(&self) -> IommuGroup {
        self.group_no
    }

    /// Whether the kernel can reset the function (`VFIO_DEVICE_FLAGS_RESET`).
    pub fn resettable(&self) -> bool {
        self.resettable
    }

    /// A region with where it lies in the device fd and its mmap areas.
    pub fn vfio_region(&self, index: RegionIndex) -> &VfioRegion {
        &self.regions[index.raw() as usize]
    }

    /// The MSI-X table and PBA the server traps, when the device has MSI-X
    /// and VFIO does not let them be mapped.
    pub fn msix_trap(&self) -> Option<&MsixTrap> {
        self.msix.as_ref()
    }

    /// DMA windows the client has mapped now.
    pub fn dma_mappings(&self) -> Vec<DmaMapping> {
        self.dma.mappings()
    }

    fn region_at(&self, index: RegionIndex, offset: u64, len: usize) -> io::Result<u64> {
        let r = &self.regions[index.raw() as usize];
        if !r.info.contains(offset, len as u64) {
            return Err(other(format!(
                "access of {len} bytes at {offset:#x} is outside region {}",
                index.raw()
            )));
        }
        if let (RegionIndex::Bar(n), Some(m)) = (index, &self.msix) {
            if !r.msix_mappable && m.hits(n, offset, len as u64) {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "BAR{n} access of {len} bytes at {offset:#x} touches the MSI-X table or PBA, \
                         which the client emulates (wire vectors with SET_IRQS)"
                    ),
                ));
            }
        }
        Ok(r.fd_offset + offset)
    }

    /// Unwires every interrupt index that has vectors.
    fn unwire_all(&mut self) -> io::Result<()> {
        let mut first = Ok(());
        for i in IrqIndex::ALL {
            if self.irqs[i as usize].count == 0 {
                continue;
            }
            let flags = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
            if let Err(e) = sys::set_irqs(&self.device, i.raw(), flags, 0, 0, &[]) {
                // EINVAL: the index was not enabled.
                if e.raw_os_error() != Some(libc::EINVAL) && first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }
}

impl GpuBackend for VfioGpu {
    fn config_len(&self) -> u64 {
        self.regions[RegionIndex::Config.raw() as usize].info.size
    }

    fn config_read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let at = self.region_at(RegionIndex::Config, offset, buf.len())?;
        self.device.read_exact_at(buf, at)
    }

    fn config_write(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        let at = self.region_at(RegionIndex::Config, offset, data.len())?;
        self.device.write_all_at(data, at)
    }

    fn region(&self, index: RegionIndex) -> RegionInfo {
        self.regions[index.raw() as usize].info
    }

    fn mmap_fd(&self, index: RegionIndex) -> Option<BorrowedFd<'_>> {
        self.region(index).access.mmap.then(|| self.device.as_fd())
    }

    fn mmap_offset(&self, index: RegionIndex) -> u64 {
        self.regions[index.raw() as usize].fd_offset
    }

    fn mmap_areas(&self, index: RegionIndex) -> Vec<(u64, u64)> {
        self.regions[index.raw() as usize].areas.clone()
    }

    fn region_read(&self, index: RegionIndex, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let at = self.region_at(index, offset, buf.len())?;
        self.device.read_exact_at(buf, at)
    }

    fn region_write(&mut self, index: RegionIndex, offset: u64, data: &[u8]) -> io::Result<()> {
        let at = self.region_at(index, offset, data.len())?;
        self.device.write_all_at(data, at)
    }

    fn irq_info(&self, index: IrqIndex) -> IrqInfo {
        self.irqs[index as usize]
    }

    fn set_irqs(&mut self, set: IrqSet, fds: Vec<File>) -> io::Result<()> {
        let mut raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
        if set.flags & VFIO_IRQ_SET_DATA_EVENTFD != 0 && raw.is_empty() {
            // No descriptors: unwire the vectors (-1 each, as VFIO takes it).
            raw = vec![-1; set.count as usize];
        }
        if set.flags & VFIO_IRQ_SET_DATA_EVENTFD != 0 && raw.len() != set.count as usize {
            return Err(other(format!(
                "SET_IRQS: {} descriptors for {} vectors",
                raw.len(),
                set.count
            )));
        }
        // The kernel takes its own reference on each eventfd: the client's
        // descriptors can be closed here, interrupts go straight to it.
        sys::set_irqs(
            &self.device,
            set.index.raw(),
            set.flags,
            set.start,
            set.count,
            &raw,
        )
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "SET_IRQS {} vectors {}..{} (flags {:#x}): VFIO refused it: {e}",
                    set.index.label(),
                    set.start,
                    set.start.saturating_add(set.count),
                    set.flags
                ),
            )
        })
    }

    fn dma_map(&mut self, map: DmaMapping, fd: Option<File>) -> io::Result<()> {
        self.dma.map(&self.container, map, fd)
    }

    fn dma_unmap(&mut self, iova: u64, size: u64, all: bool) -> io::Result<()> {
        self.dma.unmap(&self.container, iova, size, all).map(drop)
    }

    fn reset(&mut self) -> io::Result<()> {
        let unwired = self.unwire_all();
        if self.resettable {
            sys::reset(&self.device)?;
        }
        unwired
    }

    fn release(&mut self) -> io::Result<()> {
        let unmapped = self.dma.unmap(&self.container, 0, 0, true).map(drop);
        let reset = self.reset();
        unmapped.and(reset)
    }
}

impl Drop for VfioGpu {
    fn drop(&mut self) {
        let _ = self.unwire_all();
        let _ = self.dma.unmap(&self.container, 0, 0, true);
    }
}
