//! Property tests for the NVIDIA P2P clique capability codec
//! (`P2pCapability::{decode, encode, dwords, has_signature}`, `Clique::new`).
//!
//! The invariants for arbitrary bytes live in p2p-test-support (capability_invariants), shared with
//! the `capability` fuzz target.

use p2p_test_support::capability_invariants as invariants;

use p2p_topology::capability::{CapabilityError, Clique, P2pCapability};
use proptest::collection::vec;
use proptest::prelude::*;

/// All 16 cliques with all 256 next pointers: bytes as the design draws them,
/// and decode(encode(x)) == x.
#[test]
fn every_capability_round_trips() {
    for id in 0..=15u8 {
        for next in 0..=255u8 {
            let cap = P2pCapability::new(Clique::new(id).unwrap(), next);
            let bytes = cap.encode();
            assert_eq!(bytes, [0x09, next, 0x08, b'P', b'2', b'P', id << 3, 0]);
            assert_eq!(P2pCapability::decode(&bytes), Ok(cap));
            invariants::check(&bytes).unwrap();
        }
    }
}

/// Clique ids are 0..=15 however they arrive: `Clique::new`, `TryFrom`, or serde.
#[test]
fn cliques_hold_four_bits() {
    for id in 0..=255u8 {
        let made = Clique::new(id);
        assert_eq!(made.is_ok(), id <= 15, "Clique::new({id})");
        assert_eq!(Clique::try_from(id), made);
        match made.clone() {
            Ok(c) => assert_eq!(u8::from(c), id),
            Err(e) => assert_eq!(e, CapabilityError::CliqueOutOfRange(id)),
        }
        let json = format!(r#"{{"clique":{id},"next":200}}"#);
        let parsed = serde_json::from_str::<P2pCapability>(&json);
        assert_eq!(
            parsed.ok(),
            made.ok().map(|c| P2pCapability::new(c, 200)),
            "{json}"
        );
    }
}

/// A valid capability with one byte replaced and the whole possibly cut short:
/// reaches every error of the decoder, not only NotVendorSpecific.
fn near_miss() -> impl Strategy<Value = Vec<u8>> {
    (0u8..=15, any::<u8>(), 0usize..8, any::<u8>(), 0usize..=12).prop_map(
        |(clique, next, at, value, len)| {
            let mut b = P2pCapability::new(Clique::new(clique).unwrap(), next)
                .encode()
                .to_vec();
            b[at] = value;
            b.resize(len, 0);
            b
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// Bytes after the eight of the capability do not matter.
    #[test]
    fn round_trip_ignores_what_follows(clique in 0u8..=15, next: u8, tail in vec(any::<u8>(), 0..8)) {
        let cap = P2pCapability::new(Clique::new(clique).unwrap(), next);
        let mut bytes = cap.encode().to_vec();
        bytes.extend(tail);
        prop_assert_eq!(P2pCapability::decode(&bytes), Ok(cap));
        prop_assert!(P2pCapability::has_signature(&bytes));
        prop_assert_eq!(cap.dwords(), [0x5008_0009 | u32::from(next) << 8, u32::from(clique) << 19 | 0x5032]);
    }

    /// decode never panics on 0..16 arbitrary bytes; what it accepts re-encodes to
    /// the same bytes; its errors and has_signature agree with the bytes.
    #[test]
    fn decode_arbitrary_bytes(bytes in vec(any::<u8>(), 0..16)) {
        invariants::check(&bytes).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn decode_near_misses(bytes in near_miss()) {
        invariants::check(&bytes).map_err(TestCaseError::fail)?;
        // Only the next pointer (+1) and the clique field (bits 6:3 of +6) may
        // vary in a capability the decoder accepts; reserved bit 7 may not.
        if bytes.len() >= 8 {
            let fixed = [bytes[0], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6] & 0x87, bytes[7]];
            let accepted = fixed == [0x09, 0x08, b'P', b'2', b'P', 0, 0];
            prop_assert_eq!(P2pCapability::decode(&bytes).is_ok(), accepted, "{:02x?}", bytes);
        }
    }
}
