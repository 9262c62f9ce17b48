//! Property tests of the config-space overlay over generated config spaces
//! with valid capability chains (capabilities of known and unknown layouts at
//! random dword offsets, linked in a random order, noise everywhere else).

use p2p_host::overlay::{ConfigOverlay, OverlayError, OverlayOptions, PhysicalConfig};
use p2p_topology::pci::{CapabilityEntry, ConfigSpace};
use p2p_topology::{Clique, P2pCapability};
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use std::sync::atomic::{AtomicUsize, Ordering};

/// One capability to lay out: its kind decides its length.
#[derive(Debug, Clone)]
enum Kind {
    PowerManagement,
    /// MSI with 64-bit addresses and/or per-vector masking (10..24 bytes).
    Msi {
        is64: bool,
        masking: bool,
    },
    /// PCI Express, version 1 (0x24 bytes) or 2 (0x3c bytes).
    Express {
        v2: bool,
    },
    MsiX,
    /// Vendor-specific, stating its own length (3..=24).
    Vendor {
        len: u8,
    },
    /// An id whose layout the walker does not know (length: up to the next one).
    Unknown {
        id: u8,
        room: u8,
    },
}

impl Kind {
    fn id(&self) -> u8 {
        match self {
            Kind::PowerManagement => 0x01,
            Kind::Msi { .. } => 0x05,
            Kind::Express { .. } => 0x10,
            Kind::MsiX => 0x11,
            Kind::Vendor { .. } => 0x09,
            Kind::Unknown { id, .. } => *id,
        }
    }

    /// Bytes it occupies, at least.
    fn len(&self) -> usize {
        match self {
            Kind::PowerManagement => 8,
            Kind::Msi { is64, masking } => {
                [10, 14, 20, 24][usize::from(*is64) + 2 * usize::from(*masking)]
            }
            Kind::Express { v2 } => {
                if *v2 {
                    0x3c
                } else {
                    0x24
                }
            }
            Kind::MsiX => 12,
            Kind::Vendor { len } => usize::from(*len),
            Kind::Unknown { room, .. } => usize::from(*room),
        }
    }

    /// Writes the bytes that fix its identity and length (the rest stays noise).
    fn write(&self, b: &mut [u8], off: usize) {
        b[off] = self.id();
        match self {
            Kind::Msi { is64, masking } => {
                b[off + 2] = (b[off + 2] & 0x7f) | if *is64 { 0x80 } else { 0 };
                b[off + 3] = (b[off + 3] & 0xfe) | u8::from(*masking);
            }
            Kind::Express { v2 } => b[off + 2] = (b[off + 2] & 0xf0) | if *v2 { 2 } else { 1 },
            Kind::Vendor { len } => {
                b[off + 2] = *len;
                if b[off + 3] == b'P' {
                    b[off + 3] = 0; // never the P2P signature by chance
                }
            }
            _ => {}
        }
    }
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::PowerManagement),
        (any::<bool>(), any::<bool>()).prop_map(|(is64, masking)| Kind::Msi { is64, masking }),
        any::<bool>().prop_map(|v2| Kind::Express { v2 }),
        Just(Kind::MsiX),
        (3u8..=24).prop_map(|len| Kind::Vendor { len }),
        (
            prop::sample::select(vec![0x02u8, 0x08, 0x0b, 0x0c, 0x0e, 0x0f, 0x14, 0x33]),
            2u8..=16
        )
            .prop_map(|(id, room)| Kind::Unknown { id, room }),
    ]
}

/// A generated config space and what went into it.
#[derive(Debug, Clone)]
struct Generated {
    bytes: Vec<u8>,
    /// (offset, id) in list order.
    chain: Vec<(u8, u8)>,
    options: OverlayOptions,
}

prop_compose! {
    fn config_space()(
        noise in prop::collection::vec(any::<u8>(), 256),
        extended in prop::option::of(prop::collection::vec(any::<u8>(), 4096 - 256)),
        layout in prop::collection::vec((kind(), 0usize..6), 0..8),
        order_seed in prop::collection::vec(any::<u32>(), 8),
        nvidia in prop::bool::weighted(0.8),
        header_type in 0u8..2,
        list_bit_when_empty in any::<bool>(),
        any_offset in any::<bool>(),
        blank in prop::bool::weighted(0.8),
        junk in prop::collection::vec((0usize..0x30, any::<[u8; 4]>()), 0..3),
    ) -> Generated {
        let mut b = noise;
        let options = OverlayOptions { allow_non_nvidia: !nvidia, any_offset };
        // Real devices mostly read zero between capabilities; sometimes they
        // keep unlinked structures there (Turing's MSI-X at 0xc8): a few
        // stray dwords, or the noise itself when not blanked.
        if blank {
            b[0x40..0x100].fill(0);
            for (dw, bytes) in &junk {
                let at = 0x40 + 4 * dw;
                b[at..at + 4].copy_from_slice(bytes);
            }
        }
        if nvidia {
            b[0..2].copy_from_slice(&0x10de_u16.to_le_bytes());
            b[0x0b] = 0x03;
        } else if b[0..2] == [0xff, 0xff] {
            b[0] = 0;
        }
        b[0x0e] = (b[0x0e] & 0x80) | header_type;
        // Lay the capabilities out by offset, then link them in a shuffled order.
        let mut placed: Vec<(usize, Kind)> = Vec::new();
        let mut at = 0x40;
        for (k, gap) in layout {
            let off = at + 4 * gap;
            if off + k.len().max(2) > 0x100 {
                break;
            }
            k.write(&mut b, off);
            at = (off + k.len()).next_multiple_of(4).max(off + 4);
            placed.push((off, k));
        }
        let mut order: Vec<usize> = (0..placed.len()).collect();
        order.sort_by_key(|&i| order_seed[i]);
        let chain: Vec<(u8, u8)> =
            order.iter().map(|&i| (placed[i].0 as u8, placed[i].1.id())).collect();
        if chain.is_empty() {
            b[0x06] = (b[0x06] & !0x10) | if list_bit_when_empty { 0x10 } else { 0 };
            if list_bit_when_empty {
                b[0x34] &= 0x03; // the list is empty: the pointer reads 0
            }
        } else {
            b[0x06] |= 0x10;
            let mut prev = 0x34;
            for &(off, _) in &chain {
                // Reserved low bits of pointers are noise the walker masks off.
                b[prev] = off | (b[prev] & 0x03);
                prev = usize::from(off) + 1;
            }
            b[prev] &= 0x03;
        }
        if let Some(ext) = extended {
            b.extend(ext);
        }
        Generated { bytes: b, chain, options }
    }
}

fn walk(bytes: &[u8]) -> Vec<CapabilityEntry> {
    ConfigSpace::new(bytes).unwrap().capabilities().unwrap()
}

/// The slot docs/DESIGN.md asks for, found independently: 0xC8, then 0xD4,
/// when their 8 bytes are zero and overlap no capability; upwards from 0x40
/// only with `any_offset`.
fn expected_slot(bytes: &[u8], caps: &[CapabilityEntry], any_offset: bool) -> Option<u8> {
    let free = |s: usize| {
        caps.iter()
            .all(|c| c.end() <= s || s + 8 <= usize::from(c.offset))
            && bytes[s..s + 8].iter().all(|&x| x == 0)
    };
    let rest = (0x40..=0xf8).step_by(4).filter(move |_| any_offset);
    [0xc8, 0xd4]
        .into_iter()
        .chain(rest)
        .find(|&s| free(s))
        .map(|s| s as u8)
}

/// The bytes the overlay owns: the capability, the pointer to it, the status byte.
fn owned_offsets(o: &ConfigOverlay<impl PhysicalConfig>) -> Vec<usize> {
    (0..0x100)
        .filter(|&i| o.owned_mask(i as u64) != 0)
        .collect()
}

fn read_all(o: &ConfigOverlay<impl PhysicalConfig>, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    o.read(0, &mut v).unwrap();
    v
}

/// Guest writes: (target, delta, data). Target 0 aims at the capability,
/// 1 at the patched pointer (offsets relative to them), 2 anywhere.
fn writes() -> impl Strategy<Value = Vec<(u8, i16, Vec<u8>)>> {
    prop::collection::vec(
        (
            0u8..3,
            -12i16..4096,
            prop_oneof![
                prop::collection::vec(any::<u8>(), 1..=1),
                prop::collection::vec(any::<u8>(), 2..=2),
                prop::collection::vec(any::<u8>(), 4..=4),
                prop::collection::vec(any::<u8>(), 1..=24),
            ],
        ),
        1..40,
    )
}

/// The offset and data of one write, clamped into a config of `len` bytes.
fn resolve(
    (target, delta, data): (u8, i16, Vec<u8>),
    slot: usize,
    pointer: usize,
    len: usize,
) -> (usize, Vec<u8>) {
    let base = match target {
        0 => slot as i64 + i64::from(delta % 16),
        1 => pointer as i64 + i64::from(delta % 8),
        _ => i64::from(delta),
    };
    let n = data.len().min(len);
    let offset = (base.max(0) as usize).min(len - n);
    (offset, data[..n].to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn injected_list_walks_to_the_capability_last(g in config_space(), c in 0u8..16) {
        let clique = Clique::new(c).unwrap();
        let phys_caps = walk(&g.bytes);
        prop_assert_eq!(
            phys_caps.iter().map(|c| (c.offset, c.id)).collect::<Vec<_>>(),
            g.chain.clone()
        );
        let expected = expected_slot(&g.bytes, &phys_caps, g.options.any_offset);
        let o = match ConfigOverlay::new(&g.bytes, clique, g.options) {
            Ok(o) => o,
            Err(OverlayError::NoFreeSlot { rejected }) => {
                prop_assert_eq!(expected, None);
                prop_assert!(g.options.any_offset);
                prop_assert_eq!(rejected.len(), (0xf8 - 0x40) / 4 + 1);
                return Ok(());
            }
            Err(OverlayError::PreferredSlotsTaken { rejected }) => {
                prop_assert_eq!(expected, None);
                prop_assert!(!g.options.any_offset);
                prop_assert_eq!(rejected.len(), 2);
                return Ok(());
            }
            Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
        };
        let slot = o.placement().offset;
        prop_assert_eq!(Some(slot), expected);

        // Reads equal the virtual bytes: the physical ones with the patches applied.
        let mut v = g.bytes.clone();
        o.apply_to(&mut v);
        prop_assert_eq!(&read_all(&o, g.bytes.len()), &v);
        for p in o.patches() {
            prop_assert_eq!(p.offset % 4, 0);
            prop_assert_eq!(p.value & !p.mask, 0);
            prop_assert!(p.offset < 0x100);
        }

        // The walk: every original capability in its order with its bytes, then ours.
        let virt_caps = walk(&v);
        prop_assert_eq!(virt_caps.len(), phys_caps.len() + 1);
        for (p, q) in phys_caps.iter().zip(&virt_caps) {
            prop_assert_eq!((p.offset, p.id, p.len), (q.offset, q.id, q.len));
            let (s, e) = (usize::from(p.offset), p.end());
            for i in (s..e).filter(|&i| i != s + 1) {
                prop_assert_eq!(v[i], g.bytes[i], "byte {:#x} of capability at {:#x}", i, s);
            }
        }
        let last = virt_caps.last().unwrap();
        prop_assert_eq!((last.offset, last.id, last.next, last.len), (slot, 0x09, 0, 8));
        let cap = P2pCapability::decode(&v[usize::from(slot)..]).unwrap();
        prop_assert_eq!(cap, P2pCapability::new(clique, 0));

        // Only the owned bytes differ, and they are exactly the expected ones.
        let pointer = o.placement().pointer_offset().unwrap();
        let mut owned: Vec<usize> = (usize::from(slot)..usize::from(slot) + 8).collect();
        owned.push(usize::from(pointer));
        if o.placement().status_changed() {
            owned.push(0x06);
        }
        owned.sort_unstable();
        prop_assert_eq!(owned_offsets(&o), owned.clone());
        for (i, (a, b)) in v.iter().zip(&g.bytes).enumerate() {
            if !owned.contains(&i) {
                prop_assert_eq!(a, b, "byte {:#x}", i);
            }
        }
    }
}

/// Cases each of the two tests below runs.
const CASES: u32 = 512;

/// Runs `check` on [`CASES`] generated config spaces, each with a clique, a
/// value of `extra` and the overlay made for them. A refusal is checked
/// rather than skipped: it must be one the slot rule explains
/// ([`expected_slot`] finds no free slot). And most cases must be accepted,
/// else the test would check its property on a handful of spaces: 80% of
/// generated spaces are blanked between capabilities, and in those the
/// capabilities (at most 8, packed from 0x40) reach 0xC8 only when long ones
/// pile up, so well over half leave 0xC8 or 0xD4 free (65% to 72% of all
/// cases over 12 runs of 512 and the 2 saved regression seeds).
fn mostly_accepted<T: std::fmt::Debug>(
    extra: impl Strategy<Value = T>,
    check: impl Fn(&Generated, Clique, ConfigOverlay, T) -> Result<(), TestCaseError>,
) {
    let accepted = AtomicUsize::new(0);
    let refused = AtomicUsize::new(0);
    let config = ProptestConfig {
        cases: CASES,
        source_file: Some(file!()),
        ..ProptestConfig::default()
    };
    let result = TestRunner::new(config).run(&(config_space(), 0u8..16, extra), |(g, c, x)| {
        let clique = Clique::new(c).unwrap();
        match ConfigOverlay::new(&g.bytes, clique, g.options) {
            Ok(o) => {
                accepted.fetch_add(1, Ordering::Relaxed);
                check(&g, clique, o, x)
            }
            Err(OverlayError::NoFreeSlot { .. } | OverlayError::PreferredSlotsTaken { .. }) => {
                refused.fetch_add(1, Ordering::Relaxed);
                let free = expected_slot(&g.bytes, &walk(&g.bytes), g.options.any_offset);
                prop_assert_eq!(free, None, "refused, though this slot is free");
                Ok(())
            }
            Err(e) => Err(TestCaseError::fail(format!(
                "refused a valid config space: {e}"
            ))),
        }
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let (accepted, refused) = (accepted.into_inner(), refused.into_inner());
    eprintln!("{accepted} accepted, {refused} refused");
    assert!(
        accepted > refused,
        "the overlay accepted {accepted} of {} cases: too few to check anything",
        accepted + refused
    );
}

#[test]
fn reads_of_any_width_and_alignment_equal_the_virtual_bytes() {
    let windows = prop::collection::vec((0usize..4096, 1usize..=32), 1..32);
    mostly_accepted(windows, |g, _, o, windows| {
        let mut v = g.bytes.clone();
        o.apply_to(&mut v);
        let slot = usize::from(o.placement().offset);
        let near = (slot.saturating_sub(6)..slot + 10).flat_map(|s| (1..=8).map(move |w| (s, w)));
        for (start, width) in windows.into_iter().chain(near) {
            let start = start.min(v.len() - 1);
            let width = width.min(v.len() - start);
            let mut buf = vec![0u8; width];
            o.read(start as u64, &mut buf).unwrap();
            prop_assert_eq!(
                &buf[..],
                &v[start..start + width],
                "read {} at {:#x}",
                width,
                start
            );
        }
        Ok(())
    });
}

#[test]
fn no_write_sequence_changes_the_owned_bytes() {
    mostly_accepted(writes(), |g, clique, mut o, ops| {
        let mut virt = g.bytes.clone();
        o.apply_to(&mut virt);
        let slot = usize::from(o.placement().offset);
        let pointer = usize::from(o.placement().pointer_offset().unwrap());
        let len = g.bytes.len();
        // What the device should hold: every byte not wholly owned, as written,
        // with the owned bits cleared.
        let mut model = g.bytes.clone();
        for op in ops {
            let (offset, data) = resolve(op, slot, pointer, len);
            o.write(offset as u64, &data).unwrap();
            for (k, d) in data.iter().enumerate() {
                let m = o.owned_mask((offset + k) as u64);
                if m != 0xff {
                    model[offset + k] = d & !m;
                }
            }
            let mut cap = [0u8; 8];
            o.read(slot as u64, &mut cap).unwrap();
            prop_assert_eq!(cap, P2pCapability::new(clique, 0).encode());
            let mut ptr = [0u8; 1];
            o.read(pointer as u64, &mut ptr).unwrap();
            prop_assert_eq!(usize::from(ptr[0]), slot);
        }
        // Writes elsewhere reached the device; the owned bytes never did.
        prop_assert_eq!(o.physical(), &model);
        prop_assert_eq!(&o.physical()[slot..slot + 8], &g.bytes[slot..slot + 8]);
        prop_assert_eq!(o.physical()[pointer], g.bytes[pointer]);
        let mut expect = model.clone();
        o.apply_to(&mut expect);
        prop_assert_eq!(read_all(&o, len), expect.clone());
        prop_assert_eq!(&expect[slot..slot + 8], &virt[slot..slot + 8]);
        if o.placement().status_changed() {
            prop_assert_eq!(expect[0x06] & 0x10, 0x10);
        }
        Ok(())
    });
}
