//! A VFIO device's regions as the server announces them: size, access,
//! where they lie in the device fd, and which parts the client may map
//! (VFIO's sparse mmap capability; the MSI-X table and PBA are left out of
//! those areas unless VFIO says they are mappable).

use std::ops::Range;

use vfio_bindings::bindings::vfio::{
    vfio_region_info, VFIO_REGION_INFO_CAP_MSIX_MAPPABLE, VFIO_REGION_INFO_CAP_SPARSE_MMAP,
    VFIO_REGION_INFO_FLAG_CAPS, VFIO_REGION_INFO_FLAG_MMAP, VFIO_REGION_INFO_FLAG_READ,
    VFIO_REGION_INFO_FLAG_WRITE,
};

use crate::serve::backend::{RegionAccess, RegionInfo};

/// One region of the VFIO device.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VfioRegion {
    /// Size and access as the client sees them.
    pub info: RegionInfo,
    /// Where the region starts in the device fd (reads, writes, mmap).
    pub fd_offset: u64,
    /// The parts the client may map, region-relative; empty when none.
    pub areas: Vec<(u64, u64)>,
    /// VFIO says the MSI-X table in this region may be mapped.
    pub msix_mappable: bool,
}

impl VfioRegion {
    /// From `VFIO_DEVICE_GET_REGION_INFO`'s info and capability bytes (the
    /// bytes after the info).
    pub fn from_info(info: &vfio_region_info, caps: &[u8]) -> Self {
        let mmap = info.flags & VFIO_REGION_INFO_FLAG_MMAP != 0 && info.size > 0;
        let mut areas = Vec::new();
        let mut msix_mappable = false;
        let mut sparse = false;
        if info.flags & VFIO_REGION_INFO_FLAG_CAPS != 0 {
            let (found, whole) = walk_caps(info.cap_offset, caps);
            // A chain that cannot be read may hide a sparse capability:
            // map nothing rather than too much.
            sparse = !whole;
            for (id, body) in found {
                if id == VFIO_REGION_INFO_CAP_SPARSE_MMAP {
                    sparse = true;
                    areas.extend(sparse_areas(body, info.size));
                } else if id == VFIO_REGION_INFO_CAP_MSIX_MAPPABLE {
                    msix_mappable = true;
                }
            }
        }
        if mmap && !sparse {
            areas.push((0, info.size));
        }
        if !mmap {
            areas.clear();
        }
        VfioRegion {
            info: RegionInfo {
                size: info.size,
                access: RegionAccess {
                    read: info.flags & VFIO_REGION_INFO_FLAG_READ != 0,
                    write: info.flags & VFIO_REGION_INFO_FLAG_WRITE != 0,
                    mmap: !areas.is_empty(),
                },
            },
            fd_offset: info.offset,
            areas,
            msix_mappable,
        }
    }
}

/// The capabilities of a chain: (id, bytes after the 8-byte header), and
/// whether the whole chain could be read. Offsets in the chain count from
/// the start of the region info; a malformed chain (an offset outside, one
/// that does not advance) ends the walk.
fn walk_caps(first: u32, caps: &[u8]) -> (Vec<(u32, &[u8])>, bool) {
    let head = std::mem::size_of::<vfio_region_info>();
    let mut out = Vec::new();
    let mut next = first as usize;
    let mut last = 0;
    while next != 0 {
        if next <= last {
            return (out, false);
        }
        last = next;
        let Some(cap) = next.checked_sub(head).and_then(|at| caps.get(at..)) else {
            return (out, false);
        };
        let (Some(id), Some(nx)) = (cap.get(0..2), cap.get(4..8)) else {
            return (out, false);
        };
        let id = u16::from_ne_bytes([id[0], id[1]]);
        next = u32::from_ne_bytes([nx[0], nx[1], nx[2], nx[3]]) as usize;
        out.push((u32::from(id), cap.get(8..).unwrap_or(&[])));
    }
    (out, true)
}

/// The areas of a sparse mmap capability body (`nr_areas`, reserved, then
/// `{offset, size}` pairs), clipped to the region.
fn sparse_areas(body: &[u8], region: u64) -> Vec<(u64, u64)> {
    let u64_at = |at: usize| {
        body.get(at..at + 8)
            .map(|b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
    };
    let n = body
        .get(0..4)
        .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .unwrap_or(0) as usize;
    (0..n.min(body.len() / 16))
        .filter_map(|i| Some((u64_at(8 + 16 * i)?, u64_at(16 + 16 * i)?)))
        .filter(|&(o, s)| s > 0 && o.checked_add(s).is_some_and(|e| e <= region))
        .collect()
}

/// Where the MSI-X table and PBA are, from the MSI-X capability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MsixTrap {
    /// Table: BAR register and byte range in it.
    pub table: (u8, Range<u64>),
    /// Pending bit array: BAR register and byte range in it.
    pub pba: (u8, Range<u64>),
}

impl MsixTrap {
    /// From a config space (reads the capability list; None without MSI-X).
    pub fn from_config(config: &[u8]) -> Option<Self> {
        let at = find_cap(config, 0x11)?;
        let word = |o: usize| -> Option<u32> {
            Some(u32::from_le_bytes(config.get(o..o + 4)?.try_into().ok()?))
        };
        let ctrl = u16::from_le_bytes([*config.get(at + 2)?, *config.get(at + 3)?]);
        let vectors = u64::from(ctrl & 0x7ff) + 1;
        let (t, p) = (word(at + 4)?, word(at + 8)?);
        let table_at = u64::from(t & !7);
        let pba_at = u64::from(p & !7);
        Some(Self {
            table: ((t & 7) as u8, table_at..table_at + 16 * vectors),
            pba: ((p & 7) as u8, pba_at..pba_at + vectors.div_ceil(64) * 8),
        })
    }

    /// Whether `len` bytes at `offset` of BAR `bar` touch the table or PBA.
    pub fn hits(&self, bar: u8, offset: u64, len: u64) -> bool {
        let end = offset.saturating_add(len);
        [&self.table, &self.pba]
            .iter()
            .any(|(b, r)| *b == bar && offset < r.end && r.start < end)
    }
}

/// The offset of the standard capability `id`, walking from 0x34.
pub fn find_cap(config: &[u8], id: u8) -> Option<usize> {
    if config.get(6)? & 0x10 == 0 {
        return None;
    }
    let mut at = usize::from(*config.get(0x34)? & !3);
    for _ in 0..48 {
        if at < 0x40 {
            return None;
        }
        if *config.get(at)? == id {
            return Some(at);
        }
        at = usize::from(*config.get(at + 1)? & !3);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(flags: u32, size: u64, cap_offset: u32) -> vfio_region_info {
        vfio_region_info {
            argsz: 0,
            flags,
            index: 0,
            cap_offset,
            size,
            offset: 0x100_0000_0000,
        }
    }

    fn sparse(next: u32, areas: &[(u64, u64)]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend((VFIO_REGION_INFO_CAP_SPARSE_MMAP as u16).to_ne_bytes());
        v.extend(1u16.to_ne_bytes());
        v.extend(next.to_ne_bytes());
        v.extend((areas.len() as u32).to_ne_bytes());
        v.extend(0u32.to_ne_bytes());
        for (o, s) in areas {
            v.extend(o.to_ne_bytes());
            v.extend(s.to_ne_bytes());
        }
        v
    }

    const RW: u32 = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;

    #[test]
    fn a_mappable_region_without_caps_maps_whole() {
        let r = VfioRegion::from_info(&info(RW | VFIO_REGION_INFO_FLAG_MMAP, 1 << 20, 0), &[]);
        assert_eq!(r.areas, vec![(0, 1 << 20)]);
        assert!(r.info.access.mmap);
        assert_eq!(r.fd_offset, 0x100_0000_0000);
    }

    #[test]
    fn sparse_areas_leave_the_msix_table_out() {
        let head = std::mem::size_of::<vfio_region_info>() as u32;
        let caps = sparse(0, &[(0, 0x2000), (0x3000, 0x1000), (0x8000, 0x100_0000)]);
        let flags = RW | VFIO_REGION_INFO_FLAG_MMAP | VFIO_REGION_INFO_FLAG_CAPS;
        let r = VfioRegion::from_info(&info(flags, 0x10000, head), &caps);
        // The third area lies outside the region and is dropped.
        assert_eq!(r.areas, vec![(0, 0x2000), (0x3000, 0x1000)]);
        assert!(!r.msix_mappable);
    }

    #[test]
    fn a_malformed_chain_ends_the_walk() {
        let head = std::mem::size_of::<vfio_region_info>() as u32;
        let caps = sparse(head, &[(0, 0x1000)]); // next points at itself
        let flags = RW | VFIO_REGION_INFO_FLAG_MMAP | VFIO_REGION_INFO_FLAG_CAPS;
        let r = VfioRegion::from_info(&info(flags, 0x10000, head), &caps);
        assert_eq!(r.areas, vec![(0, 0x1000)]);
        let r = VfioRegion::from_info(&info(flags, 0x10000, head + 999), &caps);
        assert!(r.areas.is_empty(), "a chain past the bytes maps nothing");
        let r = VfioRegion::from_info(&info(RW, 0x10000, 0), &[]);
        assert!(!r.info.access.mmap);
    }

    #[test]
    fn msix_table_and_pba_from_config() {
        let mut c = vec![0u8; 256];
        c[6] = 0x10;
        c[0x34] = 0x40;
        c[0x40] = 0x11;
        c[0x42..0x44].copy_from_slice(&31u16.to_le_bytes()); // 32 vectors
        c[0x44..0x48].copy_from_slice(&0x2000u32.to_le_bytes()); // BAR0 + 0x2000
        c[0x48..0x4c].copy_from_slice(&0x3002u32.to_le_bytes()); // BAR2 + 0x3000
        let m = MsixTrap::from_config(&c).unwrap();
        assert_eq!(m.table, (0, 0x2000..0x2200));
        assert_eq!(m.pba, (2, 0x3000..0x3008));
        assert!(m.hits(0, 0x21fc, 4));
        assert!(!m.hits(0, 0x2200, 4));
        assert!(m.hits(2, 0x3000, 1));
        assert!(!m.hits(1, 0x2000, 4));
        c[6] = 0;
        assert_eq!(MsixTrap::from_config(&c), None);
    }
}
