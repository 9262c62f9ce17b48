//! Raw PCI configuration space: header fields, capability walkers, capability
//! lengths, and the two capabilities topology needs (PCI Express and ACS).

mod acs;
mod caplen;
mod config;
mod express;

pub use acs::{Acs, AcsFlags};
pub use caplen::LenSource;
pub use config::{
    CapabilityEntry, ConfigError, ConfigSpace, ExtCapabilityEntry, WalkError, CONFIG_EXTENDED_LEN,
    CONFIG_HEADER_LEN, CONFIG_LEGACY_LEN,
};
pub use express::{LinkStatus, PciePortType};

/// Standard capability ids this crate names.
pub mod cap_id {
    pub const POWER_MANAGEMENT: u8 = 0x01;
    pub const MSI: u8 = 0x05;
    pub const VENDOR_SPECIFIC: u8 = 0x09;
    pub const PCI_EXPRESS: u8 = 0x10;
    pub const MSIX: u8 = 0x11;
}

/// Extended capability ids this crate names.
pub mod ext_cap_id {
    pub const AER: u16 = 0x0001;
    pub const ACS: u16 = 0x000d;
    pub const VENDOR_SPECIFIC: u16 = 0x000b;
    pub const RESIZABLE_BAR: u16 = 0x0015;
    pub const DVSEC: u16 = 0x0023;
}
