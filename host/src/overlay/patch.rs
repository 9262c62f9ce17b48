//! The bits the overlay owns, byte by byte, and the same as dword patches for
//! VMMs that emulate config space themselves.

use p2p_topology::pci::CONFIG_LEGACY_LEN;
use serde::Serialize;

/// Bits of one config dword that the overlay owns: read-only to the guest,
/// reading `value`. Applying every patch to the physical bytes gives the
/// virtual config space exactly:
/// `virtual = (physical & !mask) | (value & mask)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, schemars::JsonSchema)]
pub struct ConfigPatch {
    /// Dword-aligned config offset (`offset % 4 == 0`).
    #[serde(with = "p2p_topology::hex::u16")]
    #[schemars(with = "p2p_topology::hex::Hex")]
    pub offset: u16,
    /// Bits the overlay owns (little-endian dword, as a 32-bit config read returns it).
    #[serde(with = "p2p_topology::hex::u32")]
    #[schemars(with = "p2p_topology::hex::Hex")]
    pub mask: u32,
    /// Their values; bits outside `mask` are zero.
    #[serde(with = "p2p_topology::hex::u32")]
    #[schemars(with = "p2p_topology::hex::Hex")]
    pub value: u32,
}

impl ConfigPatch {
    /// Applies the patch to the dword read at `self.offset`.
    pub fn apply_dword(&self, physical: u32) -> u32 {
        (physical & !self.mask) | (self.value & self.mask)
    }

    /// Applies the patch to a config-space buffer; bytes past its end are skipped.
    pub fn apply(&self, config: &mut [u8]) {
        let mask = self.mask.to_le_bytes();
        let value = self.value.to_le_bytes();
        for i in 0..4 {
            if let Some(b) = config.get_mut(usize::from(self.offset) + i) {
                *b = (*b & !mask[i]) | (value[i] & mask[i]);
            }
        }
    }
}

/// Per byte of the conventional space: which bits the overlay owns and their values.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Owned {
    mask: [u8; CONFIG_LEGACY_LEN],
    value: [u8; CONFIG_LEGACY_LEN],
}

impl Default for Owned {
    fn default() -> Self {
        Self {
            mask: [0; CONFIG_LEGACY_LEN],
            value: [0; CONFIG_LEGACY_LEN],
        }
    }
}

impl std::fmt::Debug for Owned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.patches()).finish()
    }
}

impl Owned {
    /// Takes the bits `mask` of byte `offset`, reading `value`.
    pub fn set(&mut self, offset: usize, mask: u8, value: u8) {
        self.mask[offset] |= mask;
        self.value[offset] = (self.value[offset] & !mask) | (value & mask);
    }

    /// Owned bits of the byte at `offset` (none past the conventional space).
    pub fn mask(&self, offset: u64) -> u8 {
        usize::try_from(offset)
            .ok()
            .and_then(|o| self.mask.get(o))
            .copied()
            .unwrap_or(0)
    }

    /// `physical` with the owned bits of byte `offset` replaced.
    pub fn merge(&self, offset: u64, physical: u8) -> u8 {
        let m = self.mask(offset);
        if m == 0 {
            return physical;
        }
        (physical & !m) | (self.value[offset as usize] & m)
    }

    /// The owned bits as dword patches, ascending, one per dword that has any.
    pub fn patches(&self) -> Vec<ConfigPatch> {
        (0..CONFIG_LEGACY_LEN)
            .step_by(4)
            .filter_map(|off| {
                let m = &self.mask[off..off + 4];
                if m.iter().all(|&b| b == 0) {
                    return None;
                }
                let v = &self.value[off..off + 4];
                Some(ConfigPatch {
                    offset: off as u16,
                    mask: u32::from_le_bytes([m[0], m[1], m[2], m[3]]),
                    value: u32::from_le_bytes([v[0], v[1], v[2], v[3]]),
                })
            })
            .collect()
    }
}
