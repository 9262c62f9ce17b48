//! Access Control Services: which peer-to-peer traffic a port redirects upstream.

use serde::{Deserialize, Serialize};

use super::config::{ConfigSpace, WalkError};
use super::ext_cap_id;

/// The ACS bits shared by the capability and control registers.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct AcsFlags {
    /// Source Validation.
    pub source_validation: bool,
    /// Translation Blocking.
    pub translation_blocking: bool,
    /// P2P Request Redirect: peer requests go up to the root complex.
    pub request_redirect: bool,
    /// P2P Completion Redirect.
    pub completion_redirect: bool,
    /// Upstream Forwarding.
    pub upstream_forwarding: bool,
    /// P2P Egress Control.
    pub egress_control: bool,
    /// Direct Translated P2P: ATS-translated requests may still go direct.
    pub direct_translated: bool,
}

impl AcsFlags {
    /// Decodes the low seven bits of the ACS capability or control register.
    pub fn from_bits(v: u16) -> Self {
        Self {
            source_validation: v & 0x01 != 0,
            translation_blocking: v & 0x02 != 0,
            request_redirect: v & 0x04 != 0,
            completion_redirect: v & 0x08 != 0,
            upstream_forwarding: v & 0x10 != 0,
            egress_control: v & 0x20 != 0,
            direct_translated: v & 0x40 != 0,
        }
    }

    /// Encodes the flags as the register's low seven bits (source validation in bit 0).
    pub fn bits(&self) -> u16 {
        [
            self.source_validation,
            self.translation_blocking,
            self.request_redirect,
            self.completion_redirect,
            self.upstream_forwarding,
            self.egress_control,
            self.direct_translated,
        ]
        .iter()
        .enumerate()
        .map(|(i, &on)| u16::from(on) << i)
        .sum()
    }

    /// `lspci -vvv` style: "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-".
    pub fn describe(&self) -> String {
        let pm = |b: bool| if b { '+' } else { '-' };
        format!(
            "SrcValid{} TransBlk{} ReqRedir{} CmpltRedir{} UpstreamFwd{} EgressCtrl{} DirectTrans{}",
            pm(self.source_validation),
            pm(self.translation_blocking),
            pm(self.request_redirect),
            pm(self.completion_redirect),
            pm(self.upstream_forwarding),
            pm(self.egress_control),
            pm(self.direct_translated)
        )
    }
}

/// A port's ACS capability (what it can do) and control (what is turned on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Acs {
    /// Config-space offset of the ACS extended capability header (0x100 or above).
    #[serde(with = "crate::hex::u16")]
    #[schemars(with = "crate::hex::Hex")]
    pub offset: u16,
    /// What the port supports (ACS Capability register).
    pub capability: AcsFlags,
    /// What is enabled (ACS Control register); `request_redirect` decides peer routing.
    pub control: AcsFlags,
}

impl<'a> ConfigSpace<'a> {
    /// The ACS extended capability, or None when the function has none.
    pub fn acs(&self) -> Result<Option<Acs>, WalkError> {
        let Some(cap) = self.find_extended_capability(ext_cap_id::ACS)? else {
            return Ok(None);
        };
        let off = cap.offset as usize;
        let (Some(c), Some(k)) = (self.u16_at(off + 4), self.u16_at(off + 6)) else {
            return Ok(None);
        };
        Ok(Some(Acs {
            offset: cap.offset,
            capability: AcsFlags::from_bits(c),
            control: AcsFlags::from_bits(k),
        }))
    }
}
