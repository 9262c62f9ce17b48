//! Property tests for the config-space walkers on arbitrary bytes
//! (`ConfigSpace::capabilities`, `extended_capabilities` and the accessors built
//! on them): nothing panics and whatever comes back obeys the invariants in
//! tests/support/src/walker_invariants.rs (shared with the `walkers` fuzz target).
//!
//! Generated valid chains are in `walker_chains.rs`, mutated chains in
//! `walker_mutations.rs`; the generators live in `walker_gen/`.

use crate::walker_gen::{invariants, noise, register, set_ext_next};
use p2p_topology::pci::{CONFIG_EXTENDED_LEN as EXT, CONFIG_LEGACY_LEN as LEGACY};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

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
