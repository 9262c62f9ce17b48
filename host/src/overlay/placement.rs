//! Where the capability goes, per docs/DESIGN.md "Placement": last in the 0x34
//! list, at 0xC8 when its 8 bytes are all zero and overlap no capability, else
//! 0xD4 on the same terms; the first free dword-aligned 8 bytes at or above
//! 0x40 only when the operator asks ([`OverlayOptions::any_offset`]), since
//! neither QEMU nor Cloud Hypervisor would put it there.
//!
//! "Occupied" means any non-zero byte, linked or not: Turing keeps an MSI-X
//! structure at 0xC8 that is not in the list (an RTX 2080 Ti's config published
//! in an nvidia-bug-report.log reads `11 00 05 00 00 00 b9 00` there;
//! tests/tests/host/gpu_config_placement.rs builds that layout from the cited facts), which is why
//! NVIDIA's updated guidance, quoted in QEMU's vfio quirk, recommends 0xD4 for
//! Turing and later. Since driver 580.65 a second virtual capability, BTS, may
//! sit at 0xD4; the overlay never overwrites it and reports where it is.

use std::fmt;

use p2p_topology::capability::{BtsCapability, P2pCapability, P2P_CAP_LEN, VENDOR_SPECIFIC_ID};
use p2p_topology::pci::{CapabilityEntry, ConfigSpace, CONFIG_HEADER_LEN, CONFIG_LEGACY_LEN};
use p2p_topology::Clique;
use serde::Serialize;

use super::error::OverlayError;
use super::patch::Owned;
use super::OverlayOptions;

/// NVIDIA's PCI vendor id.
pub const NVIDIA_VENDOR_ID: u16 = 0x10de;
/// PCI base class of display controllers (VGA 0x0300, 3D 0x0302).
pub const DISPLAY_BASE_CLASS: u8 = 0x03;
/// The preferred slot, QEMU's and Cloud Hypervisor's default.
pub const PREFERRED_OFFSET: u8 = 0xc8;
/// The second choice (since driver 580.65 NVIDIA may use it for another capability).
pub const FALLBACK_OFFSET: u8 = 0xd4;
/// Register holding the first capability pointer (type-0 and type-1 headers).
pub const CAP_POINTER_OFFSET: u8 = 0x34;
/// Low byte of the status register; bit 4 says the capability list exists.
pub const STATUS_OFFSET: u8 = 0x06;
/// Status bit 4: capabilities list.
pub const STATUS_CAP_LIST: u8 = 0x10;

/// Whether the overlay adds the capability or found it already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PlacementAction {
    /// The capability is added to the virtual config space.
    Injected,
    /// The physical config already carries it with the same clique: nothing changes.
    AlreadyPresent,
}

/// A byte the overlay changes: its offset, physical value and virtual value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct BytePatch {
    /// Config offset of the byte.
    #[serde(with = "p2p_topology::hex::u8")]
    #[schemars(with = "p2p_topology::hex::Hex")]
    pub offset: u8,
    /// Its value in the physical config space.
    #[serde(with = "p2p_topology::hex::u8")]
    #[schemars(with = "p2p_topology::hex::Hex")]
    pub old: u8,
    /// Its value in the virtual config space the guest reads.
    #[serde(with = "p2p_topology::hex::u8")]
    #[schemars(with = "p2p_topology::hex::Hex")]
    pub new: u8,
}

/// The capability that was last in the list and now points to the new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct LinkedAfter {
    /// Its capability id.
    #[serde(with = "p2p_topology::hex::u8")]
    #[schemars(with = "p2p_topology::hex::Hex")]
    pub id: u8,
    /// Its offset.
    #[serde(with = "p2p_topology::hex::u8")]
    #[schemars(with = "p2p_topology::hex::Hex")]
    pub offset: u8,
    /// Its next pointer (at `offset + 1`): the old value (0, or reserved bits
    /// only) and the new one (the capability's offset).
    pub next: BytePatch,
}

/// Why an 8-byte slot cannot take the capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(tag = "why", rename_all = "snake_case")]
pub enum SlotConflict {
    /// Its bytes overlap a capability of the list.
    Overlaps {
        /// The listed capability whose byte range the slot's 8 bytes overlap.
        capability: CapabilityEntry,
    },
    /// No listed capability covers it, but its bytes are not all zero: an
    /// unlinked structure (Turing's MSI-X at 0xC8) or data the device keeps.
    NonZero {
        /// The slot's 8 bytes as the physical config holds them.
        bytes: [u8; 8],
    },
}

/// A slot tried and rejected, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct RejectedSlot {
    /// Config offset of the 8-byte slot (dword-aligned).
    #[serde(with = "p2p_topology::hex::u8")]
    #[schemars(with = "p2p_topology::hex::Hex")]
    pub offset: u8,
    /// What occupies it.
    pub conflict: SlotConflict,
}

impl RejectedSlot {
    /// The listed capability the slot overlaps, if that is why it was rejected.
    pub fn overlaps(&self) -> Option<&CapabilityEntry> {
        match &self.conflict {
            SlotConflict::Overlaps { capability } => Some(capability),
            SlotConflict::NonZero { .. } => None,
        }
    }
}

impl fmt::Display for RejectedSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let end = usize::from(self.offset) + usize::from(P2P_CAP_LEN);
        match &self.conflict {
            SlotConflict::Overlaps { capability: c } => write!(
                f,
                "{:#04x}..{end:#04x} overlaps capability {:#04x} at {:#04x}..{:#04x} ({} bytes, {})",
                self.offset,
                c.id,
                c.offset,
                c.end(),
                c.len,
                match c.len_source {
                    p2p_topology::pci::LenSource::Spec => "length from the spec",
                    p2p_topology::pci::LenSource::SelfDescribed => "length it states",
                    p2p_topology::pci::LenSource::UpToNext =>
                        "unknown layout, up to the next capability",
                }
            ),
            SlotConflict::NonZero { bytes } => {
                let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
                write!(
                    f,
                    "{:#04x}..{end:#04x} holds non-zero bytes outside the list ({}): an \
                     unlinked structure, such as Turing's MSI-X at 0xc8",
                    self.offset,
                    hex.join(" ")
                )
            }
        }
    }
}

/// Where the capability went and everything the overlay changed to put it there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Placement {
    /// Whether the capability is injected or was already there with this clique.
    pub action: PlacementAction,
    /// Offset of the capability in config space.
    #[serde(with = "p2p_topology::hex::u8")]
    #[schemars(with = "p2p_topology::hex::Hex")]
    pub offset: u8,
    /// The clique the capability names; the NVIDIA driver enables P2P only within one.
    pub clique: Clique,
    /// Its 8 bytes as the guest reads them.
    pub capability: [u8; 8],
    /// The previously last capability, whose next pointer was patched; None
    /// when the list was empty or nothing was injected.
    pub linked_after: Option<LinkedAfter>,
    /// The capability pointer at 0x34, when the list was empty.
    pub cap_pointer: Option<BytePatch>,
    /// The low status byte at 0x06, when its capability-list bit was clear.
    pub status: Option<BytePatch>,
    /// Slots tried before `offset`, in order (0xC8, 0xD4, then upwards from 0x40):
    /// why the capability moved.
    pub rejected: Vec<RejectedSlot>,
    /// Offset of the driver's BTS capability (signature "BTS"), which the
    /// overlay keeps intact, when the list has one.
    #[serde(with = "p2p_topology::hex::opt_u8")]
    #[schemars(with = "Option<p2p_topology::hex::Hex>")]
    pub bts_offset: Option<u8>,
}

impl Placement {
    /// Whether the overlay adds the capability (it was not already present).
    pub fn is_injected(&self) -> bool {
        self.action == PlacementAction::Injected
    }

    /// The pointer to the capability changed at 0x34 (the list was empty).
    pub fn cap_pointer_changed(&self) -> bool {
        self.cap_pointer.is_some()
    }

    /// Status bit 4 (capabilities list) was set in the virtual bytes.
    pub fn status_changed(&self) -> bool {
        self.status.is_some()
    }

    /// Offset of the byte that now points to the capability (a next pointer or
    /// 0x34), None when nothing was injected.
    pub fn pointer_offset(&self) -> Option<u8> {
        self.linked_after
            .map(|l| l.next.offset)
            .or(self.cap_pointer.map(|p| p.offset))
    }
}

/// A placement and the bytes it owns.
pub(super) struct Plan {
    pub placement: Placement,
    pub owned: Owned,
}

/// Checks `config` and decides where the capability goes.
pub(super) fn plan(
    config: &[u8],
    clique: Clique,
    options: &OverlayOptions,
) -> Result<Plan, OverlayError> {
    if config.len() < CONFIG_LEGACY_LEN {
        return Err(OverlayError::Truncated { len: config.len() });
    }
    let cs = ConfigSpace::new(config)?;
    let base_class = config[0x0b];
    if !options.allow_non_nvidia
        && (cs.vendor_id() != NVIDIA_VENDOR_ID || base_class != DISPLAY_BASE_CLASS)
    {
        return Err(OverlayError::NotNvidiaGpu {
            vendor: cs.vendor_id(),
            base_class,
        });
    }
    if cs.header_type() == 2 {
        return Err(OverlayError::UnsupportedHeaderType {
            header_type: config[0x0e],
        });
    }
    let caps = cs.capabilities()?;
    if let Some(existing) = existing(config, &caps, clique)? {
        return Ok(Plan {
            placement: Placement {
                action: PlacementAction::AlreadyPresent,
                offset: existing.offset,
                clique,
                capability: cap_bytes(config, existing.offset),
                linked_after: None,
                cap_pointer: None,
                status: None,
                rejected: Vec::new(),
                bts_offset: bts_offset(config, &caps),
            },
            owned: Owned::default(),
        });
    }
    let (offset, rejected) = choose_slot(config, &caps, options.any_offset)?;
    let capability = P2pCapability::new(clique, 0).encode();
    let mut owned = Owned::default();
    for (i, b) in capability.iter().enumerate() {
        owned.set(usize::from(offset) + i, 0xff, *b);
    }
    let mut placement = Placement {
        action: PlacementAction::Injected,
        offset,
        clique,
        capability,
        linked_after: None,
        cap_pointer: None,
        status: None,
        rejected,
        bts_offset: bts_offset(config, &caps),
    };
    match caps.last() {
        Some(last) => {
            let at = last.offset + 1;
            owned.set(usize::from(at), 0xff, offset);
            placement.linked_after = Some(LinkedAfter {
                id: last.id,
                offset: last.offset,
                next: BytePatch {
                    offset: at,
                    old: config[usize::from(at)],
                    new: offset,
                },
            });
        }
        None => {
            let ptr = CAP_POINTER_OFFSET;
            owned.set(usize::from(ptr), 0xff, offset);
            placement.cap_pointer = Some(BytePatch {
                offset: ptr,
                old: config[usize::from(ptr)],
                new: offset,
            });
            let old = config[usize::from(STATUS_OFFSET)];
            if old & STATUS_CAP_LIST == 0 {
                owned.set(usize::from(STATUS_OFFSET), STATUS_CAP_LIST, STATUS_CAP_LIST);
                placement.status = Some(BytePatch {
                    offset: STATUS_OFFSET,
                    old,
                    new: old | STATUS_CAP_LIST,
                });
            }
        }
    }
    Ok(Plan { placement, owned })
}

/// The 8 bytes at `offset`, zero past the end of the legacy region.
fn cap_bytes(config: &[u8], offset: u8) -> [u8; 8] {
    let mut out = [0u8; 8];
    for (i, b) in out.iter_mut().enumerate() {
        *b = config
            .get(usize::from(offset) + i)
            .filter(|_| usize::from(offset) + i < CONFIG_LEGACY_LEN)
            .copied()
            .unwrap_or(0);
    }
    out
}

/// The first P2P capability already in the list, if its clique matches;
/// an error if any P2P capability names another clique or does not decode.
fn existing(
    config: &[u8],
    caps: &[CapabilityEntry],
    clique: Clique,
) -> Result<Option<CapabilityEntry>, OverlayError> {
    let mut same = None;
    for cap in caps.iter().filter(|c| c.id == VENDOR_SPECIFIC_ID) {
        let bytes = cap_bytes(config, cap.offset);
        if !P2pCapability::has_signature(&bytes) {
            continue;
        }
        let found =
            P2pCapability::decode(&bytes).map_err(|source| OverlayError::ExistingMalformed {
                offset: cap.offset,
                source,
            })?;
        if found.clique != clique {
            return Err(OverlayError::ExistingOtherClique {
                offset: cap.offset,
                existing: found.clique,
                requested: clique,
            });
        }
        same.get_or_insert(*cap);
    }
    Ok(same)
}

/// Where the list holds the driver's BTS capability, if it does.
fn bts_offset(config: &[u8], caps: &[CapabilityEntry]) -> Option<u8> {
    caps.iter()
        .filter(|c| c.id == VENDOR_SPECIFIC_ID)
        .find(|c| BtsCapability::has_signature(&cap_bytes(config, c.offset)))
        .map(|c| c.offset)
}

/// The capability whose byte range overlaps the 8 bytes at `slot`, if any.
pub fn overlapping(slot: u8, caps: &[CapabilityEntry]) -> Option<CapabilityEntry> {
    let (start, end) = (
        usize::from(slot),
        usize::from(slot) + usize::from(P2P_CAP_LEN),
    );
    caps.iter()
        .find(|c| usize::from(c.offset) < end && start < c.end())
        .copied()
}

/// Slots in the order they are tried: 0xC8, 0xD4, then every dword from 0x40.
pub fn candidate_slots() -> impl Iterator<Item = u8> {
    let last = CONFIG_LEGACY_LEN - usize::from(P2P_CAP_LEN);
    [PREFERRED_OFFSET, FALLBACK_OFFSET].into_iter().chain(
        (CONFIG_HEADER_LEN..=last)
            .step_by(4)
            .map(|s| s as u8)
            .filter(|&s| s != PREFERRED_OFFSET && s != FALLBACK_OFFSET),
    )
}

/// Why `slot` cannot take the capability, or None when it is free.
pub fn conflict(config: &[u8], slot: u8, caps: &[CapabilityEntry]) -> Option<SlotConflict> {
    if let Some(capability) = overlapping(slot, caps) {
        return Some(SlotConflict::Overlaps { capability });
    }
    let bytes = cap_bytes(config, slot);
    (bytes != [0; 8]).then_some(SlotConflict::NonZero { bytes })
}

fn choose_slot(
    config: &[u8],
    caps: &[CapabilityEntry],
    any_offset: bool,
) -> Result<(u8, Vec<RejectedSlot>), OverlayError> {
    let mut rejected = Vec::new();
    for slot in candidate_slots() {
        let preferred = slot == PREFERRED_OFFSET || slot == FALLBACK_OFFSET;
        if !preferred && !any_offset {
            return Err(OverlayError::PreferredSlotsTaken { rejected });
        }
        match conflict(config, slot, caps) {
            None => return Ok((slot, rejected)),
            Some(conflict) => rejected.push(RejectedSlot {
                offset: slot,
                conflict,
            }),
        }
    }
    Err(OverlayError::NoFreeSlot { rejected })
}
