//! Header fields and capability-list walkers over raw config-space bytes.
//!
//! The walkers never read out of bounds, stop on loops, and report a malformed
//! chain as a [`WalkError`] naming the offset, so a bad device cannot hang or crash
//! a scan, and a config read truncated by the kernel (64 bytes for non-root
//! readers of sysfs) is told apart from a broken chain.

use serde::{Deserialize, Serialize};

use super::caplen::{ext_cap_len, std_cap_len, LenSource};

/// Bytes of the type-0/type-1 header every function has.
pub const CONFIG_HEADER_LEN: usize = 64;
/// Bytes of conventional PCI config space (what the 0x34 chain lives in).
pub const CONFIG_LEGACY_LEN: usize = 256;
/// Bytes of PCI Express config space (what the 0x100 chain lives in).
pub const CONFIG_EXTENDED_LEN: usize = 4096;

/// Why bytes cannot be read as a config space at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Fewer bytes than the 64-byte header were read; holds the count read.
    #[error("config space has {0} bytes, fewer than the 64-byte header")]
    ShorterThanHeader(usize),
    /// The vendor ID reads 0xffff: no function answers at this address.
    #[error("config space reads all ones at the vendor id: no function answers there")]
    NoFunction,
}

/// Why a capability list is malformed. Offsets are config-space offsets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WalkError {
    /// A capability pointer points into the header (below 0x40, or below 0x100 in
    /// the extended list).
    #[error("capability pointer {ptr:#x} at {at:#x} points into the header")]
    PointerIntoHeader {
        /// Offset of the pointer that was followed (0 for the start of the extended list).
        at: u16,
        /// The pointer's value, below the header's end (0x40, or 0x100 for the extended list).
        ptr: u16,
    },
    /// A capability pointer points past the bytes read or past its list's region.
    #[error("capability pointer {ptr:#x} at {at:#x} is past the {len} bytes read")]
    PastEnd {
        /// Offset of the pointer that was followed (0 for the start of the extended list).
        at: u16,
        /// The pointer's value, beyond the bytes read or the list's region.
        ptr: u16,
        /// Bytes of config space that were read.
        len: usize,
    },
    /// The list comes back to a capability already visited.
    #[error("capability list loops back to {ptr:#x} (pointer at {at:#x})")]
    Loop {
        /// Offset of the pointer that was followed (0 for the start of the extended list).
        at: u16,
        /// The capability offset visited a second time.
        ptr: u16,
    },
    /// A capability's length runs past the end of its region.
    #[error("capability {id:#x} at {offset:#x} claims {len} bytes, past the end of its region at {end:#x}")]
    Overrun {
        /// Id of the capability (standard or extended).
        id: u16,
        /// Config offset of the capability's header.
        offset: u16,
        /// Length in bytes the capability's layout implies.
        len: u16,
        /// End of its region: 0x100 for the standard list, 0x1000 for the extended one.
        end: usize,
    },
}

/// One capability in the standard (0x34) list, with the byte range it occupies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CapabilityEntry {
    /// Capability id (0x10 PCI Express, 0x09 vendor-specific, ...; see [`super::cap_id`]).
    #[serde(with = "crate::hex::u8")]
    #[schemars(with = "crate::hex::Hex")]
    pub id: u8,
    /// Config offset of the capability's header (0x40-0xff).
    #[serde(with = "crate::hex::u8")]
    #[schemars(with = "crate::hex::Hex")]
    pub offset: u8,
    /// Next-capability pointer with the reserved low bits masked; 0 ends the list.
    #[serde(with = "crate::hex::u8")]
    #[schemars(with = "crate::hex::Hex")]
    pub next: u8,
    /// Bytes it occupies from `offset`; see `len_source` for how it is known.
    pub len: u16,
    /// Whether `len` comes from the spec, from the capability itself, or is a guess.
    pub len_source: LenSource,
}

/// One capability in the extended (0x100) list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExtCapabilityEntry {
    /// Extended capability id (0x000d ACS, ...; see [`super::ext_cap_id`]).
    #[serde(with = "crate::hex::u16")]
    #[schemars(with = "crate::hex::Hex")]
    pub id: u16,
    /// Capability version, bits 19:16 of the header.
    pub version: u8,
    /// Config offset of the capability's header (0x100-0xffc).
    #[serde(with = "crate::hex::u16")]
    #[schemars(with = "crate::hex::Hex")]
    pub offset: u16,
    /// Next-capability offset, bits 31:20 of the header; 0 ends the list.
    #[serde(with = "crate::hex::u16")]
    #[schemars(with = "crate::hex::Hex")]
    pub next: u16,
    /// Bytes it occupies from `offset`; see `len_source` for how it is known.
    pub len: u16,
    /// Whether `len` comes from the spec, from the capability itself, or is a guess.
    pub len_source: LenSource,
}

impl CapabilityEntry {
    /// End of its byte range (exclusive).
    pub fn end(&self) -> usize {
        self.offset as usize + self.len as usize
    }
}

impl ExtCapabilityEntry {
    /// End of its byte range (exclusive).
    pub fn end(&self) -> usize {
        self.offset as usize + self.len as usize
    }
}

/// A read-only view of a function's config space, as many bytes as were read.
#[derive(Debug, Clone, Copy)]
pub struct ConfigSpace<'a> {
    bytes: &'a [u8],
}

impl<'a> ConfigSpace<'a> {
    /// Wraps `bytes`; they must hold at least the 64-byte header.
    pub fn new(bytes: &'a [u8]) -> Result<Self, ConfigError> {
        if bytes.len() < CONFIG_HEADER_LEN {
            return Err(ConfigError::ShorterThanHeader(bytes.len()));
        }
        let cs = Self { bytes };
        if cs.vendor_id() == 0xffff {
            return Err(ConfigError::NoFunction);
        }
        Ok(cs)
    }

    /// The raw bytes as read.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Number of config bytes read: 64, 256 or 4096 in practice.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// True when no bytes were read; never for a space built by [`ConfigSpace::new`].
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Fewer than 256 bytes: the kernel gives non-root readers only the header.
    pub fn is_truncated(&self) -> bool {
        self.bytes.len() < CONFIG_LEGACY_LEN
    }

    /// Holds the 4 KiB PCI Express space where the extended list lives.
    pub fn has_extended_space(&self) -> bool {
        self.bytes.len() >= CONFIG_EXTENDED_LEN
    }

    /// The byte at config offset `off`; None past the bytes read.
    pub fn u8_at(&self, off: usize) -> Option<u8> {
        self.bytes.get(off).copied()
    }

    /// The little-endian 16-bit word at `off`; None past the bytes read.
    pub fn u16_at(&self, off: usize) -> Option<u16> {
        let b = self.bytes.get(off..off.checked_add(2)?)?;
        Some(u16::from_le_bytes([b[0], b[1]]))
    }

    /// The little-endian 32-bit dword at `off`; None past the bytes read.
    pub fn u32_at(&self, off: usize) -> Option<u32> {
        let b = self.bytes.get(off..off.checked_add(4)?)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn header_u16(&self, off: usize) -> u16 {
        // The constructor guarantees the 64-byte header.
        u16::from_le_bytes([self.bytes[off], self.bytes[off + 1]])
    }

    /// Vendor ID (offset 0x00); 0xffff means no function.
    pub fn vendor_id(&self) -> u16 {
        self.header_u16(0x00)
    }

    /// Device ID (offset 0x02).
    pub fn device_id(&self) -> u16 {
        self.header_u16(0x02)
    }

    /// Status register (offset 0x06); bit 4 says a capability list exists.
    pub fn status(&self) -> u16 {
        self.header_u16(0x06)
    }

    /// Revision ID (offset 0x08).
    pub fn revision(&self) -> u8 {
        self.bytes[0x08]
    }

    /// The 24-bit class code: base class, subclass, programming interface.
    pub fn class_code(&self) -> u32 {
        u32::from_le_bytes([self.bytes[0x09], self.bytes[0x0a], self.bytes[0x0b], 0])
    }

    /// Header layout: 0 endpoint, 1 PCI-to-PCI bridge, 2 CardBus bridge.
    pub fn header_type(&self) -> u8 {
        self.bytes[0x0e] & 0x7f
    }

    /// Header type bit 7: the device has functions beyond 0.
    pub fn is_multi_function(&self) -> bool {
        self.bytes[0x0e] & 0x80 != 0
    }

    /// Status bit 4: the function implements the 0x34 capability list.
    pub fn has_capability_list(&self) -> bool {
        self.status() & 0x10 != 0
    }

    /// Offset of the register holding the first capability pointer.
    fn cap_pointer_register(&self) -> usize {
        if self.header_type() == 2 {
            0x14
        } else {
            0x34
        }
    }

    /// Walks the standard capability list from 0x34 (0x14 for CardBus).
    ///
    /// Pointers have their two reserved low bits masked, as the PCI spec tells
    /// software to. A function without the list (status bit 4 clear) has none.
    pub fn capabilities(&self) -> Result<Vec<CapabilityEntry>, WalkError> {
        let mut out: Vec<CapabilityEntry> = Vec::new();
        if !self.has_capability_list() {
            return Ok(out);
        }
        let region_end = self.bytes.len().min(CONFIG_LEGACY_LEN);
        let mut at = self.cap_pointer_register() as u16;
        let mut ptr = u16::from(self.bytes[at as usize] & 0xfc);
        let mut seen = [false; CONFIG_LEGACY_LEN / 4];
        while ptr != 0 {
            if (ptr as usize) < CONFIG_HEADER_LEN {
                return Err(WalkError::PointerIntoHeader { at, ptr });
            }
            if ptr as usize + 2 > region_end {
                return Err(WalkError::PastEnd {
                    at,
                    ptr,
                    len: self.bytes.len(),
                });
            }
            let slot = &mut seen[ptr as usize / 4];
            if *slot {
                return Err(WalkError::Loop { at, ptr });
            }
            *slot = true;
            let off = ptr as usize;
            let id = self.bytes[off];
            let next = self.bytes[off + 1] & 0xfc;
            out.push(CapabilityEntry {
                id,
                offset: ptr as u8,
                next,
                len: 0,
                len_source: LenSource::Spec,
            });
            at = ptr + 1;
            ptr = u16::from(next);
        }
        // Lengths come second: an unknown one is bounded by the next capability.
        let starts: Vec<usize> = out.iter().map(|c| c.offset as usize).collect();
        // Lengths are read from the legacy region only.
        let region = Self {
            bytes: &self.bytes[..region_end],
        };
        for cap in &mut out {
            let (len, source) = match std_cap_len(&region, cap.id, cap.offset as usize) {
                Some((len, source)) => (len, source),
                None => (
                    conservative_len(cap.offset as usize, &starts, region_end),
                    LenSource::UpToNext,
                ),
            };
            if cap.offset as usize + len as usize > CONFIG_LEGACY_LEN {
                return Err(WalkError::Overrun {
                    id: cap.id.into(),
                    offset: cap.offset.into(),
                    len,
                    end: CONFIG_LEGACY_LEN,
                });
            }
            cap.len = len;
            cap.len_source = source;
        }
        Ok(out)
    }

    /// Walks the extended capability list from 0x100.
    ///
    /// Empty when the config read stopped at 256 bytes, when 0x100 reads zero
    /// (no extended capabilities) or all ones (a conventional PCI function).
    /// Headers with id 0 and a non-zero next pointer are walked through, as
    /// Linux does: hypervisors use them to hide capabilities.
    pub fn extended_capabilities(&self) -> Result<Vec<ExtCapabilityEntry>, WalkError> {
        let mut out: Vec<ExtCapabilityEntry> = Vec::new();
        if !self.has_extended_space() {
            return Ok(out);
        }
        let first = self.u32_at(CONFIG_LEGACY_LEN).unwrap_or(0);
        if first == 0 || first == 0xffff_ffff {
            return Ok(out);
        }
        let mut seen = vec![false; CONFIG_EXTENDED_LEN / 4];
        let mut at: u16 = 0; // "the start": no pointer register names 0x100
        let mut ptr: u16 = CONFIG_LEGACY_LEN as u16;
        while ptr != 0 {
            if (ptr as usize) < CONFIG_LEGACY_LEN {
                return Err(WalkError::PointerIntoHeader { at, ptr });
            }
            let off = ptr as usize;
            let Some(header) = self.u32_at(off).filter(|_| off + 4 <= CONFIG_EXTENDED_LEN) else {
                return Err(WalkError::PastEnd {
                    at,
                    ptr,
                    len: self.bytes.len(),
                });
            };
            let slot = &mut seen[off / 4];
            if *slot {
                return Err(WalkError::Loop { at, ptr });
            }
            *slot = true;
            let next = ((header >> 20) & 0xffc) as u16;
            out.push(ExtCapabilityEntry {
                id: (header & 0xffff) as u16,
                version: ((header >> 16) & 0xf) as u8,
                offset: ptr,
                next,
                len: 0,
                len_source: LenSource::Spec,
            });
            at = ptr + 2;
            ptr = next;
        }
        let starts: Vec<usize> = out.iter().map(|c| c.offset as usize).collect();
        let region = Self {
            bytes: &self.bytes[..CONFIG_EXTENDED_LEN],
        };
        for cap in &mut out {
            let (len, source) = match ext_cap_len(&region, cap.id, cap.offset as usize) {
                Some((len, source)) => (len, source),
                None => (
                    conservative_len(cap.offset as usize, &starts, CONFIG_EXTENDED_LEN),
                    LenSource::UpToNext,
                ),
            };
            if cap.offset as usize + len as usize > CONFIG_EXTENDED_LEN {
                return Err(WalkError::Overrun {
                    id: cap.id,
                    offset: cap.offset,
                    len,
                    end: CONFIG_EXTENDED_LEN,
                });
            }
            cap.len = len;
            cap.len_source = source;
        }
        Ok(out)
    }

    /// The first standard capability with `id`.
    pub fn find_capability(&self, id: u8) -> Result<Option<CapabilityEntry>, WalkError> {
        Ok(self.capabilities()?.into_iter().find(|c| c.id == id))
    }

    /// The first extended capability with `id`.
    pub fn find_extended_capability(
        &self,
        id: u16,
    ) -> Result<Option<ExtCapabilityEntry>, WalkError> {
        Ok(self
            .extended_capabilities()?
            .into_iter()
            .find(|c| c.id == id))
    }
}

/// Length of a capability whose size the spec does not fix: up to the nearest
/// capability that starts after it, else to the end of its region. Never less
/// than the header, so a range always covers the bytes the walker read.
fn conservative_len(offset: usize, starts: &[usize], region_end: usize) -> u16 {
    let end = starts
        .iter()
        .copied()
        .filter(|&s| s > offset)
        .min()
        .unwrap_or(region_end)
        .max(offset + 2);
    (end - offset) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 256-byte type-0 header with a capability list: caps are (offset, id, len byte).
    pub(crate) fn space_with(caps: &[(u8, u8)]) -> Vec<u8> {
        let mut b = vec![0u8; 256];
        b[0] = 0xde;
        b[1] = 0x10;
        b[6] = 0x10;
        let mut prev = 0x34usize;
        for &(off, id) in caps {
            b[prev] = off;
            b[off as usize] = id;
            prev = off as usize + 1;
        }
        b
    }

    #[test]
    fn walks_a_chain_and_sizes_it() {
        let mut b = space_with(&[(0x40, 0x01), (0x48, 0x05), (0x60, 0x10), (0xb0, 0x11)]);
        b[0x4a] = 0x80; // MSI 64-bit, no masking: 14 bytes
        b[0x62] = 0x02; // PCIe capability version 2
        let cs = ConfigSpace::new(&b).unwrap();
        let caps = cs.capabilities().unwrap();
        let got: Vec<(u8, u8, u16)> = caps.iter().map(|c| (c.offset, c.id, c.len)).collect();
        assert_eq!(
            got,
            vec![
                (0x40, 1, 8),
                (0x48, 5, 14),
                (0x60, 0x10, 0x3c),
                (0xb0, 0x11, 12)
            ]
        );
    }

    #[test]
    fn reports_loops_header_pointers_and_truncation() {
        let mut b = space_with(&[(0x40, 0x01), (0x50, 0x05)]);
        b[0x51] = 0x40;
        assert_eq!(
            ConfigSpace::new(&b).unwrap().capabilities(),
            Err(WalkError::Loop {
                at: 0x51,
                ptr: 0x40
            })
        );
        let mut b = space_with(&[(0x40, 0x01)]);
        b[0x41] = 0x20;
        assert_eq!(
            ConfigSpace::new(&b).unwrap().capabilities(),
            Err(WalkError::PointerIntoHeader {
                at: 0x41,
                ptr: 0x20
            })
        );
        let b = space_with(&[(0x40, 0x01)]);
        assert!(matches!(
            ConfigSpace::new(&b[..64]).unwrap().capabilities(),
            Err(WalkError::PastEnd {
                ptr: 0x40,
                len: 64,
                ..
            })
        ));
        assert_eq!(
            ConfigSpace::new(&b[..63]).unwrap_err(),
            ConfigError::ShorterThanHeader(63)
        );
    }

    #[test]
    fn unknown_lengths_run_to_the_next_capability() {
        let b = space_with(&[(0x40, 0x33), (0x58, 0x01)]);
        let caps = ConfigSpace::new(&b).unwrap().capabilities().unwrap();
        assert_eq!(
            (caps[0].len, caps[0].len_source),
            (0x18, LenSource::UpToNext)
        );
    }

    #[test]
    fn capability_past_the_region_is_an_overrun() {
        let mut b = space_with(&[(0xf0, 0x10)]);
        b[0xf2] = 0x02;
        assert!(matches!(
            ConfigSpace::new(&b).unwrap().capabilities(),
            Err(WalkError::Overrun {
                offset: 0xf0,
                len: 0x3c,
                ..
            })
        ));
    }

    #[test]
    fn extended_list_walks_through_hidden_headers() {
        let mut b = space_with(&[]);
        b.resize(4096, 0);
        // 0x100: id 0 (hidden), next 0x12c; 0x12c: LTR v1, next 0.
        b[0x100..0x104].copy_from_slice(&(0x12c0_0000u32).to_le_bytes());
        b[0x12c..0x130].copy_from_slice(&(0x0001_0018u32).to_le_bytes());
        let caps = ConfigSpace::new(&b)
            .unwrap()
            .extended_capabilities()
            .unwrap();
        let got: Vec<(u16, u16, u16)> = caps.iter().map(|c| (c.offset, c.id, c.len)).collect();
        assert_eq!(got, vec![(0x100, 0, 0x2c), (0x12c, 0x18, 8)]);
    }
}
