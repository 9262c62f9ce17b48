//! Raw PCI configuration space: header fields, capability walkers, capability
//! lengths, the capabilities topology needs (PCI Express and ACS) and those
//! that decide peer bandwidth (Device Control, link capabilities, ATS).

mod acs;
mod ats;
mod caplen;
mod config;
mod express;

pub use acs::{Acs, AcsFlags};
pub use ats::{Ats, ATS_CONTROL_ENABLE};
pub use caplen::LenSource;
pub use config::{
    CapabilityEntry, ConfigError, ConfigSpace, ExtCapabilityEntry, WalkError, CONFIG_EXTENDED_LEN,
    CONFIG_HEADER_LEN, CONFIG_LEGACY_LEN,
};
pub use express::{DeviceControl, LinkCapabilities, LinkStatus, PciePortType};

/// Standard capability ids this crate names.
pub mod cap_id {
    /// PCI Power Management capability.
    pub const POWER_MANAGEMENT: u8 = 0x01;
    /// Message Signalled Interrupts (MSI) capability.
    pub const MSI: u8 = 0x05;
    /// Vendor-specific capability, the id NVIDIA's P2P and BTS capabilities use.
    pub const VENDOR_SPECIFIC: u8 = 0x09;
    /// PCI Express capability: port type, link capabilities and status.
    pub const PCI_EXPRESS: u8 = 0x10;
    /// MSI-X capability.
    pub const MSIX: u8 = 0x11;
}

/// Extended capability ids this crate names.
pub mod ext_cap_id {
    /// Advanced Error Reporting.
    pub const AER: u16 = 0x0001;
    /// Access Control Services, which decides whether peer traffic is redirected upstream.
    pub const ACS: u16 = 0x000d;
    /// Address Translation Services: the endpoint caches IOMMU translations.
    pub const ATS: u16 = 0x000f;
    /// Vendor-Specific Extended Capability (VSEC).
    pub const VENDOR_SPECIFIC: u16 = 0x000b;
    /// Resizable BAR, which lets a GPU expose its whole memory through one BAR.
    pub const RESIZABLE_BAR: u16 = 0x0015;
    /// Designated Vendor-Specific Extended Capability (DVSEC).
    pub const DVSEC: u16 = 0x0023;
}
