//! The P2P clique capability written into a GPU's *virtual* config space.
//!
//! For VMM authors. The guest's NVIDIA driver enables PCIe peer-to-peer between
//! two passthrough GPUs only when both carry a vendor-specific capability naming
//! the same clique (DESIGN.md, "The capability"). The physical GPU has no such
//! capability, so the VMM must show it in the config space the guest reads.
//! [`ConfigOverlay`] decides where it goes and then serves config accesses:
//!
//! - **Placement** (computed once, by [`ConfigOverlay::new`]): the capability is
//!   appended LAST to the 0x34 list (its next pointer is 0) and the previously
//!   last capability's next pointer is patched to it. It sits at 0xC8 when those
//!   8 bytes are all zero and overlap no existing capability's byte range, else
//!   at 0xD4 on the same terms; the first free dword-aligned 8 bytes at or above
//!   0x40 only with [`OverlayOptions::any_offset`]. A function without a
//!   list gets 0x34 pointed at it and status bit 4 set. [`ConfigOverlay::placement`]
//!   says where it went, what it patched and which slots it rejected.
//! - **Reads** ([`ConfigOverlay::read`], any width and alignment): the bits the
//!   overlay owns (the 8 capability bytes, the patched pointer, the status bit
//!   when it was set) come from the virtual bytes; everything else is read from
//!   the device through [`PhysicalConfig`], on demand.
//! - **Writes** ([`ConfigOverlay::write`]): writes to owned bytes are dropped and
//!   never reach the device; the rest is passed through (a write that straddles
//!   owned bytes is split). Owned bits read back the same whatever the guest writes.
//! - **Patches** ([`ConfigOverlay::patches`]): the same as dword-aligned
//!   `(offset, mask, value)` triples for VMMs that emulate config space
//!   themselves (Cloud Hypervisor's and QEMU's style): mark `mask` read-only and
//!   return `value` there.
//!
//! It refuses ([`OverlayError`]) anything but an NVIDIA display controller
//! (unless [`OverlayOptions::allow_non_nvidia`]), a config shorter than 256
//! bytes, a malformed chain, a P2P capability already present with another
//! clique, and a list with no free slot. One already present with the *same*
//! clique is kept as it is: the overlay then owns nothing.
//!
//! ```
//! use p2p_host::overlay::{ConfigOverlay, OverlayOptions, PhysicalConfig};
//! use p2p_topology::Clique;
//!
//! // A captured config: NVIDIA 3D controller, one capability (power management at 0x40).
//! // A real VMM implements PhysicalConfig for its VFIO device instead.
//! let mut config = vec![0u8; 256];
//! config[0x00..0x02].copy_from_slice(&0x10de_u16.to_le_bytes());
//! config[0x06] = 0x10; // status: capabilities list
//! config[0x0b] = 0x03; // base class: display controller
//! config[0x34] = 0x40;
//! config[0x40] = 0x01;
//!
//! let mut gpu = ConfigOverlay::new(&config, Clique::new(2)?, OverlayOptions::default())?;
//! let placed = gpu.placement();
//! assert_eq!(placed.offset, 0xc8);
//! assert_eq!(placed.pointer_offset(), Some(0x41)); // power management's next pointer
//!
//! // A guest dword read of the capability: DW0 = 0x50080009 | next << 8.
//! let mut dw = [0u8; 4];
//! gpu.read(0xc8, &mut dw)?;
//! assert_eq!(u32::from_le_bytes(dw), 0x5008_0009);
//!
//! // A guest write to it is dropped: the device never sees it.
//! gpu.write(0xc8, &[0xff; 4])?;
//! gpu.read(0xc8, &mut dw)?;
//! assert_eq!(u32::from_le_bytes(dw), 0x5008_0009);
//! assert_eq!(gpu.physical()[0xc8..0xcc], [0; 4]);
//!
//! // Writes elsewhere reach the device (here: the command register).
//! gpu.write(0x04, &[0x06, 0x00])?;
//! assert_eq!(gpu.physical()[0x04], 0x06);
//!
//! // Or, with your own config emulation: DW1 = clique << 19 | 0x5032.
//! let patches = gpu.patches();
//! assert!(patches.iter().any(|p| p.offset == 0xcc && p.mask == !0 && p.value == (2 << 19) | 0x5032));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;
mod patch;
mod physical;
mod placement;

#[cfg(test)]
mod tests;

use std::io;

use p2p_topology::pci::CONFIG_LEGACY_LEN;
use p2p_topology::Clique;

pub use error::OverlayError;
pub use patch::ConfigPatch;
pub use physical::PhysicalConfig;
pub use placement::{
    candidate_slots, conflict, overlapping, BytePatch, LinkedAfter, Placement, PlacementAction,
    RejectedSlot, SlotConflict, CAP_POINTER_OFFSET, DISPLAY_BASE_CLASS, FALLBACK_OFFSET,
    NVIDIA_VENDOR_ID, PREFERRED_OFFSET, STATUS_CAP_LIST, STATUS_OFFSET,
};

use patch::Owned;

/// What the overlay accepts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OverlayOptions {
    /// Accept functions other than NVIDIA display controllers (tests, emulated devices).
    pub allow_non_nvidia: bool,
    /// When 0xC8 and 0xD4 are both occupied, take the first free dword-aligned
    /// slot from 0x40 instead of refusing (a place neither QEMU nor Cloud
    /// Hypervisor would use; the driver finds it by walking the list).
    pub any_offset: bool,
}

/// A device's config space with the P2P capability laid over it; see the module docs.
#[derive(Debug)]
pub struct ConfigOverlay<P: PhysicalConfig = Vec<u8>> {
    physical: P,
    placement: Placement,
    owned: Owned,
}

impl ConfigOverlay<Vec<u8>> {
    /// Places the capability in `physical_config` (a captured config space, at
    /// least 256 bytes) and serves accesses from a copy of it.
    pub fn new(
        physical_config: &[u8],
        clique: Clique,
        options: OverlayOptions,
    ) -> Result<Self, OverlayError> {
        Self::with_physical(physical_config, physical_config.to_vec(), clique, options)
    }
}

impl<P: PhysicalConfig> ConfigOverlay<P> {
    /// Places the capability from `snapshot` (the device's config as read now,
    /// at least 256 bytes) and serves accesses from `physical`.
    pub fn with_physical(
        snapshot: &[u8],
        physical: P,
        clique: Clique,
        options: OverlayOptions,
    ) -> Result<Self, OverlayError> {
        let plan = placement::plan(snapshot, clique, &options)?;
        Ok(Self {
            physical,
            placement: plan.placement,
            owned: plan.owned,
        })
    }

    /// Reads the first 256 bytes of `physical` to place the capability, then
    /// serves accesses from it.
    pub fn from_physical(
        physical: P,
        clique: Clique,
        options: OverlayOptions,
    ) -> Result<Self, OverlayError> {
        let mut snapshot = vec![0u8; CONFIG_LEGACY_LEN];
        physical
            .read(0, &mut snapshot)
            .map_err(|source| OverlayError::ReadPhysical {
                offset: 0,
                len: CONFIG_LEGACY_LEN as u64,
                source,
            })?;
        Self::with_physical(&snapshot, physical, clique, options)
    }

    /// Where the capability went and what was patched.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// The owned bits as dword-aligned patches, ascending by offset; empty when
    /// the capability was already present.
    pub fn patches(&self) -> Vec<ConfigPatch> {
        self.owned.patches()
    }

    /// Bits of the byte at `offset` that the overlay owns (0 = passed through).
    pub fn owned_mask(&self, offset: u64) -> u8 {
        self.owned.mask(offset)
    }

    /// Turns physical config bytes (starting at offset 0) into the virtual ones.
    pub fn apply_to(&self, config: &mut [u8]) {
        for p in self.patches() {
            p.apply(config);
        }
    }

    /// Reads `buf.len()` bytes of the virtual config at `offset`: owned bits
    /// from the overlay, the rest from the device (only bytes not wholly owned
    /// are read there, in as few accesses as possible).
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        check_range(offset, buf.len())?;
        let mut i = 0;
        while i < buf.len() {
            let at = offset + i as u64;
            if self.owned.mask(at) == 0xff {
                buf[i] = self.owned.merge(at, 0);
                i += 1;
                continue;
            }
            let j = self.passed_through_end(offset, buf.len(), i);
            self.physical.read(at, &mut buf[i..j])?;
            for (k, b) in buf[i..j].iter_mut().enumerate() {
                *b = self.owned.merge(at + k as u64, *b);
            }
            i = j;
        }
        Ok(())
    }

    /// Writes `data` at `offset` as the guest asked: wholly owned bytes are
    /// dropped, partly owned ones are passed on with the owned bits cleared
    /// (they are read-only), the rest is passed through, split around the
    /// dropped bytes.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        check_range(offset, data.len())?;
        let mut i = 0;
        while i < data.len() {
            if self.owned.mask(offset + i as u64) == 0xff {
                i += 1;
                continue;
            }
            let j = self.passed_through_end(offset, data.len(), i);
            let at = offset + i as u64;
            let pass: Vec<u8> = data[i..j]
                .iter()
                .enumerate()
                .map(|(k, b)| b & !self.owned.mask(at + k as u64))
                .collect();
            self.physical.write(at, &pass)?;
            i = j;
        }
        Ok(())
    }

    /// The device behind the overlay. Accesses through it bypass the overlay.
    pub fn physical(&self) -> &P {
        &self.physical
    }

    /// The device behind the overlay, mutably; writes through it bypass the overlay.
    pub fn physical_mut(&mut self) -> &mut P {
        &mut self.physical
    }

    /// Gives the device back, dropping the overlay (nothing of it was ever written there).
    pub fn into_physical(self) -> P {
        self.physical
    }

    /// End of the run of bytes from index `i` of an access at `offset` that
    /// the overlay does not wholly own (those go to the device in one access).
    fn passed_through_end(&self, offset: u64, len: usize, i: usize) -> usize {
        (i..len)
            .find(|&k| self.owned.mask(offset + k as u64) == 0xff)
            .unwrap_or(len)
    }
}

fn check_range(offset: u64, len: usize) -> io::Result<()> {
    offset.checked_add(len as u64).map(|_| ()).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("config access of {len} bytes at {offset:#x} overflows"),
        )
    })
}
