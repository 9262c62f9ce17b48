//! A client's DMA windows: each `DMA_MAP` maps the client's descriptor into
//! this process and hands that memory to the IOMMU at the client's IOVA
//! (`VFIO_IOMMU_MAP_DMA`); `DMA_UNMAP`, a disconnect or a drop take it away
//! again, IOMMU first, then the process mapping.
//!
//! The windows are vm-memory's guest memory, with the IOVA as the guest
//! address: each is a [`GuestRegionMmap`] backed by the client's file (a memfd
//! or hugetlbfs file shared by the VMM) at the offset it gave, in one
//! [`GuestMemoryMmap`]. Whether a new window overlaps one already mapped,
//! which window an address falls in, and whether a window fits the address
//! space are the library's answers; the host address handed to the IOMMU is
//! the one vm-memory gives for the window's first IOVA. A window keeps the
//! client's descriptor open until it is unmapped.
//!
//! Three address spaces meet here, each its own type at the IOMMU: the
//! client's I/O virtual address (a [`GuestAddress`], the key of the windows),
//! this process's virtual address of the mapped window ([`HostVirtAddr`]),
//! and the offset into the client's file (vm-memory's [`FileOffset`], used
//! only to map it), so [`Iommu::map`] cannot be handed one for another.

use std::fs::File;
use std::io;
use std::sync::Arc;

use vfio_bindings::bindings::vfio::{VFIO_DMA_MAP_FLAG_READ, VFIO_DMA_MAP_FLAG_WRITE};
use vm_memory::{
    FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion,
    GuestRegionCollectionError, GuestRegionMmap, MmapRegion,
};

use super::sys::{self, HostVirtAddr};
use crate::serve::backend::DmaMapping;

/// The IOMMU page size the windows are checked against (the smallest the
/// type-1 IOMMU supports on x86-64 and arm64 with 4 KiB pages).
pub const PAGE: u64 = 4096;

/// Where the IOMMU ioctls go: the container, or a stand-in in tests.
pub trait Iommu {
    /// Maps `size` bytes at `vaddr` in this process to `iova`.
    fn map(&self, vaddr: HostVirtAddr, iova: GuestAddress, size: u64, flags: u32)
        -> io::Result<()>;
    /// Unmaps `[iova, iova + size)`.
    fn unmap(&self, iova: GuestAddress, size: u64) -> io::Result<()>;
}

impl Iommu for File {
    fn map(
        &self,
        vaddr: HostVirtAddr,
        iova: GuestAddress,
        size: u64,
        flags: u32,
    ) -> io::Result<()> {
        sys::map_dma(self, vaddr, iova, size, flags)
    }

    fn unmap(&self, iova: GuestAddress, size: u64) -> io::Result<()> {
        sys::unmap_dma(self, iova, size).map(drop)
    }
}

/// The windows of the current client: vm-memory regions keyed by IOVA.
#[derive(Debug, Default)]
pub struct DmaWindows {
    memory: GuestMemoryMmap,
}

fn invalid(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, why)
}

/// The request a region was mapped for, read back from the region itself.
fn window(r: &GuestRegionMmap) -> DmaMapping {
    DmaMapping {
        iova: r.start_addr().0,
        size: r.len(),
        offset: r.file_offset().map_or(0, FileOffset::start),
        readable: r.prot() & libc::PROT_READ != 0,
        writable: r.prot() & libc::PROT_WRITE != 0,
    }
}

impl DmaWindows {
    /// What the library cannot know about a request: an empty window, page
    /// alignment, a file offset `mmap` can take, permissions, a descriptor.
    fn check(map: &DmaMapping, fd: Option<&File>) -> io::Result<()> {
        let what = format!("DMA map of {:#x} bytes at IOVA {:#x}", map.size, map.iova);
        if map.size == 0 {
            return Err(invalid(format!("{what}: empty")));
        }
        if (map.iova | map.size | map.offset) % PAGE != 0 {
            return Err(invalid(format!(
                "{what} (file offset {:#x}): IOVA, size and offset must be multiples of {PAGE:#x}",
                map.offset
            )));
        }
        map.offset
            .checked_add(map.size)
            .filter(|e| i64::try_from(*e).is_ok())
            .ok_or_else(|| invalid(format!("{what}: file offset {:#x} too large", map.offset)))?;
        if !map.readable && !map.writable {
            return Err(invalid(format!("{what}: neither readable nor writable")));
        }
        if fd.is_none() {
            return Err(invalid(format!(
                "{what}: no file descriptor; a VFIO device can only reach memory the client shares"
            )));
        }
        Ok(())
    }

    /// The window holding `iova`, if one does.
    fn at(&self, iova: u64) -> Option<DmaMapping> {
        self.memory.find_region(GuestAddress(iova)).map(window)
    }

    /// Maps a window: the client's memory into this process (a vm-memory
    /// region at the IOVA), then into the IOMMU at the host address vm-memory
    /// gives for it. Nothing changes when any step refuses.
    pub fn map(&mut self, iommu: &impl Iommu, map: DmaMapping, fd: Option<File>) -> io::Result<()> {
        Self::check(&map, fd.as_ref())?;
        let what = format!("DMA map of {:#x} bytes at IOVA {:#x}", map.size, map.iova);
        let fd = fd.ok_or_else(|| invalid(format!("{what}: no file descriptor")))?;
        let len = usize::try_from(map.size)
            .map_err(|_| invalid(format!("{what}: larger than this process can map")))?;
        let prot = if map.readable { libc::PROT_READ } else { 0 }
            | if map.writable { libc::PROT_WRITE } else { 0 };
        let mapping = MmapRegion::build(
            Some(FileOffset::new(fd, map.offset)),
            len,
            prot,
            libc::MAP_SHARED,
        )
        .map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{what}: cannot map the descriptor: {e}"),
            )
        })?;
        let region = GuestRegionMmap::new(mapping, GuestAddress(map.iova))
            .ok_or_else(|| invalid(format!("{what}: past the end of the address space")))?;
        let memory = match self.memory.insert_region(Arc::new(region)) {
            Ok(m) => m,
            Err(GuestRegionCollectionError::MemoryRegionOverlap) => {
                let end = map.iova + map.size;
                let other = self
                    .memory
                    .iter()
                    .map(window)
                    .find(|w| w.iova < end && map.iova < w.iova + w.size);
                return Err(invalid(match other {
                    Some(w) => format!(
                        "{what}: overlaps the window of {:#x} bytes at {:#x}",
                        w.size, w.iova
                    ),
                    None => format!("{what}: overlaps a window already mapped"),
                }));
            }
            Err(e) => return Err(invalid(format!("{what}: {e}"))),
        };
        let iova = GuestAddress(map.iova);
        let vaddr = memory
            .get_host_address(iova)
            .map(HostVirtAddr::new)
            .map_err(|e| invalid(format!("{what}: {e}")))?;
        let mut flags = 0;
        if map.readable {
            flags |= VFIO_DMA_MAP_FLAG_READ;
        }
        if map.writable {
            flags |= VFIO_DMA_MAP_FLAG_WRITE;
        }
        iommu
            .map(vaddr, iova, map.size, flags)
            .map_err(|e| io::Error::new(e.kind(), format!("{what}: the IOMMU refused it: {e}")))?;
        self.memory = memory;
        Ok(())
    }

    /// Unmaps the windows inside `[iova, iova + size)` (every window with
    /// `all`); a range that cuts a window in two is refused, as VFIO does.
    /// Returns how many windows went.
    pub fn unmap(
        &mut self,
        iommu: &impl Iommu,
        iova: u64,
        size: u64,
        all: bool,
    ) -> io::Result<usize> {
        let end = iova.saturating_add(size);
        if !all {
            // A window holding the first or the last byte of the range must
            // start (end) with it.
            let first = self.at(iova).filter(|w| w.iova < iova);
            let last = end
                .checked_sub(1)
                .filter(|_| size > 0)
                .and_then(|l| self.at(l).filter(|w| w.iova + w.size > end));
            if let Some(w) = first.or(last) {
                return Err(invalid(format!(
                    "DMA unmap of {size:#x} bytes at {iova:#x} cuts the window of {:#x} bytes at {:#x}",
                    w.size, w.iova
                )));
            }
        }
        let gone: Vec<DmaMapping> = self
            .memory
            .iter()
            .map(window)
            .filter(|w| all || (w.iova >= iova && w.iova < end))
            .collect();
        let mut first_err = None;
        for w in &gone {
            let Ok((memory, region)) = self.memory.remove_region(GuestAddress(w.iova), w.size)
            else {
                continue;
            };
            self.memory = memory;
            // The IOMMU lets go before the process mapping does (when
            // `region`, the last reference, drops).
            if let Err(e) = iommu.unmap(GuestAddress(w.iova), w.size) {
                first_err.get_or_insert(e);
            }
            drop(region);
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(gone.len()),
        }
    }

    /// The windows mapped now, by IOVA.
    pub fn mappings(&self) -> Vec<DmaMapping> {
        self.memory.iter().map(window).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    #[derive(Default)]
    struct Fake(RefCell<Vec<String>>);

    impl Iommu for Fake {
        fn map(
            &self,
            _vaddr: HostVirtAddr,
            iova: GuestAddress,
            size: u64,
            flags: u32,
        ) -> io::Result<()> {
            let iova = iova.0;
            self.0
                .borrow_mut()
                .push(format!("map {iova:#x}+{size:#x} {flags}"));
            Ok(())
        }
        fn unmap(&self, iova: GuestAddress, size: u64) -> io::Result<()> {
            let iova = iova.0;
            self.0
                .borrow_mut()
                .push(format!("unmap {iova:#x}+{size:#x}"));
            Ok(())
        }
    }

    fn memfd() -> File {
        let f = tempfile::tempfile().unwrap();
        f.set_len(1 << 20).unwrap();
        f
    }

    fn m(iova: u64, size: u64) -> DmaMapping {
        DmaMapping {
            iova,
            size,
            offset: 0,
            readable: true,
            writable: true,
        }
    }

    #[test]
    fn maps_and_unmaps_through_the_iommu() {
        let (iommu, mut w) = (Fake::default(), DmaWindows::default());
        w.map(&iommu, m(0x10000, 0x2000), Some(memfd())).unwrap();
        w.map(&iommu, m(0x20000, 0x1000), Some(memfd())).unwrap();
        assert_eq!(w.mappings().len(), 2);
        assert_eq!(w.unmap(&iommu, 0x10000, 0x2000, false).unwrap(), 1);
        assert_eq!(w.unmap(&iommu, 0, 0, true).unwrap(), 1);
        assert_eq!(
            *iommu.0.borrow(),
            [
                "map 0x10000+0x2000 3",
                "map 0x20000+0x1000 3",
                "unmap 0x10000+0x2000",
                "unmap 0x20000+0x1000"
            ]
        );
    }

    /// An IOMMU that holds what is mapped and refuses what VFIO would:
    /// overlaps, and unmaps of anything but whole windows.
    #[derive(Default)]
    struct Strict(RefCell<BTreeMap<u64, u64>>);

    impl Iommu for Strict {
        fn map(
            &self,
            _vaddr: HostVirtAddr,
            iova: GuestAddress,
            size: u64,
            _flags: u32,
        ) -> io::Result<()> {
            let (iova, mut m) = (iova.0, self.0.borrow_mut());
            if m.iter().any(|(&a, &s)| iova < a + s && a < iova + size) {
                return Err(io::Error::from_raw_os_error(libc::EEXIST));
            }
            m.insert(iova, size);
            Ok(())
        }
        fn unmap(&self, iova: GuestAddress, size: u64) -> io::Result<()> {
            match self.0.borrow_mut().remove(&iova.0) {
                Some(s) if s == size => Ok(()),
                _ => Err(io::Error::from_raw_os_error(libc::EINVAL)),
            }
        }
    }

    proptest::proptest! {
        /// Whatever a client sends, the IOMMU holds exactly the windows the
        /// server tracks, and nothing once the client is gone. Every answer is
        /// checked against what VFIO would answer, derived from the request
        /// and the stand-in IOMMU alone: a map with a descriptor, a size and no
        /// overlap with a window the IOMMU holds is accepted, any other is
        /// refused; an unmap that cuts a window is refused, any other removes
        /// the windows that start inside it. Every valid map must be accepted
        /// (`accepted == valid`), so a server that refused every map, or
        /// accepted an overlap, fails here.
        #[test]
        fn the_iommu_holds_exactly_the_tracked_windows(
            ops in proptest::collection::vec((proptest::bool::ANY, 0u64..32, 0u64..6, proptest::bool::ANY), 1..40)
        ) {
            let (iommu, mut w) = (Strict::default(), DmaWindows::default());
            let file = memfd();
            let (mut valid, mut accepted) = (0, 0);
            for (map, page, pages, with_fd) in ops {
                let (iova, size) = (page * PAGE, pages * PAGE);
                let held = iommu.0.borrow().clone();
                if map {
                    let fd = with_fd.then(|| file.try_clone().unwrap());
                    let free = !held.iter().any(|(&a, &s)| iova < a + s && a < iova + size);
                    let want = with_fd && size > 0 && free;
                    let got = w.map(&iommu, m(iova, size), fd);
                    valid += usize::from(want);
                    accepted += usize::from(got.is_ok());
                    proptest::prop_assert_eq!(got.is_ok(), want, "map {:#x}+{:#x} fd {}: {:?}", iova, size, with_fd, got);
                } else {
                    let end = iova + size;
                    let cuts = held.iter().any(|(&a, &s)| {
                        (a < iova && iova < a + s) || (size > 0 && a < end && end < a + s)
                    });
                    let inside = held.keys().filter(|&&a| a >= iova && a < end).count();
                    let got = w.unmap(&iommu, iova, size, false);
                    if cuts {
                        proptest::prop_assert!(got.is_err(), "unmap {:#x}+{:#x} cuts a window", iova, size);
                    } else {
                        proptest::prop_assert_eq!(got.ok(), Some(inside));
                    }
                }
                let tracked: BTreeMap<u64, u64> =
                    w.mappings().iter().map(|x| (x.iova, x.size)).collect();
                proptest::prop_assert_eq!(&tracked, &*iommu.0.borrow());
            }
            proptest::prop_assert_eq!(accepted, valid);
            w.unmap(&iommu, 0, 0, true).unwrap();
            proptest::prop_assert!(iommu.0.borrow().is_empty());
        }
    }

    #[test]
    fn refuses_bad_windows() {
        let (iommu, mut w) = (Fake::default(), DmaWindows::default());
        w.map(&iommu, m(0x10000, 0x4000), Some(memfd())).unwrap();
        let err = |w: &mut DmaWindows, map, fd| w.map(&iommu, map, fd).unwrap_err().to_string();
        assert!(err(&mut w, m(0x12000, 0x4000), Some(memfd()))
            .contains("overlaps the window of 0x4000 bytes at 0x10000"));
        assert!(err(&mut w, m(0xf000, 0x2000), Some(memfd())).contains("overlaps"));
        assert!(err(&mut w, m(0x30001, 0x1000), Some(memfd())).contains("multiples of 0x1000"));
        assert!(err(&mut w, m(0x30000, 0), Some(memfd())).contains("empty"));
        assert!(err(&mut w, m(u64::MAX - 0xfff, 0x2000), Some(memfd())).contains("past the end"));
        assert!(err(&mut w, m(0x30000, 0x1000), None).contains("no file descriptor"));
        let cut = w
            .unmap(&iommu, 0x11000, 0x1000, false)
            .unwrap_err()
            .to_string();
        assert!(cut.contains("cuts the window"), "{cut}");
        let cut = w
            .unmap(&iommu, 0xf000, 0x2000, false)
            .unwrap_err()
            .to_string();
        assert!(cut.contains("cuts the window"), "{cut}");
        assert_eq!(w.mappings().len(), 1, "nothing changed");
        assert_eq!(w.unmap(&iommu, 0x40000, 0x1000, false).unwrap(), 0);
    }
}
