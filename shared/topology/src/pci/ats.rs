//! Address Translation Services: whether an endpoint asks the IOMMU for
//! translations ahead of time and then sends requests marked translated.

use serde::{Deserialize, Serialize};

use super::config::{ConfigSpace, WalkError};
use super::ext_cap_id;

/// ATS Control register bit 15 (PCIe Base 6.0, 10.5.1.3): Enable.
pub const ATS_CONTROL_ENABLE: u16 = 1 << 15;

/// An endpoint's ATS extended capability (ID 0x000F).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Ats {
    /// Config-space offset of the ATS extended capability header.
    #[serde(with = "crate::hex::u16")]
    #[schemars(with = "crate::hex::Hex")]
    pub offset: u16,
    /// ATS Control bit 15: the function sends translation requests and
    /// translated peer requests (set by the host's IOMMU driver).
    pub enabled: bool,
    /// Smallest Translation Unit, ATS Control bits 4:0 (2^(STU+12) bytes).
    pub stu: u8,
}

impl<'a> ConfigSpace<'a> {
    /// The ATS extended capability, or None when the function has none.
    pub fn ats(&self) -> Result<Option<Ats>, WalkError> {
        let Some(cap) = self.find_extended_capability(ext_cap_id::ATS)? else {
            return Ok(None);
        };
        // Header +0, ATS Capability +4 (16 bits), ATS Control +6 (16 bits).
        let Some(ctl) = self.u16_at(cap.offset as usize + 6) else {
            return Ok(None);
        };
        Ok(Some(Ats {
            offset: cap.offset,
            enabled: ctl & ATS_CONTROL_ENABLE != 0,
            stu: (ctl & 0x1f) as u8,
        }))
    }
}
