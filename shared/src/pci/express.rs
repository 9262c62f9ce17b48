//! The PCI Express capability: port type and link status.

use serde::{Deserialize, Serialize};

use super::cap_id;
use super::config::{ConfigSpace, WalkError};

/// Device/port type, bits 7:4 of the PCI Express Capabilities register.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PciePortType {
    /// PCI Express endpoint (type 0x0), such as a GPU or NIC.
    Endpoint,
    /// Legacy PCI Express endpoint (type 0x1).
    LegacyEndpoint,
    /// Root port of a root complex (type 0x4).
    RootPort,
    /// Upstream port of a switch (type 0x5); the switch's link towards the root.
    SwitchUpstream,
    /// Downstream port of a switch (type 0x6); one per slot below the switch.
    SwitchDownstream,
    /// PCI Express to PCI/PCI-X bridge (type 0x7).
    PcieToPciBridge,
    /// PCI/PCI-X to PCI Express bridge (type 0x8).
    PciToPcieBridge,
    /// Root complex integrated endpoint (type 0x9).
    RcIntegratedEndpoint,
    /// Root complex event collector (type 0xa).
    RcEventCollector,
    /// A type value the spec reserves; holds the 4-bit value.
    Reserved(u8),
}

impl PciePortType {
    /// Decodes bits 7:4 of the PCI Express Capabilities register, shifted down.
    pub fn from_bits(v: u8) -> Self {
        match v {
            0x0 => Self::Endpoint,
            0x1 => Self::LegacyEndpoint,
            0x4 => Self::RootPort,
            0x5 => Self::SwitchUpstream,
            0x6 => Self::SwitchDownstream,
            0x7 => Self::PcieToPciBridge,
            0x8 => Self::PciToPcieBridge,
            0x9 => Self::RcIntegratedEndpoint,
            0xa => Self::RcEventCollector,
            other => Self::Reserved(other),
        }
    }

    /// Short label for tables.
    pub fn label(self) -> &'static str {
        match self {
            Self::Endpoint => "endpoint",
            Self::LegacyEndpoint => "legacy-endpoint",
            Self::RootPort => "root-port",
            Self::SwitchUpstream => "switch-up",
            Self::SwitchDownstream => "switch-down",
            Self::PcieToPciBridge => "pcie-to-pci",
            Self::PciToPcieBridge => "pci-to-pcie",
            Self::RcIntegratedEndpoint => "rc-endpoint",
            Self::RcEventCollector => "rc-event-collector",
            Self::Reserved(_) => "reserved",
        }
    }
}

/// Negotiated link speed (GT/s) and width read from Link Status.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LinkStatus {
    /// Current link speed in GT/s (2.5 to 64.0).
    pub speed_gts: f32,
    /// Negotiated link width in lanes.
    pub width: u8,
}

impl<'a> ConfigSpace<'a> {
    /// The port type, or None when the function has no PCI Express capability.
    pub fn pcie_port_type(&self) -> Result<Option<PciePortType>, WalkError> {
        let Some(cap) = self.find_capability(cap_id::PCI_EXPRESS)? else {
            return Ok(None);
        };
        Ok(self
            .u8_at(cap.offset as usize + 2)
            .map(|flags| PciePortType::from_bits(flags >> 4)))
    }

    /// Link Status (PCIe cap +0x12): current speed and width.
    pub fn link_status(&self) -> Result<Option<LinkStatus>, WalkError> {
        let Some(cap) = self.find_capability(cap_id::PCI_EXPRESS)? else {
            return Ok(None);
        };
        let Some(ls) = self.u16_at(cap.offset as usize + 0x12) else {
            return Ok(None);
        };
        let speed_gts = match ls & 0xf {
            1 => 2.5,
            2 => 5.0,
            3 => 8.0,
            4 => 16.0,
            5 => 32.0,
            6 => 64.0,
            _ => return Ok(None),
        };
        Ok(Some(LinkStatus {
            speed_gts,
            width: ((ls >> 4) & 0x3f) as u8,
        }))
    }
}
