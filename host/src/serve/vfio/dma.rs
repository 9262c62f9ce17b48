//! A client's DMA windows: each `DMA_MAP` maps the client's descriptor into
//! this process and hands that memory to the IOMMU at the client's IOVA
//! (`VFIO_IOMMU_MAP_DMA`); `DMA_UNMAP`, a disconnect or a drop take it away
//! again, IOMMU first, then the process mapping.
//!
//! The memory is the client's own file (a memfd or hugetlbfs file shared by
//! the VMM); a window is a plain `mmap` held by [`Mapping`], so vm-memory
//! would add a dependency for one `mmap` and one `munmap`.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;

use vfio_bindings::bindings::vfio::{VFIO_DMA_MAP_FLAG_READ, VFIO_DMA_MAP_FLAG_WRITE};

use super::sys::{self, Mapping};
use crate::serve::backend::DmaMapping;

/// The IOMMU page size the windows are checked against (the smallest the
/// type-1 IOMMU supports on x86-64 and arm64 with 4 KiB pages).
pub const PAGE: u64 = 4096;

/// Where the IOMMU ioctls go: the container, or a stand-in in tests.
pub trait Iommu {
    /// Maps `size` bytes at `vaddr` to `iova`.
    fn map(&self, vaddr: u64, iova: u64, size: u64, flags: u32) -> io::Result<()>;
    /// Unmaps `[iova, iova + size)`.
    fn unmap(&self, iova: u64, size: u64) -> io::Result<()>;
}

impl Iommu for File {
    fn map(&self, vaddr: u64, iova: u64, size: u64, flags: u32) -> io::Result<()> {
        sys::map_dma(self, vaddr, iova, size, flags)
    }

    fn unmap(&self, iova: u64, size: u64) -> io::Result<()> {
        sys::unmap_dma(self, iova, size).map(drop)
    }
}

#[derive(Debug)]
struct Window {
    map: DmaMapping,
    _memory: Mapping,
}

/// The windows of the current client, by IOVA.
#[derive(Debug, Default)]
pub struct DmaWindows {
    windows: BTreeMap<u64, Window>,
}

fn invalid(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, why)
}

impl DmaWindows {
    /// Checks a request before anything is mapped: size, alignment, overflow,
    /// overlap with a window already mapped, and a descriptor to map.
    pub fn check(&self, map: &DmaMapping, fd: Option<&File>) -> io::Result<()> {
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
        let end = map
            .iova
            .checked_add(map.size)
            .ok_or_else(|| invalid(format!("{what}: past the end of the address space")))?;
        map.offset
            .checked_add(map.size)
            .filter(|e| i64::try_from(*e).is_ok())
            .ok_or_else(|| invalid(format!("{what}: file offset {:#x} too large", map.offset)))?;
        if !map.readable && !map.writable {
            return Err(invalid(format!("{what}: neither readable nor writable")));
        }
        if let Some(w) = self.overlapping(map.iova, end) {
            return Err(invalid(format!(
                "{what}: overlaps the window of {:#x} bytes at {:#x}",
                w.size, w.iova
            )));
        }
        if fd.is_none() {
            return Err(invalid(format!(
                "{what}: no file descriptor; a VFIO device can only reach memory the client shares"
            )));
        }
        Ok(())
    }

    fn overlapping(&self, start: u64, end: u64) -> Option<&DmaMapping> {
        self.windows
            .range(..end)
            .next_back()
            .map(|(_, w)| &w.map)
            .filter(|m| m.iova + m.size > start)
    }

    /// Maps a window: the client's memory into this process, then into the IOMMU.
    pub fn map(&mut self, iommu: &impl Iommu, map: DmaMapping, fd: Option<File>) -> io::Result<()> {
        self.check(&map, fd.as_ref())?;
        let fd = fd.ok_or_else(|| invalid("no file descriptor".into()))?;
        let memory = Mapping::new(&fd, map.offset, map.size, map.writable).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "DMA map of {:#x} bytes at IOVA {:#x}: cannot map the descriptor: {e}",
                    map.size, map.iova
                ),
            )
        })?;
        let mut flags = 0;
        if map.readable {
            flags |= VFIO_DMA_MAP_FLAG_READ;
        }
        if map.writable {
            flags |= VFIO_DMA_MAP_FLAG_WRITE;
        }
        iommu
            .map(memory.addr(), map.iova, map.size, flags)
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "DMA map of {:#x} bytes at IOVA {:#x}: the IOMMU refused it: {e}",
                        map.size, map.iova
                    ),
                )
            })?;
        self.windows.insert(
            map.iova,
            Window {
                map,
                _memory: memory,
            },
        );
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
            if let Some(w) = self.overlapping(iova, end) {
                let (ws, we) = (w.iova, w.iova + w.size);
                if ws < iova || we > end {
                    return Err(invalid(format!(
                        "DMA unmap of {size:#x} bytes at {iova:#x} cuts the window of {:#x} bytes at {ws:#x}",
                        w.size
                    )));
                }
            }
            if let Some((_, w)) = self.windows.range(..iova).next_back() {
                if w.map.iova + w.map.size > iova {
                    return Err(invalid(format!(
                        "DMA unmap of {size:#x} bytes at {iova:#x} cuts the window of {:#x} bytes at {:#x}",
                        w.map.size, w.map.iova
                    )));
                }
            }
        }
        let keys: Vec<u64> = if all {
            self.windows.keys().copied().collect()
        } else {
            self.windows.range(iova..end).map(|(k, _)| *k).collect()
        };
        let mut first_err = None;
        for k in &keys {
            if let Some(w) = self.windows.remove(k) {
                // The IOMMU lets go before the process mapping does.
                if let Err(e) = iommu.unmap(w.map.iova, w.map.size) {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(keys.len()),
        }
    }

    /// The windows mapped now.
    pub fn mappings(&self) -> Vec<DmaMapping> {
        self.windows.values().map(|w| w.map).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[derive(Default)]
    struct Fake(RefCell<Vec<String>>);

    impl Iommu for Fake {
        fn map(&self, _vaddr: u64, iova: u64, size: u64, flags: u32) -> io::Result<()> {
            self.0
                .borrow_mut()
                .push(format!("map {iova:#x}+{size:#x} {flags}"));
            Ok(())
        }
        fn unmap(&self, iova: u64, size: u64) -> io::Result<()> {
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
        fn map(&self, _vaddr: u64, iova: u64, size: u64, _flags: u32) -> io::Result<()> {
            let mut m = self.0.borrow_mut();
            if m.iter().any(|(&a, &s)| iova < a + s && a < iova + size) {
                return Err(io::Error::from_raw_os_error(libc::EEXIST));
            }
            m.insert(iova, size);
            Ok(())
        }
        fn unmap(&self, iova: u64, size: u64) -> io::Result<()> {
            match self.0.borrow_mut().remove(&iova) {
                Some(s) if s == size => Ok(()),
                _ => Err(io::Error::from_raw_os_error(libc::EINVAL)),
            }
        }
    }

    proptest::proptest! {
        /// Whatever a client sends, the IOMMU holds exactly the windows the
        /// server tracks, and nothing once the client is gone.
        #[test]
        fn the_iommu_holds_exactly_the_tracked_windows(
            ops in proptest::collection::vec((proptest::bool::ANY, 0u64..32, 0u64..6, proptest::bool::ANY), 1..40)
        ) {
            let (iommu, mut w) = (Strict::default(), DmaWindows::default());
            let file = memfd();
            for (map, page, pages, with_fd) in ops {
                let (iova, size) = (page * PAGE, pages * PAGE);
                if map {
                    let fd = with_fd.then(|| file.try_clone().unwrap());
                    let _ = w.map(&iommu, m(iova, size), fd);
                } else {
                    let _ = w.unmap(&iommu, iova, size, false);
                }
                let tracked: BTreeMap<u64, u64> =
                    w.mappings().iter().map(|x| (x.iova, x.size)).collect();
                proptest::prop_assert_eq!(&tracked, &*iommu.0.borrow());
            }
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
