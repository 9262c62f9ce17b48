//! Why an overlay cannot be built. Every message names the offsets involved.

use std::io;

use p2p_topology::capability::CapabilityError;
use p2p_topology::pci::{ConfigError, WalkError};
use p2p_topology::Clique;

use super::placement::RejectedSlot;

/// Why [`ConfigOverlay`](super::ConfigOverlay) refused a config space.
#[derive(Debug, thiserror::Error)]
pub enum OverlayError {
    /// Fewer than the 256 bytes of conventional config space (the capability
    /// list lives in 0x40..0x100; a non-root sysfs read stops at 64).
    #[error(
        "config space has {len} bytes, the overlay needs the 256-byte conventional space \
         (0x00..0x100) where the capability list lives"
    )]
    Truncated {
        /// Bytes the config space has (64 when a non-root reader got only the header).
        len: usize,
    },

    /// The bytes are not a function's config space (no header, all ones).
    #[error("{0}")]
    Config(#[from] ConfigError),

    /// Not an NVIDIA display controller and `allow_non_nvidia` is off.
    #[error(
        "vendor id {vendor:#06x} (offset 0x00) and base class {base_class:#04x} (offset 0x0b): \
         not an NVIDIA GPU (vendor 0x10de, base class 0x03); pass --allow-non-nvidia \
         (serve: allow-non-nvidia in --gpu) to place the capability anyway"
    )]
    NotNvidiaGpu {
        /// Vendor id at offset 0x00.
        vendor: u16,
        /// Base class at offset 0x0b.
        base_class: u8,
    },

    /// CardBus bridges keep their capability pointer at 0x14 and a header up to 0x48.
    #[error(
        "header type {header_type:#04x} (offset 0x0e) is a CardBus bridge, whose capability \
         pointer sits at 0x14 and header runs to 0x48: not supported"
    )]
    UnsupportedHeaderType {
        /// Header type byte at offset 0x0e (layout 2: CardBus bridge).
        header_type: u8,
    },

    /// The 0x34 capability chain is malformed (loop, pointer into the header,
    /// past the end, or a capability running past 0x100).
    #[error("malformed capability list: {0}")]
    MalformedList(#[from] WalkError),

    /// A P2P capability is already there and names another clique.
    #[error(
        "a P2P capability at {offset:#04x} already names clique {existing}; refusing to add \
         clique {requested} (the NVIDIA driver would read only one of them)"
    )]
    ExistingOtherClique {
        /// Offset of the P2P capability already in the list.
        offset: u8,
        /// The clique it names.
        existing: Clique,
        /// The clique the overlay was asked to place.
        requested: Clique,
    },

    /// A vendor-specific capability carries the P2P signature but does not decode.
    #[error(
        "a vendor-specific capability at {offset:#04x} carries the P2P signature but is invalid"
    )]
    ExistingMalformed {
        /// Offset of the vendor-specific capability with the P2P signature.
        offset: u8,
        /// Why its bytes do not decode as a P2P capability.
        #[source]
        source: CapabilityError,
    },

    /// 0xC8 and 0xD4 are both occupied and other offsets were not allowed.
    #[error(
        "no free slot at 0xc8 or 0xd4, the offsets QEMU and Cloud Hypervisor use: {}; \
         another offset only when asked (--any-offset, or any-offset in serve's --gpu)",
        summarize(.rejected)
    )]
    PreferredSlotsTaken {
        /// The slots at 0xC8 and 0xD4, and what occupies each.
        rejected: Vec<RejectedSlot>,
    },

    /// Every dword-aligned 8-byte slot in 0x40..0x100 is occupied.
    #[error("no free slot for the 8-byte P2P capability in 0x40..0x100: {}", summarize(.rejected))]
    NoFreeSlot {
        /// Every slot tried, 0xC8, 0xD4 then upwards from 0x40, and what occupies it.
        rejected: Vec<RejectedSlot>,
    },

    /// Reading the physical config through a [`PhysicalConfig`](super::PhysicalConfig) failed.
    #[error("reading bytes {offset:#x}..{end:#x} of the physical config", end = .offset + .len)]
    ReadPhysical {
        /// Config offset of the first byte the read asked for.
        offset: u64,
        /// Bytes the read asked for.
        len: u64,
        /// The error [`PhysicalConfig::read`](super::PhysicalConfig::read) returned.
        #[source]
        source: io::Error,
    },
}

/// The preferred slots in full, then a count of the others.
fn summarize(rejected: &[RejectedSlot]) -> String {
    let mut parts: Vec<String> = rejected
        .iter()
        .filter(|r| r.offset == 0xc8 || r.offset == 0xd4)
        .map(ToString::to_string)
        .collect();
    let others = rejected
        .iter()
        .filter(|r| r.offset != 0xc8 && r.offset != 0xd4)
        .count();
    if others > 0 {
        parts.push(format!(
            "and the {others} other dword-aligned slots from 0x40 to 0xf8 are occupied"
        ));
    }
    parts.join("; ")
}
