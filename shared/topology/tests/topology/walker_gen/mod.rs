//! Generators shared by the walker property tests (`walkers.rs`,
//! `walker_chains.rs`, `walker_mutations.rs`): deterministic noise, capabilities
//! of known layout, and valid standard / extended chains laid into config spaces
//! together with what the walkers must return for them.

#![allow(dead_code)]

/// The invariants that must hold for ANY bytes; the `walkers` fuzz target checks
/// the same list.
pub use p2p_test_support::walker_invariants as invariants;

use p2p_topology::pci::{
    CapabilityEntry, ConfigSpace, ExtCapabilityEntry, LenSource, WalkError,
    CONFIG_EXTENDED_LEN as EXT, CONFIG_LEGACY_LEN as LEGACY,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

/// `len` bytes of deterministic noise from `seed` (splitmix64).
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let z = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            ((z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb) >> 56) as u8
        })
        .collect()
}

/// A standard capability of known layout, or one the walker cannot size.
#[derive(Debug, Clone)]
pub enum Std {
    /// Length fixed by the spec: PM, VPD, slot id, hot swap, debug port, SSVID, MSI-X, AF.
    Fixed { id: u8, len: u16 },
    /// Message Control at +2: bit 7 64-bit address, bit 8 per-vector masking.
    Msi { control: u16 },
    /// Capabilities register at +2: bits 3:0 the structure version.
    Pcie { flags: u16 },
    /// PCI-X: Command at +2 (bits 13:12 version), Status at +4.
    PciX { command: u16, status: u32 },
    /// SATA: bits 3:0 of +4 = 0xf when the registers sit in config space.
    Sata { regs: u8 },
    /// Vendor specific: +2 is the length, header included.
    Vendor { len: u8 },
    /// An id the walker does not know: sized up to the next capability.
    Unknown { id: u8, size: u16 },
}

pub fn std_cap() -> impl Strategy<Value = Std> {
    let fixed = [
        (0x01, 8),
        (0x03, 8),
        (0x04, 4),
        (0x06, 4),
        (0x0a, 4),
        (0x0d, 8),
        (0x11, 12),
        (0x13, 6),
    ];
    let known = [
        0x01, 0x03, 0x04, 0x05, 0x06, 0x07, 0x09, 0x0a, 0x0d, 0x10, 0x11, 0x12, 0x13,
    ];
    prop_oneof![
        select(fixed.to_vec()).prop_map(|(id, len)| Std::Fixed { id, len }),
        any::<u16>().prop_map(|control| Std::Msi { control }),
        any::<u16>().prop_map(|flags| Std::Pcie { flags }),
        (any::<u16>(), any::<u32>()).prop_map(|(command, status)| Std::PciX { command, status }),
        prop_oneof![Just(0x0fu8), any::<u8>()].prop_map(|regs| Std::Sata { regs }),
        (3u8..=40).prop_map(|len| Std::Vendor { len }),
        (
            any::<u8>().prop_filter("unknown id", move |id| !known.contains(id)),
            2u16..=16
        )
            .prop_map(|(id, size)| Std::Unknown { id, size }),
    ]
}

impl Std {
    pub fn id(&self) -> u8 {
        match *self {
            Std::Fixed { id, .. } | Std::Unknown { id, .. } => id,
            Std::Msi { .. } => 0x05,
            Std::Pcie { .. } => 0x10,
            Std::PciX { .. } => 0x07,
            Std::Sata { .. } => 0x12,
            Std::Vendor { .. } => 0x09,
        }
    }

    /// Its length and how the walker knows it; None when only "up to the next" can be said.
    pub fn len(&self, header_type: u8) -> Option<(u16, LenSource)> {
        let spec = |n| Some((n, LenSource::Spec));
        match *self {
            Std::Fixed { len, .. } => spec(len),
            Std::Msi { control } => spec(10 + 4 * (control >> 7 & 1) + 10 * (control >> 8 & 1)),
            // Version 2: 0x3c; version 1: 0x14 for endpoints (device/port
            // type, bits 7:4, 0x0 or 0x1), 0x24 for ports.
            Std::Pcie { flags } => spec(match (flags & 0xf >= 2, (flags >> 4) & 0xf <= 1) {
                (true, _) => 0x3c,
                (false, true) => 0x14,
                (false, false) => 0x24,
            }),
            // Linux (PCI_X_CMD_VERSION, PCI_CAP_PCIX_SIZEOF_V0/V1): version 0 has 8 bytes,
            // versions 1 and 2 add the ECC registers (24); a PCI-X bridge has 16.
            Std::PciX { command, .. } if header_type != 1 => {
                spec(if command >> 12 & 3 != 0 { 24 } else { 8 })
            }
            Std::PciX { .. } => spec(16),
            // PCI_SATA_SIZEOF_LONG when the registers are inline, else _SHORT.
            Std::Sata { regs } => spec(if regs & 0xf == 0xf { 16 } else { 8 }),
            Std::Vendor { len } => Some((len.into(), LenSource::SelfDescribed)),
            Std::Unknown { .. } => None,
        }
    }

    pub fn size(&self, header_type: u8) -> u16 {
        match *self {
            Std::Unknown { size, .. } => size,
            _ => self.len(header_type).unwrap().0,
        }
    }

    /// Writes the id and the registers that decide the length; `next` is linked later.
    pub fn write(&self, b: &mut [u8], off: usize) {
        b[off] = self.id();
        match *self {
            Std::Msi { control: r } | Std::Pcie { flags: r } => {
                b[off + 2..off + 4].copy_from_slice(&r.to_le_bytes())
            }
            Std::PciX { command, status } => {
                b[off + 2..off + 4].copy_from_slice(&command.to_le_bytes());
                b[off + 4..off + 8].copy_from_slice(&status.to_le_bytes());
            }
            Std::Sata { regs } => b[off + 4] = regs,
            Std::Vendor { len } => b[off + 2] = len,
            Std::Fixed { .. } | Std::Unknown { .. } => {}
        }
    }
}

/// An extended capability of known layout, or one the walker cannot size.
#[derive(Debug, Clone)]
pub enum Ext {
    /// AER 0x48, DSN 0x0c, power budgeting 0x10, ARI/ATS/LTR/PASID 8, SR-IOV 0x40, L1SS 0x10, PTM 0x0c.
    Fixed { id: u16, len: u16 },
    /// ACS: capability register at +4, bit 5 egress control, bits 15:8 vector size.
    Acs { cap: u16 },
    /// VSEC (0x0b) or DVSEC (0x23): bits 31:20 of +4 hold the length.
    Vsec { id: u16, len: u16 },
    /// Resizable BAR: bits 7:5 of +8 count the BARs (1..=6).
    Rebar { bars: u8 },
    /// Id 0 (a header a hypervisor hid) or an unknown id.
    Unknown { id: u16, size: u16 },
}

pub fn ext_cap() -> impl Strategy<Value = Ext> {
    let fixed = [
        (0x01, 0x48),
        (0x03, 0x0c),
        (0x04, 0x10),
        (0x0e, 8),
        (0x0f, 8),
        (0x10, 0x40),
        (0x18, 8),
        (0x1b, 8),
        (0x1e, 0x10),
        (0x1f, 0x0c),
    ];
    prop_oneof![
        select(fixed.to_vec()).prop_map(|(id, len)| Ext::Fixed { id, len }),
        prop_oneof![any::<u16>(), (0u16..=0xff).prop_map(|v| v | 0x20)]
            .prop_map(|cap| Ext::Acs { cap }),
        (select(vec![0x0bu16, 0x23]), 8u16..=0x100).prop_map(|(id, len)| Ext::Vsec { id, len }),
        (1u8..=6).prop_map(|bars| Ext::Rebar { bars }),
        (prop_oneof![Just(0u16), 0x0040u16..=0x0fff], 4u16..=0x40)
            .prop_map(|(id, size)| Ext::Unknown { id, size }),
    ]
}

impl Ext {
    pub fn id(&self) -> u16 {
        match *self {
            Ext::Fixed { id, .. } | Ext::Vsec { id, .. } | Ext::Unknown { id, .. } => id,
            Ext::Acs { .. } => 0x0d,
            Ext::Rebar { .. } => 0x15,
        }
    }

    pub fn len(&self) -> Option<(u16, LenSource)> {
        let spec = |n| Some((n, LenSource::Spec));
        match *self {
            Ext::Fixed { len, .. } => spec(len),
            Ext::Acs { cap } if cap & 0x20 == 0 => spec(8),
            // The egress control vector: bits 15:8 bits, 0 meaning 256, in whole dwords.
            Ext::Acs { cap } => {
                let bits = match cap >> 8 {
                    0 => 256,
                    n => n.next_multiple_of(32),
                };
                spec(8 + bits / 8)
            }
            Ext::Vsec { len, .. } => Some((len, LenSource::SelfDescribed)),
            Ext::Rebar { bars } => spec(4 + 8 * u16::from(bars)),
            Ext::Unknown { .. } => None,
        }
    }

    pub fn size(&self) -> u16 {
        match *self {
            Ext::Unknown { size, .. } => size,
            _ => self.len().unwrap().0,
        }
    }

    pub fn write(&self, b: &mut [u8], off: usize, version: u8) {
        let header = u32::from(self.id()) | u32::from(version & 0xf) << 16;
        b[off..off + 4].copy_from_slice(&header.to_le_bytes());
        match *self {
            Ext::Acs { cap } => b[off + 4..off + 6].copy_from_slice(&cap.to_le_bytes()),
            Ext::Vsec { len, .. } => {
                let h1 = u32::from_le_bytes(b[off + 4..off + 8].try_into().unwrap()) & 0xfffff
                    | u32::from(len) << 20;
                b[off + 4..off + 8].copy_from_slice(&h1.to_le_bytes());
            }
            Ext::Rebar { bars } => b[off + 8] = b[off + 8] & !0xe0 | bars << 5,
            Ext::Fixed { .. } | Ext::Unknown { .. } => {}
        }
    }
}

/// Lays `sizes` out one after another from `start`, each after a gap of
/// `gaps[i]` dwords, dword aligned, dropping those that would pass `end`.
/// Returns (index into sizes, offset) in address order.
pub fn lay_out(sizes: &[u16], gaps: &[u8], start: usize, end: usize) -> Vec<(usize, usize)> {
    let mut placed = Vec::new();
    let mut at = start;
    for (i, (&size, &gap)) in sizes.iter().zip(gaps).enumerate() {
        let off = at + 4 * usize::from(gap);
        if off + usize::from(size) <= end {
            placed.push((i, off));
            at = (off + usize::from(size)).next_multiple_of(4);
        }
    }
    placed
}

/// Points the extended header at `at` to `next`, keeping its id and version.
pub fn set_ext_next(b: &mut [u8], at: usize, next: u16) {
    b[at + 2] = b[at + 2] & 0x0f | (next << 4) as u8;
    b[at + 3] = (next >> 4) as u8;
}

/// A 256- or 4096-byte config space of noise holding a valid standard list.
#[derive(Debug, Clone)]
pub struct StdChain {
    pub bytes: Vec<u8>,
    pub header_type: u8,
    /// What the walker must return.
    pub expect: Vec<CapabilityEntry>,
}

pub fn std_chain_in(region_end: usize) -> impl Strategy<Value = StdChain> {
    (
        vec((std_cap(), 0u8..6), 0..10),
        0u8..=2,
        any::<bool>(),
        any::<u64>(),
    )
        .prop_flat_map(move |(caps, header_type, long, seed)| {
            let n = caps.len();
            (
                Just((caps, header_type, long, seed)),
                Just((0..n).collect::<Vec<_>>()).prop_shuffle(),
            )
        })
        .prop_map(move |((caps, header_type, long, seed), order)| {
            let mut b = noise(seed, if long { EXT } else { LEGACY });
            b[..2].copy_from_slice(&[0xde, 0x10]);
            b[6] |= 0x10;
            b[0x0e] = b[0x0e] & 0x80 | header_type;
            let sizes: Vec<u16> = caps.iter().map(|(c, _)| c.size(header_type)).collect();
            let gaps: Vec<u8> = caps.iter().map(|(_, g)| *g).collect();
            let placed = lay_out(&sizes, &gaps, 0x40, region_end);
            let starts: Vec<usize> = placed.iter().map(|&(_, off)| off).collect();
            let chain: Vec<(usize, usize)> = order
                .iter()
                .filter_map(|i| placed.iter().find(|p| p.0 == *i).copied())
                .collect();
            let mut expect = Vec::new();
            let mut at = register(header_type);
            for (k, &(i, off)) in chain.iter().enumerate() {
                let cap = &caps[i].0;
                cap.write(&mut b, off);
                b[at] = off as u8 | b[at] & 3; // reserved low bits are masked
                at = off + 1;
                let (len, len_source) = cap.len(header_type).unwrap_or_else(|| {
                    let end = starts
                        .iter()
                        .copied()
                        .filter(|&s| s > off)
                        .min()
                        .unwrap_or(LEGACY);
                    ((end - off) as u16, LenSource::UpToNext)
                });
                let next = chain.get(k + 1).map_or(0, |&(_, o)| o as u8);
                expect.push(CapabilityEntry {
                    id: cap.id(),
                    offset: off as u8,
                    next,
                    len,
                    len_source,
                });
            }
            b[at] &= 3;
            StdChain {
                bytes: b,
                header_type,
                expect,
            }
        })
}

/// A 4096-byte config space of noise holding a valid extended list.
#[derive(Debug, Clone)]
pub struct ExtChain {
    pub bytes: Vec<u8>,
    pub expect: Vec<ExtCapabilityEntry>,
}

pub fn ext_chain_in(region_end: usize) -> impl Strategy<Value = ExtChain> {
    // The first capability sits at 0x100 and is a known one (a zero header there ends the list).
    let first = ext_cap().prop_filter("not a hidden header first", |c| c.id() != 0);
    (
        first,
        vec((ext_cap(), 0u8..40, 0u8..16), 0..16),
        0u8..16,
        any::<u64>(),
    )
        .prop_flat_map(|(first, rest, version, seed)| {
            let n = rest.len();
            (
                Just((first, rest, version, seed)),
                Just((1..=n).collect::<Vec<_>>()).prop_shuffle(),
            )
        })
        .prop_map(move |((first, rest, version, seed), order)| {
            let mut caps = vec![(first, 0u8, version)];
            caps.extend(rest);
            let mut b = noise(seed, EXT);
            b[..2].copy_from_slice(&[0xde, 0x10]);
            let sizes: Vec<u16> = caps.iter().map(|(c, _, _)| c.size()).collect();
            let gaps: Vec<u8> = caps.iter().map(|(_, g, _)| *g).collect();
            let placed = lay_out(&sizes, &gaps, LEGACY, region_end);
            let starts: Vec<usize> = placed.iter().map(|&(_, off)| off).collect();
            let chain: Vec<(usize, usize)> = std::iter::once(0)
                .chain(order)
                .filter_map(|i| placed.iter().find(|p| p.0 == i).copied())
                .collect();
            let mut expect = Vec::new();
            for (k, &(i, off)) in chain.iter().enumerate() {
                let (cap, _, version) = &caps[i];
                cap.write(&mut b, off, *version);
                let next = chain.get(k + 1).map_or(0, |&(_, o)| o as u16);
                // Bits 21:20 are the pointer's reserved low bits: noise there is masked.
                let reserved = u16::from(b[EXT - 1 - k] & 3);
                set_ext_next(&mut b, off, next | reserved);
                let (len, len_source) = cap.len().unwrap_or_else(|| {
                    let end = starts
                        .iter()
                        .copied()
                        .filter(|&s| s > off)
                        .min()
                        .unwrap_or(EXT);
                    ((end - off) as u16, LenSource::UpToNext)
                });
                expect.push(ExtCapabilityEntry {
                    id: cap.id(),
                    version: version & 0xf,
                    offset: off as u16,
                    next,
                    len,
                    len_source,
                });
            }
            ExtChain { bytes: b, expect }
        })
}

/// The register that holds the first standard pointer: 0x14 in a CardBus header.
pub fn register(header_type: u8) -> usize {
    if header_type == 2 {
        0x14
    } else {
        0x34
    }
}

pub fn walk_std(bytes: &[u8]) -> Result<Vec<CapabilityEntry>, WalkError> {
    ConfigSpace::new(bytes)
        .expect("a live function")
        .capabilities()
}

pub fn walk_ext(bytes: &[u8]) -> Result<Vec<ExtCapabilityEntry>, WalkError> {
    ConfigSpace::new(bytes)
        .expect("a live function")
        .extended_capabilities()
}
