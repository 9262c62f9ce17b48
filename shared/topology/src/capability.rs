//! The NVIDIA P2P clique capability, byte-exact with QEMU's `x-nv-gpudirect-clique`
//! and Cloud Hypervisor's `x_nv_gpudirect_clique`.
//!
//! ```text
//! +0 0x09 (vendor-specific)  +1 next  +2 0x08 (length)  +3 'P'  +4 '2'  +5 'P'
//! +6 clique << 3 (bits 6:3 clique 0..15, bits 2:0 version 0)  +7 0x00
//! ```
//!
//! Since driver 580.65 NVIDIA defines a second virtual capability, BTS
//! ([`BtsCapability`]): the same vendor-specific id and length, signature
//! "BTS" at +3..+6, and bit 0 of +6 enabling PCIe egress poison.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Capability id of a vendor-specific capability (PCI Local Bus 3.0, 6.7).
pub const VENDOR_SPECIFIC_ID: u8 = 0x09;
/// Length in bytes of the P2P capability, header included.
pub const P2P_CAP_LEN: u8 = 8;
/// The signature bytes at +3..+6.
pub const P2P_SIGNATURE: [u8; 3] = *b"P2P";
/// The only version the NVIDIA driver accepts.
pub const P2P_VERSION: u8 = 0;
/// Largest clique id that fits bits 6:3.
pub const MAX_CLIQUE: u8 = 15;

/// A P2P clique id, 0..=15. GPUs of one VM with equal ids may do peer-to-peer.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(try_from = "u8", into = "u8")]
pub struct Clique(u8);

impl Clique {
    /// Clique 0.
    pub const MIN: Clique = Clique(0);

    /// Returns the clique for `id`, or an error above 15 (the field has four bits).
    pub fn new(id: u8) -> Result<Self, CapabilityError> {
        if id > MAX_CLIQUE {
            Err(CapabilityError::CliqueOutOfRange(id))
        } else {
            Ok(Self(id))
        }
    }

    /// The clique id as the 4-bit number written to bits 6:3 of byte +6.
    pub fn id(self) -> u8 {
        self.0
    }
}

impl TryFrom<u8> for Clique {
    type Error = CapabilityError;
    fn try_from(v: u8) -> Result<Self, Self::Error> {
        Clique::new(v)
    }
}

impl From<Clique> for u8 {
    fn from(c: Clique) -> u8 {
        c.0
    }
}

impl fmt::Display for Clique {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Why bytes are not a valid P2P clique capability.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapabilityError {
    /// A clique id above 15 was asked for; the field has four bits.
    #[error("clique {0} out of range: the capability holds 0..=15")]
    CliqueOutOfRange(u8),
    /// Fewer than 8 bytes were given to decode; holds the length given.
    #[error("need 8 bytes for the P2P capability, have {0}")]
    Truncated(usize),
    /// Byte +0 is not the vendor-specific capability id 0x09; holds the id found.
    #[error("capability id {0:#04x} is not vendor-specific (0x09)")]
    NotVendorSpecific(u8),
    /// The length byte +2 is not 8 (P2P) or is below 8 (BTS); holds the length found.
    #[error("vendor-specific capability of length {0}, the P2P capability has length 8")]
    BadLength(u8),
    /// Bytes +3..+6 are not "P2P"; holds the bytes found.
    #[error("signature {0:02x?} is not 'P2P' (50 32 50)")]
    BadSignature([u8; 3]),
    /// Bits 2:0 of byte +6 are not version 0, which the driver rejects.
    #[error("version {0} is not 0: the NVIDIA driver rejects it")]
    UnsupportedVersion(u8),
    /// Reserved byte +7 is not zero.
    #[error("reserved byte +7 is {0:#04x}, must be 0")]
    ReservedNonZero(u8),
    /// Bit 7 of byte +6, outside the clique field, is set; holds byte +6.
    #[error("reserved bit 7 of byte +6 is set ({0:#04x}): not a capability vp2p or a VMM writes")]
    ReservedBitSet(u8),
    /// Decoding as BTS, but bytes +3..+6 are not "BTS"; holds the bytes found.
    #[error("signature {0:02x?} is not 'BTS' (42 54 53)")]
    NotBts([u8; 3]),
}

/// A decoded P2P clique capability and the next pointer it carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct P2pCapability {
    /// Clique id carried in bits 6:3 of byte +6.
    pub clique: Clique,
    /// Next-capability pointer (byte +1): config offset of the next capability, 0 at the end.
    pub next: u8,
}

impl P2pCapability {
    /// Builds a capability for `clique` whose next pointer is `next`.
    pub fn new(clique: Clique, next: u8) -> Self {
        Self { clique, next }
    }

    /// The 8 bytes as they sit in config space.
    pub fn encode(&self) -> [u8; 8] {
        let [p, two, p2] = P2P_SIGNATURE;
        [
            VENDOR_SPECIFIC_ID,
            self.next,
            P2P_CAP_LEN,
            p,
            two,
            p2,
            (self.clique.0 << 3) | P2P_VERSION,
            0,
        ]
    }

    /// The capability as two little-endian dwords, the form VMMs write.
    pub fn dwords(&self) -> [u32; 2] {
        let b = self.encode();
        [
            u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        ]
    }

    /// Decodes the capability at the start of `bytes`, checking everything the
    /// driver checks (id, signature, version) plus the length byte and reserved byte.
    pub fn decode(bytes: &[u8]) -> Result<Self, CapabilityError> {
        let (b, sig) = vendor_bytes(bytes)?;
        if sig != P2P_SIGNATURE {
            return Err(CapabilityError::BadSignature(sig));
        }
        if b[2] != P2P_CAP_LEN {
            return Err(CapabilityError::BadLength(b[2]));
        }
        let version = b[6] & 0x7;
        if version != P2P_VERSION {
            return Err(CapabilityError::UnsupportedVersion(version));
        }
        if b[7] != 0 {
            return Err(CapabilityError::ReservedNonZero(b[7]));
        }
        // Bit 7 of +6 lies outside the clique field. The driver may mask it,
        // but no VMM sets it: a capability with it set was not written by one,
        // so it is reported, not silently read as a clique.
        if b[6] & 0x80 != 0 {
            return Err(CapabilityError::ReservedBitSet(b[6]));
        }
        let clique = Clique((b[6] >> 3) & 0xf);
        Ok(Self { clique, next: b[1] })
    }

    /// True when a vendor-specific capability carries the P2P signature, whatever
    /// its other bytes: the test that tells the P2P capability from other vendor ones.
    pub fn has_signature(bytes: &[u8]) -> bool {
        bytes.len() >= 6 && bytes[0] == VENDOR_SPECIFIC_ID && bytes[3..6] == P2P_SIGNATURE
    }
}

/// The first 8 bytes of a vendor-specific capability and its signature
/// (+3..+6), or why they are not one.
fn vendor_bytes(bytes: &[u8]) -> Result<(&[u8; 8], [u8; 3]), CapabilityError> {
    let b: &[u8; 8] = bytes
        .get(..8)
        .and_then(|s| s.try_into().ok())
        .ok_or(CapabilityError::Truncated(bytes.len()))?;
    if b[0] != VENDOR_SPECIFIC_ID {
        return Err(CapabilityError::NotVendorSpecific(b[0]));
    }
    Ok((b, [b[3], b[4], b[5]]))
}

/// The signature bytes of the driver's BTS capability at +3..+6 (0x535442).
pub const BTS_SIGNATURE: [u8; 3] = *b"BTS";

/// NVIDIA's second virtual capability (driver 580.65 and later), found by the
/// same list walk; the overlay keeps it intact and `probe` decodes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BtsCapability {
    /// Bit 0 of the upper 16 bits: PCIe egress poison enable.
    pub egress_poison: bool,
    /// The upper 16 bits as found (+6, +7 little-endian).
    pub upper: u16,
    /// Next-capability pointer (byte +1), 0 at the end of the list.
    pub next: u8,
}

impl BtsCapability {
    /// True when vendor-specific bytes carry the BTS signature.
    pub fn has_signature(bytes: &[u8]) -> bool {
        bytes.len() >= 6 && bytes[0] == VENDOR_SPECIFIC_ID && bytes[3..6] == BTS_SIGNATURE
    }

    /// Decodes a BTS capability at the start of `bytes`.
    pub fn decode(bytes: &[u8]) -> Result<Self, CapabilityError> {
        let (b, sig) = vendor_bytes(bytes)?;
        if sig != BTS_SIGNATURE {
            return Err(CapabilityError::NotBts(sig));
        }
        if b[2] < P2P_CAP_LEN {
            return Err(CapabilityError::BadLength(b[2]));
        }
        let upper = u16::from_le_bytes([b[6], b[7]]);
        Ok(Self {
            egress_poison: upper & 1 == 1,
            upper,
            next: b[1],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bytes_match_the_design() {
        let cap = P2pCapability::new(Clique::new(5).unwrap(), 0);
        assert_eq!(
            cap.encode(),
            [0x09, 0x00, 0x08, b'P', b'2', b'P', 5 << 3, 0]
        );
        // DW0 = 0x50080009 | next << 8, DW1 = (clique << 19) | 0x5032.
        assert_eq!(cap.dwords(), [0x5008_0009, (5 << 19) | 0x5032]);
        let linked = P2pCapability::new(Clique::new(15).unwrap(), 0xd4);
        assert_eq!(
            linked.dwords(),
            [0x5008_0009 | (0xd4 << 8), (15 << 19) | 0x5032]
        );
    }

    #[test]
    fn refuses_what_the_driver_refuses() {
        assert_eq!(Clique::new(16), Err(CapabilityError::CliqueOutOfRange(16)));
        let good = P2pCapability::new(Clique::new(3).unwrap(), 0x48).encode();
        let mut b = good;
        b[6] |= 1;
        assert_eq!(
            P2pCapability::decode(&b),
            Err(CapabilityError::UnsupportedVersion(1))
        );
        let mut b = good;
        b[4] = b'3';
        assert!(matches!(
            P2pCapability::decode(&b),
            Err(CapabilityError::BadSignature(_))
        ));
        let mut b = good;
        b[0] = 0x10;
        assert_eq!(
            P2pCapability::decode(&b),
            Err(CapabilityError::NotVendorSpecific(0x10))
        );
        assert_eq!(
            P2pCapability::decode(&good[..7]),
            Err(CapabilityError::Truncated(7))
        );
        // Reserved bits are reported, not masked.
        let mut b = good;
        b[6] |= 0x80;
        assert_eq!(
            P2pCapability::decode(&b),
            Err(CapabilityError::ReservedBitSet(b[6]))
        );
        let mut b = good;
        b[7] = 1;
        assert_eq!(
            P2pCapability::decode(&b),
            Err(CapabilityError::ReservedNonZero(1))
        );
    }

    #[test]
    fn bts_decodes_its_poison_bit() {
        // DW1 = upper << 16 | 0x5354 with 'B' at +3: signature 0x535442.
        let bytes = [0x09, 0x00, 0x08, 0x42, 0x54, 0x53, 0x01, 0x00];
        assert_eq!(
            u32::from_le_bytes([bytes[3], bytes[4], bytes[5], 0]),
            0x535442
        );
        let bts = BtsCapability::decode(&bytes).unwrap();
        assert!(bts.egress_poison);
        assert_eq!(bts.upper, 1);
        assert!(BtsCapability::has_signature(&bytes));
        assert!(!P2pCapability::has_signature(&bytes));
        let off = [0x09, 0xc8, 0x08, 0x42, 0x54, 0x53, 0x00, 0x00];
        assert!(!BtsCapability::decode(&off).unwrap().egress_poison);
        let p2p = P2pCapability::new(Clique::new(1).unwrap(), 0).encode();
        assert!(matches!(
            BtsCapability::decode(&p2p),
            Err(CapabilityError::NotBts(_))
        ));
    }

    proptest! {
        #[test]
        fn round_trip(clique in 0u8..16, next: u8) {
            let cap = P2pCapability::new(Clique::new(clique).unwrap(), next);
            prop_assert_eq!(P2pCapability::decode(&cap.encode()).unwrap(), cap);
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..16)) {
            if let Ok(cap) = P2pCapability::decode(&bytes) {
                // A capability that decodes re-encodes to exactly its bytes:
                // nothing is masked away.
                prop_assert_eq!(&cap.encode()[..], &bytes[..8]);
            }
        }
    }
}
