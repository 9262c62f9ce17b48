//! The GPU's BARs: their kinds from the config header, their sizes from the
//! sysfs `resource` file (the config space holds addresses, not sizes), the
//! optional scaling for small test VMs, and BAR register emulation.
//!
//! A BAR register behaves as on hardware: the address bits below the size read
//! as zero whatever is written, and the low bits carry the fixed type flags
//! (I/O, 32/64-bit, prefetchable). So writing all ones and reading back gives
//! the size mask, which is how firmware and the guest kernel size BARs.

use std::path::Path;

use p2p_topology::pci::{cap_id, ConfigSpace};

use super::error::ServeError;
use p2p_topology::ByteSize;

/// Config offset of the first BAR register.
pub const BAR0_OFFSET: usize = 0x10;
/// BAR registers in a type-0 header.
pub const BAR_REGISTERS: usize = 6;
/// Config offset of the expansion ROM register.
pub const ROM_OFFSET: usize = 0x30;

/// What kind of BAR a register holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarKind {
    /// An I/O space BAR (register bit 0 set); never scaled, never mapped.
    Io,
    /// A 32-bit memory BAR (memory type 00b, or the legacy below-1M type 01b).
    Mem32,
    /// Takes this register and the next (the upper 32 address bits).
    Mem64,
}

/// One implemented BAR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bar {
    /// Its (first) register, 0..=5: the VFIO region index.
    pub index: u8,
    /// I/O, 32-bit or 64-bit memory, from the register's low bits.
    pub kind: BarKind,
    /// Register bit 3: the memory is prefetchable (false for I/O).
    pub prefetchable: bool,
    /// Size served to the client (a power of two).
    pub size: u64,
    /// Size in the capture (differs when `max-bar` scaled it down).
    pub captured_size: u64,
}

impl Bar {
    /// The fixed low bits of its (first) register.
    pub fn type_bits(&self) -> u32 {
        match self.kind {
            BarKind::Io => 0x1,
            BarKind::Mem32 => u32::from(self.prefetchable) << 3,
            BarKind::Mem64 => 0x4 | u32::from(self.prefetchable) << 3,
        }
    }

    /// Whether it is a memory BAR (32- or 64-bit) rather than I/O.
    pub fn is_memory(&self) -> bool {
        self.kind != BarKind::Io
    }
}

/// A BAR served smaller than captured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScaledBar {
    /// Its (first) register, 0..=5.
    pub index: u8,
    /// Bytes in the capture's `resource` file.
    pub captured: u64,
    /// Bytes served to the client: the `max-bar` size.
    pub served: u64,
}

impl std::fmt::Display for ScaledBar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "BAR{} scaled from {} to {}",
            self.index,
            ByteSize(self.captured),
            ByteSize(self.served)
        )
    }
}

/// The implemented BARs of one function.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BarLayout {
    bars: Vec<Bar>,
}

/// Sizes per line of a sysfs `resource` file (`start end flags` in hex; an
/// all-zero line is an absent resource). Lines 0..=5 are the BARs, 6 the ROM.
pub fn parse_resource(text: &str, path: &Path) -> Result<Vec<u64>, ServeError> {
    let mut sizes = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let bad = |why: &str| ServeError::Resource {
            path: path.to_path_buf(),
            line: i + 1,
            why: why.to_string(),
        };
        let fields: Vec<u64> = line
            .split_whitespace()
            .map(|f| {
                f.strip_prefix("0x")
                    .and_then(|h| u64::from_str_radix(h, 16).ok())
                    .ok_or_else(|| bad("want three 0x-prefixed hex numbers: start end flags"))
            })
            .collect::<Result<_, _>>()?;
        let [start, end, _flags] = fields[..] else {
            return Err(bad("want three 0x-prefixed hex numbers: start end flags"));
        };
        let size = if start == 0 && end == 0 {
            0
        } else {
            end.checked_sub(start)
                .and_then(|d| d.checked_add(1))
                .ok_or_else(|| bad("end is below start"))?
        };
        sizes.push(size);
    }
    if sizes.len() < BAR_REGISTERS {
        return Err(ServeError::Resource {
            path: path.to_path_buf(),
            line: sizes.len(),
            why: format!(
                "{} lines; a PCI function's resource file lists at least the 6 BARs",
                sizes.len()
            ),
        });
    }
    Ok(sizes)
}

impl BarLayout {
    /// Reads the BAR kinds from `config` and takes their sizes from `sizes`
    /// (one per register, as [`parse_resource`] returns them). With `max_bar`,
    /// memory BARs larger than it are served at that size; the BAR holding the
    /// MSI-X table or PBA is never cut below them.
    pub fn new(
        config: &[u8],
        sizes: &[u64],
        max_bar: Option<u64>,
    ) -> Result<(Self, Vec<ScaledBar>), ServeError> {
        if config.len() < ROM_OFFSET {
            return Err(ServeError::Bar {
                index: 0,
                why: format!(
                    "a config space of {} bytes has no BAR registers",
                    config.len()
                ),
            });
        }
        let reg = |i: usize| {
            let o = BAR0_OFFSET + 4 * i;
            u32::from_le_bytes([config[o], config[o + 1], config[o + 2], config[o + 3]])
        };
        let size_of = |i: usize| sizes.get(i).copied().unwrap_or(0);
        let bad = |index: usize, why: String| ServeError::Bar {
            index: index as u8,
            why,
        };
        let msix_ends = msix_ends(config);
        let mut bars = Vec::new();
        let mut scaled = Vec::new();
        let mut i = 0;
        while i < BAR_REGISTERS {
            let value = reg(i);
            let captured = size_of(i);
            let (kind, prefetchable) = if value & 1 == 1 {
                (BarKind::Io, false)
            } else {
                match (value >> 1) & 3 {
                    0 | 1 => (BarKind::Mem32, value & 0x8 != 0),
                    2 => (BarKind::Mem64, value & 0x8 != 0),
                    _ => {
                        return Err(bad(
                            i,
                            format!("register {value:#010x} has the reserved memory type 3"),
                        ))
                    }
                }
            };
            let regs = if kind == BarKind::Mem64 { 2 } else { 1 };
            if kind == BarKind::Mem64 {
                if i + 1 >= BAR_REGISTERS {
                    return Err(bad(i, "a 64-bit BAR in the last register".into()));
                }
                if size_of(i + 1) != 0 {
                    return Err(bad(
                        i,
                        format!(
                            "64-bit, but the resource file gives register {} (its upper half) a size too",
                            i + 1
                        ),
                    ));
                }
            }
            if captured != 0 {
                let limit = match kind {
                    BarKind::Io => 256,
                    BarKind::Mem32 => 1 << 31,
                    BarKind::Mem64 => 1 << 63,
                };
                let min = if kind == BarKind::Io { 4 } else { 16 };
                if !captured.is_power_of_two() || captured < min || captured > limit {
                    return Err(bad(
                        i,
                        format!(
                            "size {captured:#x} is not a power of two in {min:#x}..={limit:#x}"
                        ),
                    ));
                }
                let mut size = captured;
                if let Some(max) = max_bar.filter(|&m| kind != BarKind::Io && captured > m) {
                    let need = msix_ends
                        .iter()
                        .filter(|(bar, _)| usize::from(*bar) == i)
                        .map(|(_, end)| *end)
                        .max()
                        .unwrap_or(0);
                    if need > max {
                        return Err(bad(
                            i,
                            format!(
                                "max-bar={} would cut it below the MSI-X table or PBA, which end at {need:#x}; \
                                 use at least {}",
                                ByteSize(max),
                                ByteSize(need.next_power_of_two())
                            ),
                        ));
                    }
                    size = max;
                    scaled.push(ScaledBar {
                        index: i as u8,
                        captured,
                        served: size,
                    });
                }
                bars.push(Bar {
                    index: i as u8,
                    kind,
                    prefetchable,
                    size,
                    captured_size: captured,
                });
            }
            i += regs;
        }
        Ok((Self { bars }, scaled))
    }

    /// The implemented BARs, in register order.
    pub fn bars(&self) -> &[Bar] {
        &self.bars
    }

    /// The BAR whose first register is `index`.
    pub fn bar(&self, index: u8) -> Option<&Bar> {
        self.bars.iter().find(|b| b.index == index)
    }

    /// What BAR register `reg` (0..=5) holds after the guest writes `value`:
    /// the address bits the size allows, the fixed type bits, 0 for a register
    /// without a BAR.
    pub fn sanitize(&self, reg: usize, value: u32) -> u32 {
        for b in &self.bars {
            let mask = !(b.size - 1);
            if usize::from(b.index) == reg {
                let low = match b.kind {
                    BarKind::Io => mask as u32 & 0xffff_fffc,
                    _ => mask as u32 & 0xffff_fff0,
                };
                return (value & low) | b.type_bits();
            }
            if b.kind == BarKind::Mem64 && usize::from(b.index) + 1 == reg {
                return value & (mask >> 32) as u32;
            }
        }
        0
    }
}

/// End offsets of the MSI-X table and PBA inside their BARs: (BAR, end).
fn msix_ends(config: &[u8]) -> Vec<(u8, u64)> {
    let Ok(cs) = ConfigSpace::new(config) else {
        return Vec::new();
    };
    let Ok(Some(cap)) = cs.find_capability(cap_id::MSIX) else {
        return Vec::new();
    };
    let o = usize::from(cap.offset);
    let (Some(ctrl), Some(table), Some(pba)) =
        (cs.u16_at(o + 2), cs.u32_at(o + 4), cs.u32_at(o + 8))
    else {
        return Vec::new();
    };
    let vectors = u64::from(ctrl & 0x7ff) + 1;
    let table_end = u64::from(table & !7) + vectors * 16;
    let pba_end = u64::from(pba & !7) + vectors.div_ceil(64) * 8;
    vec![((table & 7) as u8, table_end), ((pba & 7) as u8, pba_end)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_with(regs: [u32; 6]) -> Vec<u8> {
        let mut c = vec![0u8; 256];
        c[0..2].copy_from_slice(&0x10de_u16.to_le_bytes());
        for (i, r) in regs.iter().enumerate() {
            c[0x10 + 4 * i..0x14 + 4 * i].copy_from_slice(&r.to_le_bytes());
        }
        c
    }

    #[test]
    fn h200_layout_and_sizing() {
        // As the captured H200: three 64-bit prefetchable BARs at 0, 2, 4.
        let c = config_with([0x0200_000c, 0x1040, 0xc, 0x1000, 0xc, 0x1040]);
        let sizes = [16 << 20, 0, 256 << 30, 0, 32 << 20, 0, 0];
        let (l, scaled) = BarLayout::new(&c, &sizes, Some(256 << 20)).unwrap();
        assert_eq!(l.bars().len(), 3);
        assert_eq!(l.bar(2).unwrap().size, 256 << 20);
        assert_eq!(l.bar(2).unwrap().captured_size, 256 << 30);
        assert_eq!(scaled.len(), 1);
        assert_eq!(scaled[0].to_string(), "BAR2 scaled from 256 GiB to 256 MiB");
        // All ones reads back the size mask with the type bits.
        assert_eq!(l.sanitize(0, !0), 0xff00_000c);
        assert_eq!(l.sanitize(1, !0), 0xffff_ffff);
        assert_eq!(l.sanitize(2, !0), 0xf000_000c);
        assert_eq!(l.sanitize(5, 0x1234), 0x1234);
        // Unscaled 256 GiB: the low dword has no address bits, the upper has 0xffffffc0.
        let (l, _) = BarLayout::new(&c, &sizes, None).unwrap();
        assert_eq!(l.sanitize(2, !0), 0xc);
        assert_eq!(l.sanitize(3, !0), 0xffff_ffc0);
    }

    #[test]
    fn io_and_absent_bars() {
        let c = config_with([0x0000_c001, 0xfe00_0000, 0, 0, 0, 0]);
        let (l, _) = BarLayout::new(&c, &[128, 4096, 0, 0, 0, 0], None).unwrap();
        assert_eq!(l.sanitize(0, !0), 0xffff_ff81);
        assert_eq!(l.sanitize(1, !0), 0xffff_f000);
        assert_eq!(l.sanitize(2, !0), 0);
    }

    #[test]
    fn refuses_inconsistent_layouts() {
        let c = config_with([0xc, 0, 0, 0, 0, 0xc]);
        assert!(BarLayout::new(&c, &[16 << 20, 4096, 0, 0, 0, 0], None).is_err());
        assert!(BarLayout::new(&c, &[0, 0, 0, 0, 0, 4096], None).is_err());
        assert!(BarLayout::new(&c, &[3 << 20, 0, 0, 0, 0, 0], None).is_err());
    }

    #[test]
    fn resource_files() {
        let p = Path::new("resource");
        let text = "0x0000104002000000 0x0000104002ffffff 0x000000000014220c\n\
                    0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
            .repeat(3)
            + "0x0000000000000000 0x0000000000000000 0x0000000000000000\n";
        let sizes = parse_resource(&text, p).unwrap();
        assert_eq!(sizes[..3], [16 << 20, 0, 16 << 20]);
        assert!(parse_resource("0x1 0x0 0x0\n", p).is_err());
        assert!(parse_resource("garbage\n", p).is_err());
        assert!(parse_resource("0x0 0x0 0x0\n", p).is_err());
    }
}
