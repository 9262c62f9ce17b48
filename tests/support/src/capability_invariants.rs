//! What must hold for ANY bytes handed to the P2P capability decoder.
//!
//! Checked by the `capability` fuzz target and by the capability property
//! tests of p2p-topology: one list of invariants for both.

use p2p_topology::capability::{
    CapabilityError, P2pCapability, MAX_CLIQUE, P2P_CAP_LEN, P2P_SIGNATURE, P2P_VERSION,
    VENDOR_SPECIFIC_ID,
};

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// Checks `decode`, `encode`, `dwords` and `has_signature` on `bytes`.
pub fn check(bytes: &[u8]) -> Result<(), String> {
    let decoded = P2pCapability::decode(bytes);
    let signed = P2pCapability::has_signature(bytes);
    ensure!(
        signed
            == (bytes.len() >= 6 && bytes[0] == VENDOR_SPECIFIC_ID && bytes[3..6] == P2P_SIGNATURE),
        "has_signature {signed} for {bytes:02x?}"
    );
    match decoded {
        Ok(cap) => {
            ensure!(signed, "{cap:?} decoded from bytes without the signature");
            ensure!(cap.clique.id() <= MAX_CLIQUE, "clique {}", cap.clique);
            // Every byte survives a round trip: reserved bits are refused, not masked.
            let mut expect = [0u8; 8];
            expect.copy_from_slice(&bytes[..8]);
            let enc = cap.encode();
            ensure!(
                enc == expect,
                "encode {enc:02x?}, decoded from {expect:02x?}"
            );
            ensure!(
                P2pCapability::decode(&enc) == Ok(cap),
                "decode(encode) differs"
            );
            ensure!(
                P2pCapability::decode(&bytes[..8]) == Ok(cap),
                "bytes past +8 changed decode"
            );
            let dw = [
                u32::from_le_bytes([enc[0], enc[1], enc[2], enc[3]]),
                u32::from_le_bytes([enc[4], enc[5], enc[6], enc[7]]),
            ];
            ensure!(
                cap.dwords() == dw,
                "dwords {:08x?}, bytes {enc:02x?}",
                cap.dwords()
            );
            let design = [
                0x5008_0009 | u32::from(cap.next) << 8,
                u32::from(cap.clique.id()) << 19 | 0x5032,
            ];
            ensure!(
                cap.dwords() == design,
                "dwords {:08x?}, design says {design:08x?}",
                cap.dwords()
            );
        }
        Err(e) => {
            let ok = match e {
                CapabilityError::Truncated(n) => n == bytes.len() && n < 8,
                CapabilityError::NotVendorSpecific(id) => {
                    bytes.len() >= 8 && id == bytes[0] && id != VENDOR_SPECIFIC_ID && !signed
                }
                CapabilityError::BadSignature(s) => {
                    bytes.len() >= 8
                        && bytes[0] == VENDOR_SPECIFIC_ID
                        && s == [bytes[3], bytes[4], bytes[5]]
                        && s != P2P_SIGNATURE
                        && !signed
                }
                // From here on the signature matched: has_signature says so too.
                CapabilityError::BadLength(l) => signed && l == bytes[2] && l != P2P_CAP_LEN,
                CapabilityError::UnsupportedVersion(v) => {
                    signed && bytes[2] == P2P_CAP_LEN && v == bytes[6] & 7 && v != P2P_VERSION
                }
                CapabilityError::ReservedNonZero(r) => {
                    signed
                        && bytes[2] == P2P_CAP_LEN
                        && bytes[6] & 7 == P2P_VERSION
                        && r == bytes[7]
                        && r != 0
                }
                CapabilityError::ReservedBitSet(b) => {
                    signed
                        && bytes[2] == P2P_CAP_LEN
                        && bytes[6] & 7 == P2P_VERSION
                        && bytes[7] == 0
                        && b == bytes[6]
                        && b & 0x80 != 0
                }
                CapabilityError::CliqueOutOfRange(_) | CapabilityError::NotBts(_) => false,
            };
            ensure!(ok, "{e:?} for {bytes:02x?}");
        }
    }
    Ok(())
}
