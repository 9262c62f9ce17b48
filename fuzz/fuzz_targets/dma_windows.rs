//! The DMA windows `p2p-host serve --gpu ...,vfio=BDF` keeps for a client,
//! under arbitrary `DMA_MAP` / `DMA_UNMAP` sequences (any IOVA, size, offset,
//! permissions, with or without a descriptor, unmap-all): a stand-in IOMMU
//! that refuses what VFIO refuses (overlaps, unmaps of part of a window) must
//! hold exactly the windows the server tracks after every message, and
//! nothing once the client is gone. Each input is records of 26 bytes: kind
//! (even map, odd unmap; bit 1 unmap-all, bit 2 no descriptor), flags (bit 0
//! read, bit 1 write), then IOVA, size and offset as little-endian u64.
#![no_main]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use p2p_host::serve::vfio::{DmaWindows, GuestAddress, HostVirtAddr, Iommu};
use p2p_host::serve::DmaMapping;

/// The errnos VFIO answers with (Linux's values; the fuzz crate has no libc).
const EEXIST: i32 = 17;
const EINVAL: i32 = 22;

#[derive(Default)]
struct Strict(RefCell<BTreeMap<u64, u64>>);

impl Iommu for Strict {
    fn map(&self, _vaddr: HostVirtAddr, iova: GuestAddress, size: u64, _flags: u32) -> io::Result<()> {
        let (iova, mut m) = (iova.0, self.0.borrow_mut());
        let end = iova.checked_add(size).ok_or_else(|| io::Error::from_raw_os_error(EINVAL))?;
        if m.iter().any(|(&a, &s)| iova < a + s && a < end) {
            return Err(io::Error::from_raw_os_error(EEXIST));
        }
        m.insert(iova, size);
        Ok(())
    }
    fn unmap(&self, iova: GuestAddress, size: u64) -> io::Result<()> {
        match self.0.borrow_mut().remove(&iova.0) {
            Some(s) if s == size => Ok(()),
            _ => Err(io::Error::from_raw_os_error(EINVAL)),
        }
    }
}

/// One 1 MiB file shared by every input, as a VMM's guest memory would be.
fn memory() -> &'static File {
    static F: OnceLock<File> = OnceLock::new();
    F.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("vp2p-fuzz-dma-{}", std::process::id()));
        let f = File::options().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        f.set_len(1 << 20).unwrap();
        f
    })
}

fn u64_at(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().unwrap())
}

fuzz_target!(|data: &[u8]| {
    let iommu = Strict::default();
    let mut w = DmaWindows::default();
    for rec in data.chunks_exact(26) {
        let (kind, flags) = (rec[0], rec[1]);
        // Small IOVAs and sizes are where windows meet; keep most inputs there.
        let iova = u64_at(&rec[2..]) % (1 << 24);
        let size = u64_at(&rec[10..]) % (1 << 22);
        let offset = u64_at(&rec[18..]) % (1 << 21);
        if kind & 1 == 0 {
            let map = DmaMapping {
                iova,
                size,
                offset,
                readable: flags & 1 != 0,
                writable: flags & 2 != 0,
            };
            let fd = (kind & 4 == 0).then(|| memory().try_clone().unwrap());
            let _ = w.map(&iommu, map, fd);
        } else {
            let _ = w.unmap(&iommu, iova, size, kind & 2 != 0);
        }
        let tracked: BTreeMap<u64, u64> = w.mappings().iter().map(|m| (m.iova, m.size)).collect();
        assert_eq!(tracked, *iommu.0.borrow(), "the IOMMU and the server disagree");
    }
    w.unmap(&iommu, 0, 0, true).unwrap();
    assert!(iommu.0.borrow().is_empty(), "windows left mapped after the client left");
});
