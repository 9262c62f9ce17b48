//! Which bits of a captured config space the guest may write, what they hold
//! after a reset, and which interrupts the capabilities announce.
//!
//! A captured config is a snapshot of a running device: memory decoding and bus
//! mastering on, MSI-X enabled, BARs at the host's addresses. [`power_on`]
//! turns it into what a freshly reset function shows (command register 0,
//! MSI/MSI-X disabled, D0); [`write_mask`] keeps identification, header
//! layout, capability headers and capability registers hardware makes
//! read-only from changing. Everything else the guest may write and read back.

use p2p_topology::pci::{cap_id, ConfigSpace, CONFIG_LEGACY_LEN};
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_INFO_AUTOMASKED, VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_INFO_MASKABLE, VFIO_IRQ_INFO_NORESIZE,
};

use super::backend::{IrqIndex, IrqInfo};
use super::bars::{BarKind, BarLayout};

const COMMAND: usize = 0x04;
/// Command bits a device implements: memory, bus master, parity, SERR#, INTx disable.
const COMMAND_WRITABLE: u16 = 0x0546;
const COMMAND_IO: u16 = 0x0001;

fn set(mask: &mut [u8], from: usize, len: usize, value: u8) {
    let end = (from + len).min(mask.len());
    if from < end {
        mask[from..end].fill(value);
    }
}

/// Per byte of `config`: the bits a guest write may change. BAR registers and
/// the ROM register are 0 here (they are emulated separately).
pub fn write_mask(config: &[u8], bars: &BarLayout) -> Vec<u8> {
    let len = config.len();
    let mut mask = vec![0u8; len];
    if len < CONFIG_LEGACY_LEN {
        return mask; // not a config space we serve: nothing is writable
    }
    // Capability space is writable unless listed below.
    set(&mut mask, CONFIG_LEGACY_LEN.min(len), len, 0xff);
    set(&mut mask, 0x40, CONFIG_LEGACY_LEN - 0x40, 0xff);
    let io = bars.bars().iter().any(|b| b.kind == BarKind::Io);
    let command = COMMAND_WRITABLE | if io { COMMAND_IO } else { 0 };
    mask[COMMAND..COMMAND + 2].copy_from_slice(&command.to_le_bytes());
    mask[0x0c] = 0xff; // cache line size
    mask[0x0d] = 0xff; // latency timer
    mask[0x3c] = 0xff; // interrupt line
    let Ok(cs) = ConfigSpace::new(config) else {
        return mask;
    };
    for cap in cs.capabilities().unwrap_or_default() {
        let o = usize::from(cap.offset);
        set(&mut mask, o, 2, 0); // id, next
        match cap.id {
            cap_id::POWER_MANAGEMENT => set(&mut mask, o + 2, 2, 0), // PMC
            cap_id::MSI => {
                // Message control: enable (bit 0) and multiple message enable (6:4).
                mask[o + 2] = 0x71;
                mask[o + 3] = 0;
            }
            cap_id::MSIX => {
                // Message control: function mask (14) and enable (15); table and PBA offsets.
                mask[o + 2] = 0;
                mask[o + 3] = 0xc0;
                set(&mut mask, o + 4, 8, 0);
            }
            cap_id::PCI_EXPRESS => {
                set(&mut mask, o + 2, 2, 0); // PCIe capabilities
                set(&mut mask, o + 4, 4, 0); // device capabilities
                set(&mut mask, o + 0x0c, 4, 0); // link capabilities
                set(&mut mask, o + 0x24, 4, 0); // device capabilities 2
                set(&mut mask, o + 0x2c, 4, 0); // link capabilities 2
            }
            _ => {}
        }
    }
    for ext in cs.extended_capabilities().unwrap_or_default() {
        set(&mut mask, usize::from(ext.offset), 4, 0);
    }
    mask
}

/// The config a reset function shows: `captured` with the command register
/// cleared, MSI and MSI-X disabled, power state D0, and the BAR registers as
/// [`BarLayout::sanitize`] keeps them; the ROM register reads 0 (no ROM).
pub fn power_on(captured: &[u8], bars: &BarLayout) -> Vec<u8> {
    let mut c = captured.to_vec();
    if c.len() < CONFIG_LEGACY_LEN {
        return c; // not a config space we serve
    }
    c[COMMAND..COMMAND + 2].fill(0);
    for reg in 0..super::bars::BAR_REGISTERS {
        let o = super::bars::BAR0_OFFSET + 4 * reg;
        let v = u32::from_le_bytes([c[o], c[o + 1], c[o + 2], c[o + 3]]);
        c[o..o + 4].copy_from_slice(&bars.sanitize(reg, v).to_le_bytes());
    }
    let rom = super::bars::ROM_OFFSET;
    c[rom..rom + 4].fill(0);
    let Ok(cs) = ConfigSpace::new(captured) else {
        return c;
    };
    for cap in cs.capabilities().unwrap_or_default() {
        let o = usize::from(cap.offset);
        match cap.id {
            cap_id::POWER_MANAGEMENT => c[o + 4] &= !0x03,
            cap_id::MSI => c[o + 2] &= !0x71,
            cap_id::MSIX => c[o + 3] &= !0xc0,
            _ => {}
        }
    }
    c
}

/// The interrupts the config announces: INTx when the interrupt pin is set,
/// MSI and MSI-X vectors from their capabilities, an error interrupt for a
/// PCI Express function, and the request interrupt every VFIO device has.
pub fn irq_infos(config: &[u8]) -> [IrqInfo; 5] {
    let mut infos = [IrqInfo::default(); 5];
    let eventfd = VFIO_IRQ_INFO_EVENTFD;
    let Ok(cs) = ConfigSpace::new(config) else {
        return infos;
    };
    if cs.u8_at(0x3d).unwrap_or(0) != 0 {
        infos[IrqIndex::Intx as usize] = IrqInfo {
            count: 1,
            flags: eventfd | VFIO_IRQ_INFO_MASKABLE | VFIO_IRQ_INFO_AUTOMASKED,
        };
    }
    let caps = cs.capabilities().unwrap_or_default();
    for cap in &caps {
        let ctrl = cs.u16_at(usize::from(cap.offset) + 2).unwrap_or(0);
        match cap.id {
            cap_id::MSI => {
                infos[IrqIndex::Msi as usize] = IrqInfo {
                    count: 1 << ((ctrl >> 1) & 0x7).min(5),
                    flags: eventfd | VFIO_IRQ_INFO_NORESIZE,
                }
            }
            cap_id::MSIX => {
                infos[IrqIndex::Msix as usize] = IrqInfo {
                    count: u32::from(ctrl & 0x7ff) + 1,
                    flags: eventfd | VFIO_IRQ_INFO_NORESIZE,
                }
            }
            cap_id::PCI_EXPRESS => {
                infos[IrqIndex::Err as usize] = IrqInfo {
                    count: 1,
                    flags: eventfd,
                }
            }
            _ => {}
        }
    }
    infos[IrqIndex::Req as usize] = IrqInfo {
        count: 1,
        flags: eventfd,
    };
    infos
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 0x40 PM -> 0x48 MSI (16 vectors) -> 0x60 PCIe -> 0xb0 MSI-X (9 vectors, enabled).
    fn gpu_like() -> Vec<u8> {
        let mut c = vec![0u8; 256];
        c[0..2].copy_from_slice(&0x10de_u16.to_le_bytes());
        c[0x04] = 0x46;
        c[0x05] = 0x05;
        c[0x06] = 0x10;
        c[0x0b] = 0x03;
        c[0x34] = 0x40;
        c[0x3d] = 0x01;
        c[0x40..0x44].copy_from_slice(&[0x01, 0x48, 0x03, 0x00]);
        c[0x48..0x4c].copy_from_slice(&[0x05, 0x60, 0x89, 0x03]);
        c[0x60..0x64].copy_from_slice(&[0x10, 0xb0, 0x02, 0x00]);
        c[0xb0..0xb4].copy_from_slice(&[0x11, 0x00, 0x08, 0x80]);
        c
    }

    #[test]
    fn interrupts_from_capabilities() {
        let i = irq_infos(&gpu_like());
        assert_eq!(i[0].count, 1);
        assert_eq!(i[1].count, 16);
        assert_eq!(i[2].count, 9);
        assert_eq!(i[3].count, 1);
        assert_eq!(i[4].count, 1);
    }

    #[test]
    fn power_on_state() {
        // A snapshot of a running function: D3hot, MSI on with 4 of its
        // vectors enabled, MSI-X on and masked, BARs at host addresses, a ROM
        // decoding, and a register without a BAR holding junk.
        let mut captured = gpu_like();
        captured[0x44] = 0x0b; // PMCSR: PowerState 11b (D3hot), No_Soft_Reset (bit 3)
        captured[0x4a] = 0xa9; // MSI control: enable, MME 010b, MMC 100b, 64-bit
        captured[0xb3] = 0xc0; // MSI-X control: enable, function mask
        let bar = |c: &mut Vec<u8>, reg: usize, v: u32| {
            c[0x10 + 4 * reg..0x14 + 4 * reg].copy_from_slice(&v.to_le_bytes())
        };
        bar(&mut captured, 0, 0xfb80_0000); // 32-bit memory, 16 MiB below
        bar(&mut captured, 1, 0x0000_000c); // 64-bit prefetchable, 256 MiB below,
        bar(&mut captured, 2, 0x0000_0010); // at 0x10_0000_0000
        bar(&mut captured, 4, 0xdead_bee0); // no BAR here
        captured[0x30..0x34].copy_from_slice(&0xfc00_0001_u32.to_le_bytes()); // ROM enabled
        let sizes = [16 << 20, 256 << 20, 0, 0, 0, 0];
        let (bars, _) = BarLayout::new(&captured, &sizes, None).unwrap();

        let c = power_on(&captured, &bars);

        // What a reset function shows, byte by byte, by the PCI Local Bus spec
        // (command register, BARs, expansion ROM register), the PCI PM spec
        // (PMCSR) and the PCIe spec (MSI and MSI-X message control); every
        // other byte as captured.
        let mut want = captured.clone();
        // Command: nothing decodes, no bus mastering.
        want[0x04..0x06].copy_from_slice(&[0, 0]);
        // BAR0: a 16 MiB BAR hardwires address bits 23:0 to 0, so 0xfb80_0000 reads 0xfb00_0000.
        want[0x10..0x14].copy_from_slice(&0xfb00_0000_u32.to_le_bytes());
        // BAR1/2: aligned to 256 MiB, type bits 64-bit prefetchable (0xc): unchanged.
        want[0x20..0x24].copy_from_slice(&[0; 4]); // BAR4: unimplemented, reads 0
        want[0x30..0x34].copy_from_slice(&[0; 4]); // no ROM: the register reads 0
        want[0x44] = 0x08; // PowerState D0 (00b); No_Soft_Reset is read-only and stays
        want[0x4a] = 0x88; // MSI enable and MME cleared; MMC and 64-bit stay
        want[0xb3] = 0x00; // MSI-X enable and function mask cleared
        assert_eq!(c[0x44] & 0x03, 0, "power state D0");
        assert_eq!(c[0x10..0x28], want[0x10..0x28], "BAR registers");
        assert_eq!(c[0x30..0x34], [0; 4], "ROM register");
        assert_eq!(c, want);
    }

    #[test]
    fn read_only_bits() {
        let m = write_mask(&gpu_like(), &BarLayout::default());
        assert_eq!(m[0x00..0x04], [0; 4], "ids");
        assert_eq!(m[0x04..0x06], [0x46, 0x05], "command");
        assert_eq!(m[0x10..0x28], [0; 0x18], "BARs are emulated elsewhere");
        assert_eq!(m[0xb0..0xb2], [0, 0], "MSI-X header");
        assert_eq!(m[0xb3], 0xc0);
        assert_eq!(m[0x4a], 0x71);
        assert_eq!(m[0xc8], 0xff, "free capability space");
    }
}
