//! [`CapturedGpu`]: a GPU rebuilt from a captured sysfs directory.
//!
//! The config space is the captured one, brought to its power-on state
//! ([`super::registers::power_on`]); writes change what hardware lets them
//! change ([`super::registers::write_mask`]), BAR registers size like real ones,
//! and there is no expansion ROM. Each BAR is a sparse, zero-filled memfd
//! ([`BarMemory`]) of its served size: the guest can write it and read back
//! what it wrote, through the protocol or through the mapping. Interrupts can
//! be wired but never fire; DMA mappings are recorded and never used.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE,
};

use super::backend::{
    DmaMapping, GpuBackend, IrqIndex, IrqInfo, IrqSet, RegionAccess, RegionIndex, RegionInfo,
};
use super::bars::{parse_resource, BarLayout, ScaledBar, BAR0_OFFSET, BAR_REGISTERS, ROM_OFFSET};
use super::error::ServeError;
use super::limits::{read_limited, ReadRefused, CONFIG_MAX, RESOURCE_MAX};
use super::memory::BarMemory;
use super::registers::{irq_infos, power_on, write_mask};

/// Where a GPU was captured: its config space and the `resource` file with BAR sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureFiles {
    /// The captured config space: sysfs `config`, 256 or 4096 bytes (read as root).
    pub config: PathBuf,
    /// Default: `resource` in the config's directory (the sysfs layout).
    pub resource: Option<PathBuf>,
}

impl CaptureFiles {
    /// The resource file to read: the given one, or `resource` next to `config`.
    pub fn resource_path(&self) -> Result<PathBuf, ServeError> {
        if let Some(r) = &self.resource {
            return Ok(r.clone());
        }
        let sibling = self
            .config
            .parent()
            .map(|d| d.join("resource"))
            .filter(|p| p.is_file());
        sibling.ok_or_else(|| ServeError::NoResource {
            config: self.config.clone(),
        })
    }
}

/// A GPU served from a capture; see the module docs.
#[derive(Debug)]
pub struct CapturedGpu {
    captured: Vec<u8>,
    config: Vec<u8>,
    writable: Vec<u8>,
    bars: BarLayout,
    memory: BTreeMap<u8, BarMemory>,
    irqs: [IrqInfo; 5],
    wired: BTreeMap<(IrqIndex, u32), File>,
    dma: Vec<DmaMapping>,
}

impl CapturedGpu {
    /// Reads the capture; `max_bar` scales larger memory BARs down. Returns the
    /// GPU and the BARs it scaled (a caller should say so).
    pub fn open(
        files: &CaptureFiles,
        max_bar: Option<u64>,
    ) -> Result<(Self, Vec<ScaledBar>), ServeError> {
        // A config space or a sysfs `resource` file is small: nothing else
        // (a device, a directory, a large file) is read.
        let read = |p: &Path, max| {
            read_limited(p, max).map_err(|e| match e {
                ReadRefused::Io(source) => ServeError::Read {
                    path: p.to_path_buf(),
                    source,
                },
                other => ServeError::BadFile {
                    path: p.to_path_buf(),
                    why: other.to_string(),
                },
            })
        };
        let config = read(&files.config, CONFIG_MAX)?;
        if config.len() != 256 && config.len() != 4096 {
            return Err(ServeError::ConfigLength {
                path: files.config.clone(),
                len: config.len(),
            });
        }
        let resource = files.resource_path()?;
        let text = String::from_utf8_lossy(&read(&resource, RESOURCE_MAX)?).into_owned();
        let sizes = parse_resource(&text, &resource)?;
        Self::from_parts(config, &sizes, max_bar).map_err(|e| match e {
            ServeError::Bar { index, why } => ServeError::BarIn {
                path: files.config.clone(),
                index,
                why,
            },
            other => other,
        })
    }

    /// A GPU from config bytes (256 or 4096) and BAR sizes per register.
    pub fn from_parts(
        config: Vec<u8>,
        bar_sizes: &[u64],
        max_bar: Option<u64>,
    ) -> Result<(Self, Vec<ScaledBar>), ServeError> {
        if config.len() != 256 && config.len() != 4096 {
            return Err(ServeError::ConfigLength {
                path: PathBuf::from("<config>"),
                len: config.len(),
            });
        }
        let (bars, scaled) = BarLayout::new(&config, bar_sizes, max_bar)?;
        let mut memory = BTreeMap::new();
        for b in bars.bars() {
            let m = BarMemory::new(&format!("vp2p-bar{}", b.index), b.size).map_err(|source| {
                ServeError::Memory {
                    size: b.size,
                    source,
                }
            })?;
            memory.insert(b.index, m);
        }
        let gpu = Self {
            writable: write_mask(&config, &bars),
            irqs: irq_infos(&config),
            config: power_on(&config, &bars),
            captured: config,
            bars,
            memory,
            wired: BTreeMap::new(),
            dma: Vec::new(),
        };
        Ok((gpu, scaled))
    }

    /// The BARs served: kinds from the capture, sizes after any `max-bar` scaling.
    pub fn bars(&self) -> &BarLayout {
        &self.bars
    }

    /// DMA ranges the client mapped and has not unmapped.
    pub fn dma_mappings(&self) -> &[DmaMapping] {
        &self.dma
    }

    /// Interrupt vectors with an eventfd wired to them.
    pub fn wired_irqs(&self) -> usize {
        self.wired.len()
    }

    fn bar_memory(&self, index: RegionIndex) -> io::Result<&BarMemory> {
        match index {
            RegionIndex::Bar(n) => self.memory.get(&n),
            _ => None,
        }
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("region {} has no memory", index.raw()),
            )
        })
    }

    fn config_range(&self, offset: u64, len: usize) -> io::Result<std::ops::Range<usize>> {
        usize::try_from(offset)
            .ok()
            .and_then(|s| Some(s..s.checked_add(len)?))
            .filter(|r| r.end <= self.config.len())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "config access of {len} bytes at {offset:#x} is outside the {}-byte config space",
                        self.config.len()
                    ),
                )
            })
    }
}

impl GpuBackend for CapturedGpu {
    fn config_len(&self) -> u64 {
        self.config.len() as u64
    }

    fn config_read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let r = self.config_range(offset, buf.len())?;
        buf.copy_from_slice(&self.config[r]);
        Ok(())
    }

    fn config_write(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        let r = self.config_range(offset, data.len())?;
        let bar_regs = BAR0_OFFSET..BAR0_OFFSET + 4 * BAR_REGISTERS;
        let mut touched = [false; BAR_REGISTERS];
        for (at, &b) in r.zip(data) {
            if bar_regs.contains(&at) {
                touched[(at - BAR0_OFFSET) / 4] = true;
                self.config[at] = b;
            } else if (ROM_OFFSET..ROM_OFFSET + 4).contains(&at) {
                // No ROM: the register stays 0.
            } else {
                let m = self.writable[at];
                self.config[at] = (self.config[at] & !m) | (b & m);
            }
        }
        for (reg, _) in touched.iter().enumerate().filter(|(_, t)| **t) {
            let o = BAR0_OFFSET + 4 * reg;
            let c = &mut self.config[o..o + 4];
            let v = self
                .bars
                .sanitize(reg, u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
            c.copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    }

    fn region(&self, index: RegionIndex) -> RegionInfo {
        match index {
            RegionIndex::Bar(n) => match self.bars.bar(n) {
                Some(b) => RegionInfo {
                    size: b.size,
                    access: RegionAccess {
                        read: true,
                        write: true,
                        mmap: b.is_memory() && b.size >= 4096,
                    },
                },
                None => RegionInfo::ABSENT,
            },
            RegionIndex::Config => RegionInfo {
                size: self.config_len(),
                access: RegionAccess {
                    read: true,
                    write: true,
                    mmap: false,
                },
            },
            RegionIndex::Rom | RegionIndex::Vga => RegionInfo::ABSENT,
        }
    }

    fn mmap_fd(&self, index: RegionIndex) -> Option<BorrowedFd<'_>> {
        let info = self.region(index);
        if !info.access.mmap {
            return None;
        }
        self.bar_memory(index).ok().map(AsFd::as_fd)
    }

    fn region_read(&self, index: RegionIndex, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.bar_memory(index)?.read(offset, buf)
    }

    fn region_write(&mut self, index: RegionIndex, offset: u64, data: &[u8]) -> io::Result<()> {
        self.bar_memory(index)?.write(offset, data)
    }

    fn irq_info(&self, index: IrqIndex) -> IrqInfo {
        self.irqs[index as usize]
    }

    fn set_irqs(&mut self, set: IrqSet, fds: Vec<File>) -> io::Result<()> {
        let trigger = set.flags & VFIO_IRQ_SET_ACTION_TRIGGER != 0;
        if !trigger {
            return Ok(()); // mask/unmask: nothing fires anyway
        }
        if set.count == 0 && set.flags & VFIO_IRQ_SET_DATA_NONE != 0 {
            self.wired.retain(|(i, _), _| *i != set.index);
            return Ok(());
        }
        if set.flags & VFIO_IRQ_SET_DATA_EVENTFD != 0 {
            let vectors = set.start..set.start.saturating_add(set.count);
            if fds.is_empty() {
                self.wired
                    .retain(|(i, v), _| *i != set.index || !vectors.contains(v));
            } else {
                for (v, fd) in vectors.zip(fds) {
                    self.wired.insert((set.index, v), fd);
                }
            }
        }
        Ok(())
    }

    fn dma_map(&mut self, map: DmaMapping, _fd: Option<File>) -> io::Result<()> {
        self.dma.push(map);
        Ok(())
    }

    fn dma_unmap(&mut self, iova: u64, size: u64, all: bool) -> io::Result<()> {
        let end = iova.saturating_add(size);
        self.dma
            .retain(|m| !(all || (m.iova >= iova && m.iova.saturating_add(m.size) <= end)));
        Ok(())
    }

    fn reset(&mut self) -> io::Result<()> {
        self.config = power_on(&self.captured, &self.bars);
        self.wired.clear();
        Ok(())
    }
}
