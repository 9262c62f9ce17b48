//! Property tests for the config-space walkers (`ConfigSpace::capabilities`,
//! `extended_capabilities` and the accessors built on them).
//!
//! - arbitrary bytes: nothing panics and whatever comes back obeys the invariants
//!   in fuzz/src/walkers.rs (shared with the `walkers` fuzz target);
//! - generated valid chains: the walker returns exactly the capabilities placed, in
//!   chain order, with the lengths the PCI / PCI Express specs give them;
//! - mutated chains: a loop, a pointer into the header, a pointer past the bytes
//!   read and a capability past its region give exactly the matching `WalkError`.

#[path = "../../fuzz/src/walkers.rs"]
mod invariants;

use p2p_shared::pci::{
    CapabilityEntry, ConfigSpace, ExtCapabilityEntry, LenSource, WalkError,
    CONFIG_EXTENDED_LEN as EXT, CONFIG_LEGACY_LEN as LEGACY,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

/// `len` bytes of deterministic noise from `seed` (splitmix64).
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let z = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            ((z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb) >> 56) as u8
        })
        .collect()
}

/// Config-space reads: the 64-byte header of a non-root reader, 256 bytes of
/// conventional space, 4096 of PCI Express space, and anything in between.
fn config_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => vec(any::<u8>(), 64),
        2 => vec(any::<u8>(), 256),
        2 => vec(any::<u8>(), 4096),
        2 => vec(any::<u8>(), 0..=4096),
    ]
}

/// Noise shaped like a config space: a live function with a capability list whose
/// pointers and ids are drawn from few values, so chains are long, loop, and hit
/// every length rule and every region edge.
fn chain_shaped_bytes() -> impl Strategy<Value = Vec<u8>> {
    let std_ids = select(vec![0x01u8, 0x05, 0x07, 0x09, 0x10, 0x11, 0x12, 0x13, 0x33]);
    let ext_ids = select(vec![
        0x0000u16, 0x0001, 0x000b, 0x000d, 0x0015, 0x0018, 0x0023, 0x0042,
    ]);
    (
        prop_oneof![Just(256usize), Just(4096), 64usize..=4096],
        any::<u64>(),
        0u8..=2,
        // The last dwords of each region, where length registers run off the end, often.
        vec((prop_oneof![0x10u8..=0x3f, 0x3eu8..=0x3f], std_ids), 0..24),
        vec(
            (prop_oneof![0x40u16..=0x3ff, 0x3feu16..=0x3ff], ext_ids),
            0..48,
        ),
    )
        .prop_map(|(len, seed, header_type, std, ext)| {
            let mut b = noise(seed, len);
            b[..2].copy_from_slice(&[0xde, 0x10]);
            b[6] |= 0x10;
            b[0x0e] = header_type;
            let mut at = register(header_type);
            for (dword, id) in std {
                let off = usize::from(dword) * 4;
                if off + 2 > b.len() {
                    b[at] = off as u8;
                    break;
                }
                b[at] = off as u8;
                b[off] = id;
                at = off + 1;
            }
            if b.len() >= EXT {
                let mut at = LEGACY;
                for (dword, id) in ext {
                    let off = usize::from(dword) * 4;
                    set_ext_next(&mut b, at, off as u16);
                    b[off..off + 2].copy_from_slice(&id.to_le_bytes());
                    at = off;
                }
            }
            b
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn walkers_on_arbitrary_bytes(bytes in config_bytes()) {
        invariants::check(&bytes).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn walkers_on_chain_shaped_noise(bytes in chain_shaped_bytes()) {
        invariants::check(&bytes).map_err(TestCaseError::fail)?;
    }

    /// The standard walker reads the first 256 bytes only, the extended one the
    /// first 4096: a capability whose length register lies past its region is an
    /// overrun whatever the bytes beyond say, not a short capability.
    #[test]
    fn walkers_read_only_their_region(bytes in chain_shaped_bytes(), tail in vec(any::<u8>(), 1..16)) {
        let mut longer = bytes.clone();
        longer.extend(&tail);
        invariants::check_regions(&bytes).map_err(TestCaseError::fail)?;
        invariants::check_regions(&longer).map_err(TestCaseError::fail)?;
    }
}

// ---------------------------------------------------------------------------
// Valid chains.

/// A standard capability of known layout, or one the walker cannot size.
#[derive(Debug, Clone)]
enum Std {
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

fn std_cap() -> impl Strategy<Value = Std> {
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
    fn id(&self) -> u8 {
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
    fn len(&self, header_type: u8) -> Option<(u16, LenSource)> {
        let spec = |n| Some((n, LenSource::Spec));
        match *self {
            Std::Fixed { len, .. } => spec(len),
            Std::Msi { control } => spec(10 + 4 * (control >> 7 & 1) + 10 * (control >> 8 & 1)),
            Std::Pcie { flags } => spec(if flags & 0xf >= 2 { 0x3c } else { 0x24 }),
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

    fn size(&self, header_type: u8) -> u16 {
        match *self {
            Std::Unknown { size, .. } => size,
            _ => self.len(header_type).unwrap().0,
        }
    }

    /// Writes the id and the registers that decide the length; `next` is linked later.
    fn write(&self, b: &mut [u8], off: usize) {
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
enum Ext {
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

fn ext_cap() -> impl Strategy<Value = Ext> {
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
    fn id(&self) -> u16 {
        match *self {
            Ext::Fixed { id, .. } | Ext::Vsec { id, .. } | Ext::Unknown { id, .. } => id,
            Ext::Acs { .. } => 0x0d,
            Ext::Rebar { .. } => 0x15,
        }
    }

    fn len(&self) -> Option<(u16, LenSource)> {
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

    fn size(&self) -> u16 {
        match *self {
            Ext::Unknown { size, .. } => size,
            _ => self.len().unwrap().0,
        }
    }

    fn write(&self, b: &mut [u8], off: usize, version: u8) {
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
fn lay_out(sizes: &[u16], gaps: &[u8], start: usize, end: usize) -> Vec<(usize, usize)> {
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
fn set_ext_next(b: &mut [u8], at: usize, next: u16) {
    b[at + 2] = b[at + 2] & 0x0f | (next << 4) as u8;
    b[at + 3] = (next >> 4) as u8;
}

/// A 256- or 4096-byte config space of noise holding a valid standard list.
#[derive(Debug, Clone)]
struct StdChain {
    bytes: Vec<u8>,
    header_type: u8,
    /// What the walker must return.
    expect: Vec<CapabilityEntry>,
}

fn std_chain_in(region_end: usize) -> impl Strategy<Value = StdChain> {
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
struct ExtChain {
    bytes: Vec<u8>,
    expect: Vec<ExtCapabilityEntry>,
}

fn ext_chain_in(region_end: usize) -> impl Strategy<Value = ExtChain> {
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
fn register(header_type: u8) -> usize {
    if header_type == 2 {
        0x14
    } else {
        0x34
    }
}

/// A chain below 0xc0 and a capability of known layout at an offset where it
/// does not fit below 0x100.
fn std_overrun() -> impl Strategy<Value = (StdChain, Std, usize)> {
    std_chain_in(0xc0).prop_flat_map(|chain| {
        let ht = chain.header_type;
        let cap = std_cap().prop_filter("longer than a dword", move |c| {
            c.len(ht).is_some_and(|(l, _)| l > 4)
        });
        (Just(chain), cap).prop_flat_map(move |(chain, cap)| {
            let len = usize::from(cap.len(ht).unwrap().0);
            let lo = (LEGACY + 1 - len).next_multiple_of(4).max(0xc0);
            (
                Just(chain),
                Just(cap),
                (lo / 4..LEGACY / 4).prop_map(|d| d * 4),
            )
        })
    })
}

/// A chain below 0xe00 and an extended capability of known layout at an offset
/// where it does not fit below 0x1000.
fn ext_overrun() -> impl Strategy<Value = (ExtChain, Ext, usize)> {
    let cap = ext_cap().prop_filter("known layout", |c| c.len().is_some());
    (ext_chain_in(0xe00), cap).prop_flat_map(|(chain, cap)| {
        let len = usize::from(cap.len().unwrap().0);
        let lo = (EXT + 1 - len).next_multiple_of(4).max(0xe00);
        (
            Just(chain),
            Just(cap),
            (lo / 4..EXT / 4).prop_map(|d| d * 4),
        )
    })
}

fn walk_std(bytes: &[u8]) -> Result<Vec<CapabilityEntry>, WalkError> {
    ConfigSpace::new(bytes)
        .expect("a live function")
        .capabilities()
}

fn walk_ext(bytes: &[u8]) -> Result<Vec<ExtCapabilityEntry>, WalkError> {
    ConfigSpace::new(bytes)
        .expect("a live function")
        .extended_capabilities()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn valid_standard_chain_walks_exactly(chain in std_chain_in(LEGACY)) {
        prop_assert_eq!(walk_std(&chain.bytes), Ok(chain.expect));
        invariants::check(&chain.bytes).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn valid_extended_chain_walks_exactly(chain in ext_chain_in(EXT)) {
        prop_assert_eq!(walk_ext(&chain.bytes), Ok(chain.expect));
        invariants::check(&chain.bytes).map_err(TestCaseError::fail)?;
    }

    /// Capability `i` (or the pointer register when i == len) points back at `j <= i`.
    #[test]
    fn standard_loop(chain in std_chain_in(LEGACY), i in any::<prop::sample::Index>(), j in any::<prop::sample::Index>(), low in 0u8..4) {
        prop_assume!(!chain.expect.is_empty());
        let mut b = chain.bytes;
        let i = i.index(chain.expect.len());
        let j = j.index(i + 1);
        let at = chain.expect[i].offset as usize + 1;
        let ptr = chain.expect[j].offset;
        b[at] = ptr | low;
        prop_assert_eq!(walk_std(&b), Err(WalkError::Loop { at: at as u16, ptr: ptr.into() }));
    }

    #[test]
    fn standard_pointer_into_header(chain in std_chain_in(LEGACY), i in any::<prop::sample::Index>(), dword in 1u8..16, low in 0u8..4) {
        let mut b = chain.bytes;
        let i = i.index(chain.expect.len() + 1);
        let at = chain.expect.get(i).map_or(register(chain.header_type), |c| c.offset as usize + 1);
        b[at] = (dword * 4) | low;
        prop_assert_eq!(walk_std(&b), Err(WalkError::PointerIntoHeader { at: at as u16, ptr: u16::from(dword) * 4 }));
    }

    /// The read stops before a capability's header: the first one in chain order
    /// whose two header bytes were not read is reported, with the pointer to it.
    #[test]
    fn standard_pointer_past_the_end(chain in std_chain_in(LEGACY), cut in any::<prop::sample::Index>()) {
        let last = chain.expect.iter().map(|c| c.offset as usize + 2).max();
        prop_assume!(last.is_some());
        let len = 64 + cut.index(last.unwrap() - 64);
        let k = chain.expect.iter().position(|c| c.offset as usize + 2 > len).unwrap();
        let at = if k == 0 { register(chain.header_type) } else { chain.expect[k - 1].offset as usize + 1 };
        let ptr = chain.expect[k].offset.into();
        prop_assert_eq!(walk_std(&chain.bytes[..len]), Err(WalkError::PastEnd { at: at as u16, ptr, len }));
    }

    /// A capability of known layout that does not fit below 0x100 is an overrun,
    /// wherever it sits in the chain, including at 0xfc where some of its length
    /// registers lie past the region.
    #[test]
    fn standard_capability_past_its_region((chain, cap, off) in std_overrun(), pos in any::<prop::sample::Index>()) {
        let mut b = chain.bytes;
        let offs: Vec<u8> = chain.expect.iter().map(|c| c.offset).collect();
        let pos = pos.index(offs.len() + 1);
        let at = if pos == 0 { register(chain.header_type) } else { usize::from(offs[pos - 1]) + 1 };
        let n = b.len();
        b.resize(n.max(off + 8), 0);
        cap.write(&mut b, off);
        b.truncate(n);
        b[at] = off as u8;
        b[off + 1] = offs.get(pos).copied().unwrap_or(0);
        let len = cap.len(chain.header_type).unwrap().0;
        match walk_std(&b) {
            Err(WalkError::Overrun { id, offset, len: got, end }) => {
                prop_assert_eq!((id, usize::from(offset), end), (u16::from(cap.id()), off, LEGACY));
                prop_assert!(off + usize::from(got) > LEGACY);
                if off + 8 <= LEGACY {
                    prop_assert_eq!(got, len);
                }
            }
            other => prop_assert!(false, "{:?} at {:#x} in {:?} gave {:?}", cap, off, offs, other),
        }
    }

    #[test]
    fn extended_loop(chain in ext_chain_in(EXT), i in any::<prop::sample::Index>(), j in any::<prop::sample::Index>()) {
        let mut b = chain.bytes;
        let i = i.index(chain.expect.len());
        let j = j.index(i + 1);
        let off = chain.expect[i].offset as usize;
        let ptr = chain.expect[j].offset;
        set_ext_next(&mut b, off, ptr);
        prop_assert_eq!(walk_ext(&b), Err(WalkError::Loop { at: off as u16 + 2, ptr }));
    }

    #[test]
    fn extended_pointer_into_header(chain in ext_chain_in(EXT), i in any::<prop::sample::Index>(), dword in 1u16..0x40) {
        let mut b = chain.bytes;
        let off = chain.expect[i.index(chain.expect.len())].offset as usize;
        let ptr = dword * 4;
        set_ext_next(&mut b, off, ptr);
        prop_assert_eq!(walk_ext(&b), Err(WalkError::PointerIntoHeader { at: off as u16 + 2, ptr }));
    }

    /// A 12-bit pointer cannot point past 4096 bytes; the extended "past the end"
    /// is a capability whose length runs past 0x1000 (at 0xffc, its length
    /// registers lie past the region: still an overrun, and bytes read past 4096
    /// do not matter).
    #[test]
    fn extended_capability_past_its_region((chain, cap, off) in ext_overrun(), tail in vec(any::<u8>(), 0..12)) {
        let mut b = chain.bytes;
        b.extend(&tail);
        let n = b.len();
        b.resize(n.max(off + 12), 0);
        cap.write(&mut b, off, 1);
        b.truncate(n);
        set_ext_next(&mut b, chain.expect.last().unwrap().offset as usize, off as u16);
        match walk_ext(&b) {
            Err(WalkError::Overrun { id, offset, len, end }) => {
                prop_assert_eq!((id, usize::from(offset), end), (cap.id(), off, EXT));
                prop_assert!(off + usize::from(len) > EXT);
                if off + 12 <= EXT {
                    prop_assert_eq!(len, cap.len().unwrap().0);
                }
            }
            other => prop_assert!(false, "{:?} at {:#x} gave {:?}", cap, off, other),
        }
    }
}
