//! The first slot on the guest's root bus `pcie.0` that a layout takes: the
//! flat layout puts one host device per slot from it, the mirrored layout one
//! expander bus (`pxb-pcie`) per slot. A VM that already holds devices at the
//! default slots moves vp2p's up or down with it.
//!
//! The bounds are q35's: slot 0 is the host bridge (MCH, `00:00.0`) and slot
//! 0x1f the ICH9 LPC bridge, SATA and SMBus functions QEMU always creates
//! there (`ICH9_LPC_DEVFN`, `ICH9_SATA1_DEVFN`, `ICH9_SMB_DEVFN` are
//! `PCI_DEVFN(31, 0/2/3)` in QEMU's include/hw/southbridge/ich9.h), so a
//! layout takes slots 0x01 to 0x1e at most.

use std::fmt;
use std::str::FromStr;

/// The default first slot, 0x10: above the low slots VMMs fill with their
/// own devices (QEMU's defaults, libvirt's controllers and disks).
pub const FIRST_SLOT: u8 = 0x10;
/// The lowest slot a layout may take (slot 0 is q35's host bridge).
pub const LOWEST_SLOT: u8 = 0x01;
/// The highest slot a layout may take (0x1f holds q35's ICH9 functions).
pub const LAST_SLOT: u8 = 0x1e;

/// A slot on `pcie.0` from which a layout places its devices or buses,
/// checked to lie in [`LOWEST_SLOT`]..=[`LAST_SLOT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct FirstSlot(u8);

/// Why a first slot was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FirstSlotError {
    /// The text is neither a decimal nor a `0x`-prefixed hexadecimal number.
    #[error("'{0}' is not a slot number (decimal, or hexadecimal with 0x: 16 or 0x10)")]
    NotANumber(String),
    /// The number lies outside the slots a layout may take.
    #[error(
        "slot {0:#04x} is not free on q35's pcie.0: a layout starts at a slot from 0x01 to 0x1e \
         (0x00 is the host bridge, 0x1f holds the ICH9 LPC, SATA and SMBus functions)"
    )]
    OutOfRange(u32),
}

impl FirstSlot {
    /// The default, [`FIRST_SLOT`].
    pub const DEFAULT: FirstSlot = FirstSlot(FIRST_SLOT);

    /// `slot`, when a layout may start there.
    pub fn new(slot: u8) -> Result<Self, FirstSlotError> {
        if (LOWEST_SLOT..=LAST_SLOT).contains(&slot) {
            Ok(FirstSlot(slot))
        } else {
            Err(FirstSlotError::OutOfRange(u32::from(slot)))
        }
    }

    /// The slot number.
    pub fn get(self) -> u8 {
        self.0
    }

    /// How many slots lie free from it through [`LAST_SLOT`]: the most host
    /// devices (flat) or expander buses (mirror) a layout starting here holds.
    pub fn room(self) -> usize {
        usize::from(LAST_SLOT - self.0) + 1
    }

    /// The `n`-th slot from it, when that is still free (`n < room()`).
    pub fn nth(self, n: usize) -> Option<u8> {
        (n < self.room()).then(|| self.0 + n as u8)
    }
}

impl Default for FirstSlot {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl fmt::Display for FirstSlot {
    /// `0x10`, as QEMU's `addr=` and the error messages write slots.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#04x}", self.0)
    }
}

impl FromStr for FirstSlot {
    type Err = FirstSlotError;

    /// Decimal (`24`) or hexadecimal with `0x` (`0x18`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let n = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            Some(hex) => u32::from_str_radix(hex, 16),
            None => t.parse::<u32>(),
        }
        .map_err(|_| FirstSlotError::NotANumber(s.to_string()))?;
        let slot = u8::try_from(n).map_err(|_| FirstSlotError::OutOfRange(n))?;
        FirstSlot::new(slot)
    }
}
