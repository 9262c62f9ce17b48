//! How many bytes each capability occupies, from the PCI and PCI Express specs.
//!
//! Placement of a new capability must not overlap an existing one, so a length
//! is needed for every capability, not just its start. Where the spec fixes the
//! size (or the capability states it) that size is used; elsewhere the walker
//! falls back to "up to the next capability", which can only over-estimate.
//! `cs` holds only the capability's region (256 or 4096 bytes), so a register
//! past the region's end is unreadable: the capability then gets the smallest
//! size it can have, which the walker reports as an overrun.

use serde::{Deserialize, Serialize};

use super::config::ConfigSpace;

/// How a capability's length was determined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LenSource {
    /// Fixed by the spec, or computed from the capability's own flags.
    Spec,
    /// Stated by the capability itself (vendor-specific length fields).
    SelfDescribed,
    /// Unknown layout: assumed to reach the next capability or the region's end.
    UpToNext,
}

/// Length of standard capability `id` at `off`, or None if its layout is not known.
pub(super) fn std_cap_len(cs: &ConfigSpace<'_>, id: u8, off: usize) -> Option<(u16, LenSource)> {
    let spec = |n: u16| Some((n, LenSource::Spec));
    match id {
        0x01 => spec(8), // Power Management
        0x03 => spec(8), // VPD
        0x04 => spec(4), // Slot Identification
        0x05 => {
            // MSI: 32/64-bit address, optional per-vector masking (QEMU's sizes).
            let flags = cs.u16_at(off + 2).unwrap_or(0);
            let is64 = flags & 0x0080 != 0;
            let masking = flags & 0x0100 != 0;
            spec(match (is64, masking) {
                (false, false) => 10,
                (true, false) => 14,
                (false, true) => 20,
                (true, true) => 24,
            })
        }
        0x06 => spec(4), // CompactPCI Hot Swap
        0x07 => {
            // PCI-X: bridges 16 bytes; devices 8, or 24 with ECC (Command bits
            // 13:12, the capability version, >= 1; Linux PCI_X_CMD_VERSION).
            if cs.header_type() == 1 {
                spec(16)
            } else {
                let command = cs.u16_at(off + 2).unwrap_or(0);
                spec(if (command >> 12) & 0x3 != 0 { 24 } else { 8 })
            }
        }
        0x09 => {
            // Vendor specific: +2 holds the length, header included.
            let len = cs.u8_at(off + 2).unwrap_or(3);
            Some((u16::from(len).max(3), LenSource::SelfDescribed))
        }
        0x0a => spec(4), // Debug port
        0x0d => spec(8), // Bridge subsystem vendor id
        0x10 => {
            // PCI Express: version 2 carries the *2 registers up to 0x3c;
            // version 1 ends at Root Status (0x24) for ports, after Link
            // Status (0x14) for endpoints (types 0x0 and 0x1, bits 7:4),
            // whose slot and root registers do not exist (Linux's
            // PCI_CAP_EXP_ENDPOINT_SIZEOF_V1; QEMU's e1000e puts such a
            // capability at 0xe0).
            let flags = cs.u16_at(off + 2).unwrap_or(0);
            let endpoint = (flags >> 4) & 0xf <= 1;
            spec(match (flags & 0xf >= 2, endpoint) {
                (true, _) => 0x3c,
                (false, true) => 0x14,
                (false, false) => 0x24,
            })
        }
        0x11 => spec(12), // MSI-X
        0x12 => {
            // SATA: 16 bytes when +4 bits 3:0 say the registers are inline (0xf).
            let regs = cs.u8_at(off + 4).unwrap_or(0);
            spec(if regs & 0xf == 0xf { 16 } else { 8 })
        }
        0x13 => spec(6), // Advanced Features
        _ => None,
    }
}

/// Length of extended capability `id` at `off`, or None if its layout is not known.
pub(super) fn ext_cap_len(cs: &ConfigSpace<'_>, id: u16, off: usize) -> Option<(u16, LenSource)> {
    let spec = |n: u16| Some((n, LenSource::Spec));
    match id {
        0x0001 => spec(0x48), // AER, with root and TLP prefix log registers
        0x0003 => spec(0x0c), // Device Serial Number
        0x0004 => spec(0x10), // Power Budgeting
        0x0007 => spec(0x08), // RC Event Collector Endpoint Association
        0x000b | 0x0023 => {
            // VSEC and DVSEC: header 1 bits 31:20 hold the length.
            let h1 = cs.u32_at(off + 4).unwrap_or(0);
            Some((((h1 >> 20) as u16).max(8), LenSource::SelfDescribed))
        }
        0x000d => {
            // ACS: 8 bytes, plus the egress control vector when EC is implemented.
            let cap = cs.u16_at(off + 4).unwrap_or(0);
            if cap & 0x20 == 0 {
                return spec(8);
            }
            let bits = match cap >> 8 {
                0 => 256,
                n => n,
            };
            spec(8 + bits.div_ceil(32) * 4)
        }
        0x000e => spec(0x08), // ARI
        0x000f => spec(0x08), // ATS
        0x0010 => spec(0x40), // SR-IOV
        0x0012 => spec(0x30), // Multicast
        0x0013 => spec(0x10), // Page Request
        0x0015 | 0x0024 => {
            // Resizable BAR / VF Resizable BAR: 4 + 8 per BAR, count in control bits 7:5.
            let ctrl = cs.u32_at(off + 8).unwrap_or(0);
            let n = ((ctrl >> 5) & 0x7) as u16;
            spec(4 + 8 * n.max(1))
        }
        0x0018 => spec(0x08), // LTR
        0x001b => spec(0x08), // PASID
        0x001c => spec(0x08), // LN Requester
        0x001e => spec(0x10), // L1 PM Substates
        0x001f => spec(0x0c), // PTM
        0x0025 => spec(0x0c), // Data Link Feature
        _ => None,
    }
}
