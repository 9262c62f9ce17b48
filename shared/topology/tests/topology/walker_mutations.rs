//! Property tests for the config-space walkers on mutated valid chains: a loop,
//! a pointer into the header, a pointer past the bytes read and a capability
//! past its region give exactly the matching `WalkError`.

use crate::walker_gen::{
    ext_cap, ext_chain_in, register, set_ext_next, std_cap, std_chain_in, walk_ext, walk_std, Ext,
    ExtChain, Std, StdChain,
};
use p2p_topology::pci::{WalkError, CONFIG_EXTENDED_LEN as EXT, CONFIG_LEGACY_LEN as LEGACY};
use proptest::collection::vec;
use proptest::prelude::*;

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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

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
