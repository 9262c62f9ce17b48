//! The PCI Express capability: port type, Device Control (relaxed ordering,
//! payload and read request sizes), link capabilities and link status.

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

    /// Link Status (PCIe cap +0x12): current speed (bits 3:0) and width (bits 9:4).
    pub fn link_status(&self) -> Result<Option<LinkStatus>, WalkError> {
        let Some(ls) = self.express_u16(0x12)? else {
            return Ok(None);
        };
        let Some(speed_gts) = speed_gts(u32::from(ls)) else {
            return Ok(None);
        };
        Ok(Some(LinkStatus {
            speed_gts,
            width: ((ls >> 4) & 0x3f) as u8,
        }))
    }

    /// Link Capabilities (PCIe cap +0x0C): Max Link Speed (bits 3:0) and
    /// Maximum Link Width (bits 9:4).
    pub fn link_capabilities(&self) -> Result<Option<LinkCapabilities>, WalkError> {
        let Some(cap) = self.find_capability(cap_id::PCI_EXPRESS)? else {
            return Ok(None);
        };
        Ok(self
            .u32_at(cap.offset as usize + 0x0c)
            .map(|lc| LinkCapabilities {
                max_speed_gts: speed_gts(lc),
                max_width: ((lc >> 4) & 0x3f) as u8,
            }))
    }

    /// Device Control (PCIe cap +0x08): Enable Relaxed Ordering (bit 4),
    /// Max_Payload_Size (bits 7:5) and Max_Read_Request_Size (bits 14:12).
    pub fn device_control(&self) -> Result<Option<DeviceControl>, WalkError> {
        Ok(self.express_u16(0x08)?.map(DeviceControl::from_bits))
    }

    fn express_u16(&self, reg: usize) -> Result<Option<u16>, WalkError> {
        let Some(cap) = self.find_capability(cap_id::PCI_EXPRESS)? else {
            return Ok(None);
        };
        Ok(self.u16_at(cap.offset as usize + reg))
    }
}

/// GT/s of a Current/Max Link Speed code (1 = 2.5 GT/s .. 6 = 64 GT/s).
fn speed_gts(code: u32) -> Option<f32> {
    Some(match code & 0xf {
        1 => 2.5,
        2 => 5.0,
        3 => 8.0,
        4 => 16.0,
        5 => 32.0,
        6 => 64.0,
        _ => return None,
    })
}

/// What a port or device can train its link to (Link Capabilities).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LinkCapabilities {
    /// Max Link Speed in GT/s; None for a reserved code (QEMU's switch
    /// downstream ports leave the register 0).
    pub max_speed_gts: Option<f32>,
    /// Maximum Link Width in lanes; 0 when the register says none.
    pub max_width: u8,
}

/// The Device Control bits that decide throughput.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceControl {
    /// Bit 4, Enable Relaxed Ordering: the function may set the Relaxed
    /// Ordering attribute on the requests it sends.
    pub relaxed_ordering: bool,
    /// Bits 7:5, Max_Payload_Size in bytes (128 << code).
    pub max_payload: u16,
    /// Bits 14:12, Max_Read_Request_Size in bytes (128 << code).
    pub max_read_request: u16,
}

impl DeviceControl {
    /// Decodes the 16-bit Device Control register.
    pub fn from_bits(v: u16) -> Self {
        Self {
            relaxed_ordering: v & (1 << 4) != 0,
            max_payload: 128 << ((v >> 5) & 0x7).min(5),
            max_read_request: 128 << ((v >> 12) & 0x7).min(5),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_control_bits() {
        // QEMU's NVMe leaves Device Control 0: RO off, 128 B payload and read request.
        assert_eq!(
            DeviceControl::from_bits(0),
            DeviceControl {
                relaxed_ordering: false,
                max_payload: 128,
                max_read_request: 128
            }
        );
        // 0x5030: bit 4 RO on, bits 7:5 = 1 (256 B), bits 14:12 = 5 (4096 B).
        assert_eq!(
            DeviceControl::from_bits(0x5030),
            DeviceControl {
                relaxed_ordering: true,
                max_payload: 256,
                max_read_request: 4096
            }
        );
    }
}
