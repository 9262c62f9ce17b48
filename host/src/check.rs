//! The facts `p2p-host check` needs beyond the topology: the kernel command
//! line and release, iommufd, KVM's capabilities, IOMMU group domain types and
//! the devices' BARs, and the throughput registers (ATS, Device Control, link
//! capabilities and status) of the devices and the bridges above them. Reads
//! only; on a captured tree only what it holds.

use std::fs;
use std::path::Path;

use kvm_ioctls::{Cap, Kvm};
use p2p_report::AtsEntry;
use p2p_topology::check::{BarFacts, HostFacts, KvmFacts};
use p2p_topology::pci::ConfigSpace;
use p2p_topology::pcie_cost::PcieFacts;
use p2p_topology::{Bdf, Topology};

use crate::sysfs::SysfsRoot;

/// Linux `IORESOURCE_*` flags in sysfs `resource` (include/linux/ioport.h).
const IORESOURCE_MEM: u64 = 0x0000_0200;
const IORESOURCE_PREFETCH: u64 = 0x0000_2000;
const IORESOURCE_MEM_64: u64 = 0x0010_0000;

/// The memory BARs (lines 0..5) of a sysfs `resource` file.
pub fn parse_bars(text: &str) -> Vec<BarFacts> {
    let mut out = Vec::new();
    for (i, line) in text.lines().take(6).enumerate() {
        let f: Vec<u64> = line
            .split_whitespace()
            .filter_map(|w| u64::from_str_radix(w.trim_start_matches("0x"), 16).ok())
            .collect();
        let [start, end, flags] = f[..] else { continue };
        if flags & IORESOURCE_MEM == 0 || end <= start {
            continue;
        }
        out.push(BarFacts {
            index: i as u8,
            size: end - start + 1,
            is_64bit: flags & IORESOURCE_MEM_64 != 0,
            prefetchable: flags & IORESOURCE_PREFETCH != 0,
        });
    }
    out
}

/// The most bytes `check` reads of a kernel command line. Every architecture's
/// `COMMAND_LINE_SIZE` is a few KiB; a file past this is not a command line.
pub const CMDLINE_MAX: u64 = 64 * 1024;

/// Why a kernel command line file was refused.
#[derive(Debug, thiserror::Error)]
pub enum CmdlineFileError {
    /// It could not be opened or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A device, FIFO, socket or directory (`/dev/zero` would never end).
    #[error("{}: not a regular file but {kind}: give a captured /proc/cmdline", path.display())]
    NotRegular {
        /// The file.
        path: std::path::PathBuf,
        /// What it is, in words.
        kind: &'static str,
    },
    /// Longer than [`CMDLINE_MAX`].
    #[error("{}: longer than {CMDLINE_MAX} bytes: not a kernel command line", path.display())]
    TooLong {
        /// The file.
        path: std::path::PathBuf,
    },
    /// Not UTF-8.
    #[error("{}: not text (byte {offset} is not UTF-8)", path.display())]
    NotText {
        /// The file.
        path: std::path::PathBuf,
        /// Offset of the first byte that is not UTF-8.
        offset: usize,
    },
}

/// Reads a kernel command line from `path` (a captured `/proc/cmdline`, or
/// the live one), trimmed: a regular file of at most [`CMDLINE_MAX`] bytes.
/// Opened without blocking, so a FIFO is refused rather than waited on.
pub fn read_cmdline(path: &Path) -> Result<String, CmdlineFileError> {
    use p2p_host_io::{read_limited, ReadRefused};
    // /proc/cmdline says size 0: read_limited bounds what is read, not stat.
    let bytes = read_limited(path, CMDLINE_MAX).map_err(|e| match e {
        ReadRefused::Io(source) => CmdlineFileError::Io {
            path: path.to_path_buf(),
            source,
        },
        ReadRefused::NotAFile(kind) => CmdlineFileError::NotRegular {
            path: path.to_path_buf(),
            kind,
        },
        ReadRefused::TooBig { .. } => CmdlineFileError::TooLong {
            path: path.to_path_buf(),
        },
    })?;
    let text = String::from_utf8(bytes).map_err(|e| CmdlineFileError::NotText {
        path: path.to_path_buf(),
        offset: e.utf8_error().valid_up_to(),
    })?;
    Ok(text.trim().to_string())
}

fn read_trimmed(p: &Path) -> Option<String> {
    fs::read_to_string(p).ok().map(|t| t.trim().to_string())
}

/// KVM's answer: opened, and the capabilities VFIO passthrough needs.
pub fn kvm_facts() -> KvmFacts {
    match Kvm::new() {
        Ok(kvm) => KvmFacts {
            unavailable: None,
            irqfd: kvm.check_extension(Cap::Irqfd),
            ioeventfd: kvm.check_extension(Cap::Ioeventfd),
        },
        Err(e) => KvmFacts {
            unavailable: Some(e.to_string()),
            irqfd: false,
            ioeventfd: false,
        },
    }
}

/// Gathers the facts for `devices`. On the live `/sys` also /proc and /dev.
pub fn host_facts(root: &SysfsRoot, topo: &Topology, devices: &[Bdf]) -> HostFacts {
    let live = root.is_live();
    let mut facts = HostFacts {
        cmdline: live
            .then(|| read_cmdline(Path::new("/proc/cmdline")).ok())
            .flatten(),
        kernel_release: live
            .then(|| read_trimmed(Path::new("/proc/sys/kernel/osrelease")))
            .flatten(),
        iommufd: live.then(|| Path::new("/dev/iommu").exists()),
        kvm: live.then(kvm_facts),
        ..HostFacts::default()
    };
    let mut groups: Vec<p2p_topology::IommuGroup> = devices
        .iter()
        .filter_map(|d| topo.function(*d).and_then(|f| f.iommu_group))
        .collect();
    groups.sort_unstable();
    groups.dedup();
    for g in groups {
        let p = root.path().join(format!("kernel/iommu_groups/{g}/type"));
        if let Some(t) = read_trimmed(&p) {
            facts.group_types.push((g, t));
        }
    }
    let mut on_paths: Vec<Bdf> = devices
        .iter()
        .flat_map(|d| std::iter::once(*d).chain(topo.ancestors(*d)))
        .collect();
    on_paths.sort_unstable();
    on_paths.dedup();
    for d in on_paths {
        let p = root.path().join(format!("bus/pci/devices/{d}/config"));
        if let Ok(raw) = fs::read(&p) {
            if let Some(f) = pcie_facts(d, &raw) {
                facts.pcie.push(f);
            }
        }
    }
    for d in devices {
        let p = root.path().join(format!("bus/pci/devices/{d}/resource"));
        if let Ok(text) = fs::read_to_string(&p) {
            facts.bars.push((*d, parse_bars(&text)));
        }
    }
    facts
}

/// The throughput registers of one function's config bytes (the whole file:
/// 4096 bytes as root, fewer otherwise); None when it is no config space.
/// A malformed capability list leaves the registers behind it unknown.
pub fn pcie_facts(bdf: Bdf, raw: &[u8]) -> Option<PcieFacts> {
    let cfg = ConfigSpace::new(raw).ok()?;
    Some(PcieFacts {
        bdf,
        config_len: raw.len(),
        ats: if cfg.has_extended_space() {
            cfg.ats().ok().flatten()
        } else {
            None
        },
        device_control: cfg.device_control().ok().flatten(),
        link_capabilities: cfg.link_capabilities().ok().flatten(),
        link_status: cfg.link_status().ok().flatten(),
    })
}

/// The ATS state of `bdf` from its config file under `root`, for the topo
/// report: Unknown when the file or its extended space (past 256 bytes, root
/// only) cannot be read, or its extended capability list is malformed.
pub fn ats_entry(root: &SysfsRoot, bdf: Bdf) -> AtsEntry {
    let p = root.path().join(format!("bus/pci/devices/{bdf}/config"));
    let Ok(raw) = extended_capability_walk(&p) else {
        return AtsEntry::Unknown;
    };
    match ConfigSpace::new(&raw) {
        Ok(cfg) if cfg.has_extended_space() => match cfg.ats() {
            Ok(Some(a)) if a.enabled => AtsEntry::Enabled,
            Ok(Some(_)) => AtsEntry::Disabled,
            Ok(None) => AtsEntry::Absent,
            Err(_) => AtsEntry::Unknown,
        },
        _ => AtsEntry::Unknown,
    }
}

/// A 4 KiB image of `config` holding only what the extended-capability walk
/// reads (the vendor id, each capability's header, and the ATS registers),
/// zeros elsewhere; the 64-byte header alone when the function has no
/// extended space. On a live host every config dword read is a kernel trip,
/// and in a VM a trap to the VMM, so reading the whole 4 KiB for one
/// capability costs 1,024 of them where this costs a handful.
fn extended_capability_walk(path: &Path) -> std::io::Result<Vec<u8>> {
    use p2p_topology::pci::{CONFIG_EXTENDED_LEN, CONFIG_LEGACY_LEN};
    use std::os::unix::fs::FileExt;
    let file = fs::File::open(path)?;
    let dword = |off: usize| -> std::io::Result<[u8; 4]> {
        let mut b = [0u8; 4];
        file.read_exact_at(&mut b, off as u64)?;
        Ok(b)
    };
    let mut image = vec![0u8; CONFIG_EXTENDED_LEN];
    image[..4].copy_from_slice(&dword(0)?);
    if (file.metadata()?.len() as usize) < CONFIG_EXTENDED_LEN {
        image.truncate(p2p_topology::pci::CONFIG_HEADER_LEN);
        return Ok(image);
    }
    let mut seen = [false; CONFIG_EXTENDED_LEN / 4];
    let mut at = CONFIG_LEGACY_LEN;
    while at >= CONFIG_LEGACY_LEN && at + 4 <= CONFIG_EXTENDED_LEN && !seen[at / 4] {
        seen[at / 4] = true;
        let header = dword(at)?;
        image[at..at + 4].copy_from_slice(&header);
        let header = u32::from_le_bytes(header);
        if header == 0 || header == u32::MAX {
            break;
        }
        if header & 0xffff == u32::from(p2p_topology::pci::ext_cap_id::ATS)
            && at + 8 <= CONFIG_EXTENDED_LEN
        {
            image[at + 4..at + 8].copy_from_slice(&dword(at + 4)?);
        }
        at = (header >> 20) as usize & !3;
    }
    Ok(image)
}

/// Whether `p2p-host serve --gpu ...,vfio=BDF` can serve `bdf` (the
/// `serve-vfio` finding of `check --serve-vfio`): it is bound to vfio-pci and
/// its IOMMU group is viable by the kernel's rule
/// ([`p2p_topology::iommu_groups::leaves_group_viable`], the DRA driver's too).
pub fn serve_vfio_item(root: &SysfsRoot, bdf: Bdf) -> p2p_topology::check::CheckItem {
    use crate::serve::vfio::GroupMembers;
    use p2p_topology::check::{CheckItem, Verdict};
    let found = GroupMembers::read(root.path(), bdf).and_then(|g| g.check(bdf).map(|()| g));
    let (verdict, evidence, fix) = match found {
        Ok(g) => (
            Verdict::Pass,
            format!(
                "bound to vfio-pci; IOMMU group {} is viable ({} function(s)): serve --gpu socket=PATH,vfio={bdf},clique=N serves it for real",
                g.group,
                g.functions.len()
            ),
            None,
        ),
        Err(e) => (
            Verdict::Fail,
            e.to_string(),
            Some(format!(
                "echo vfio-pci > /sys/bus/pci/devices/{bdf}/driver_override and bind it (and every other function of its IOMMU group) to vfio-pci"
            )),
        ),
    };
    CheckItem {
        scope: bdf.to_string(),
        check: "serve-vfio".into(),
        verdict,
        evidence,
        fix,
        input: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_from_the_h200_resource_file() {
        // The H200 of the passthrough fixture: BAR0 16 MiB, BAR2 256 GiB and
        // BAR4 32 MiB, 64-bit prefetchable (flags 0x14220c), as lspci shows it.
        let text = "0x0000000081000000 0x0000000081ffffff 0x000000000014220c\n\
                    0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
                    0x0000004000000000 0x0000007fffffffff 0x000000000014220c\n\
                    0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
                    0x0000008000000000 0x0000008001ffffff 0x000000000014220c\n\
                    0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
                    0x0000000000000000 0x0000000000000000 0x0000000000000000\n";
        let bars = parse_bars(text);
        assert_eq!(bars.len(), 3);
        assert_eq!((bars[1].index, bars[1].size), (2, 256 << 30));
        assert!(bars.iter().all(|b| b.is_64bit && b.prefetchable));
        // The QEMU NVMe's BAR0: 16 KiB, 64-bit, not prefetchable (0x140204).
        let nvme = parse_bars("0x00000000fce00000 0x00000000fce03fff 0x0000000000140204\n");
        assert_eq!(
            (nvme[0].size, nvme[0].is_64bit, nvme[0].prefetchable),
            (16 << 10, true, false)
        );
    }
}
