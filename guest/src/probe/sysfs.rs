//! Reads the NVIDIA GPUs' config spaces from the guest's sysfs and finds the
//! P2P clique capability in each, or says why there is none.

use std::fs;
use std::path::{Path, PathBuf};

use p2p_topology::capability::{BtsCapability, P2pCapability, P2P_CAP_LEN, VENDOR_SPECIFIC_ID};
use p2p_topology::hex::{self, HexError, HexWidth};
use p2p_topology::pci::{ConfigSpace, CONFIG_LEGACY_LEN};
use p2p_topology::select::NVIDIA_VENDOR;
use p2p_topology::Bdf;
use serde::{Deserialize, Serialize};

pub use p2p_report::probe::{BtsState, CapabilityState};

/// Why the guest's sysfs could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// A sysfs file or directory could not be read.
    #[error("{path}: {why}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        why: String,
    },
    /// A sysfs id file (`vendor`, `class`, `device`) does not hold a hex
    /// number of its width.
    #[error("{path}: {why}")]
    Hex {
        /// The file.
        path: PathBuf,
        /// What it held, and the width it should fit (in the message, not
        /// its source: the message is printed once).
        why: HexError,
    },
}

/// One NVIDIA GPU as the guest's PCI bus shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GuestGpu {
    /// The GPU's PCI address in the guest.
    pub bdf: Bdf,
    /// PCI vendor id (0x10de).
    pub vendor: u16,
    /// PCI device id (0x2335 for the H200).
    pub device: u16,
    /// PCI class code from sysfs (0x030000 VGA, 0x030200 3D controller).
    pub class: u32,
    /// Bytes the sysfs `config` read returned: 64 for non-root readers, up
    /// to 4096 as root.
    pub config_len: usize,
    /// What its config space says about the P2P clique capability.
    pub capability: CapabilityState,
    /// The driver's BTS capability (driver 580.65+), when the hypervisor added one.
    pub bts: Option<BtsState>,
    /// The throughput registers as the guest sees them; None without a
    /// PCI Express capability or when the read stopped short of it.
    #[serde(default)]
    pub pcie: Option<super::pcie::GuestPcie>,
}

/// Finds and decodes the BTS capability in raw config bytes.
pub fn bts_state(raw: &[u8]) -> Option<BtsState> {
    let cs = ConfigSpace::new(raw).ok()?;
    let caps = cs.capabilities().ok()?;
    caps.iter()
        .filter(|c| c.id == VENDOR_SPECIFIC_ID)
        .find_map(|c| {
            let bytes = raw.get(usize::from(c.offset)..)?;
            let b = BtsCapability::decode(bytes).ok()?;
            Some(BtsState {
                offset: c.offset,
                egress_poison: b.egress_poison,
                upper: b.upper,
            })
        })
}

/// Finds the P2P capability in raw config bytes.
pub fn capability_state(raw: &[u8]) -> CapabilityState {
    let cs = match ConfigSpace::new(raw) {
        Ok(cs) => cs,
        Err(e) => return CapabilityState::Unreadable { why: e.to_string() },
    };
    if raw.len() < CONFIG_LEGACY_LEN {
        return CapabilityState::Unreadable {
            why: format!(
                "config read returned {} bytes: the kernel gives non-root readers only the header; run as root",
                raw.len()
            ),
        };
    }
    let caps = match cs.capabilities() {
        Ok(c) => c,
        Err(e) => {
            return CapabilityState::Unreadable {
                why: format!("capability list: {e}"),
            }
        }
    };
    let mut suspect = None;
    for cap in caps.iter().filter(|c| c.id == VENDOR_SPECIFIC_ID) {
        let bytes = &raw[cap.offset as usize..cap.end().min(raw.len())];
        if P2pCapability::has_signature(bytes) {
            return match P2pCapability::decode(bytes) {
                Ok(p) => CapabilityState::Present {
                    offset: cap.offset,
                    clique: p.clique,
                },
                Err(e) => CapabilityState::Invalid {
                    offset: cap.offset,
                    why: e.to_string(),
                },
            };
        }
        // An 8-byte vendor capability on an NVIDIA GPU is where the P2P one
        // would be; without the signature the driver ignores it.
        if cap.len == u16::from(P2P_CAP_LEN) && suspect.is_none() {
            suspect = Some(cap.offset);
        }
    }
    match suspect {
        Some(offset) => CapabilityState::Invalid {
            offset,
            why: format!(
                "8-byte vendor-specific capability without the 'P2P' signature ({:02x?})",
                &raw[offset as usize + 3..offset as usize + 6]
            ),
        },
        None => CapabilityState::Absent,
    }
}

/// Reads a sysfs id file of width `T` ([`hex::parse`]).
fn read_hex<T: HexWidth>(path: &Path) -> Result<T, ProbeError> {
    let text = fs::read_to_string(path).map_err(|e| ProbeError::Io {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    hex::parse(&text).map_err(|why| ProbeError::Hex {
        path: path.to_path_buf(),
        why,
    })
}

/// The directory holding `bus/pci/devices`: `root` itself, or `root/sysfs`
/// (the layout of captured trees).
pub fn resolve_root(root: &Path) -> PathBuf {
    let nested = root.join("sysfs");
    if !root.join("bus/pci/devices").is_dir() && nested.join("bus/pci/devices").is_dir() {
        nested
    } else {
        root.to_path_buf()
    }
}

/// Every NVIDIA display-class function under `root/bus/pci/devices`, by address.
pub fn scan_gpus(root: &Path) -> Result<Vec<GuestGpu>, ProbeError> {
    scan_gpus_of_class(root, None)
}

/// [`scan_gpus`], or with `class` the NVIDIA functions of that class (stand-ins
/// whose vendor id the VMM overrode, in tests under QEMU).
pub fn scan_gpus_of_class(
    root: &Path,
    class_prefix: Option<p2p_topology::select::ClassPrefix>,
) -> Result<Vec<GuestGpu>, ProbeError> {
    let dir = resolve_root(root).join("bus/pci/devices");
    let entries = fs::read_dir(&dir).map_err(|e| ProbeError::Io {
        path: dir.clone(),
        why: e.to_string(),
    })?;
    let mut gpus = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| ProbeError::Io {
            path: dir.clone(),
            why: e.to_string(),
        })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(bdf) = name.parse::<Bdf>() else {
            continue;
        };
        let path = entry.path();
        let vendor: u16 = read_hex(&path.join("vendor"))?;
        let class: u32 = read_hex(&path.join("class"))?;
        let gpu_class = match class_prefix {
            Some(p) => p.matches(class),
            None => class >> 16 == 0x03,
        };
        if vendor != NVIDIA_VENDOR || !gpu_class {
            continue;
        }
        let device = read_hex(&path.join("device"))?;
        let cfg_path = path.join("config");
        let raw = fs::read(&cfg_path).map_err(|e| ProbeError::Io {
            path: cfg_path.clone(),
            why: e.to_string(),
        })?;
        gpus.push(GuestGpu {
            bdf,
            vendor,
            device,
            class,
            config_len: raw.len(),
            capability: capability_state(&raw),
            bts: bts_state(&raw),
            pcie: super::pcie::pcie_view(&raw),
        });
    }
    gpus.sort_by_key(|g| g.bdf);
    Ok(gpus)
}

#[cfg(test)]
mod tests {
    use super::*;
    use p2p_topology::Clique;

    fn config_with_vendor_cap(cap: [u8; 8]) -> Vec<u8> {
        let mut b = vec![0u8; 256];
        b[0..2].copy_from_slice(&0x10deu16.to_le_bytes());
        b[6] = 0x10;
        b[0x34] = 0x40;
        b[0x40] = 0x01; // PM, next 0xc8
        b[0x41] = 0xc8;
        b[0xc8..0xd0].copy_from_slice(&cap);
        b
    }

    #[test]
    fn finds_and_rejects_like_the_driver() {
        let good = P2pCapability::new(Clique::new(3).unwrap(), 0).encode();
        assert_eq!(
            capability_state(&config_with_vendor_cap(good)),
            CapabilityState::Present {
                offset: 0xc8,
                clique: Clique::new(3).unwrap()
            }
        );
        let mut v1 = good;
        v1[6] |= 1;
        assert!(matches!(
            capability_state(&config_with_vendor_cap(v1)),
            CapabilityState::Invalid { offset: 0xc8, why } if why.contains("version 1")
        ));
        let mut sig = good;
        sig[5] = b'X';
        assert!(matches!(
            capability_state(&config_with_vendor_cap(sig)),
            CapabilityState::Invalid { offset: 0xc8, why } if why.contains("without the 'P2P' signature")
        ));
        let raw = config_with_vendor_cap(good);
        assert!(
            matches!(capability_state(&raw[..64]), CapabilityState::Unreadable { why } if why.contains("64 bytes"))
        );
        assert_eq!(bts_state(&raw), None);
    }

    #[test]
    fn bts_is_decoded_beside_the_p2p_capability() {
        // P2P at 0xc8 linked to BTS at 0xd4 with egress poison on.
        let mut raw =
            config_with_vendor_cap(P2pCapability::new(Clique::new(2).unwrap(), 0xd4).encode());
        raw[0xd4..0xdc].copy_from_slice(&[0x09, 0x00, 0x08, b'B', b'T', b'S', 0x01, 0x00]);
        assert_eq!(
            bts_state(&raw),
            Some(BtsState {
                offset: 0xd4,
                egress_poison: true,
                upper: 1
            })
        );
        assert!(matches!(
            capability_state(&raw),
            CapabilityState::Present { offset: 0xc8, .. }
        ));
    }

    /// A function with NVIDIA's vendor id and NVMe's class (a stand-in whose
    /// vendor id QEMU overrode) is no GPU by default, one with --gpu-class.
    #[test]
    fn a_class_prefix_takes_stand_ins_as_gpus() {
        let root = std::env::temp_dir().join(format!("vp2p-probe-class-{}", std::process::id()));
        let f = root.join("bus/pci/devices/0000:00:10.0");
        fs::create_dir_all(&f).unwrap();
        fs::write(f.join("vendor"), "0x10de\n").unwrap();
        fs::write(f.join("device"), "0x1111\n").unwrap();
        fs::write(f.join("class"), "0x010802\n").unwrap();
        let good = P2pCapability::new(Clique::new(1).unwrap(), 0).encode();
        fs::write(f.join("config"), config_with_vendor_cap(good)).unwrap();
        assert!(scan_gpus(&root).unwrap().is_empty());
        let nvme = "010802".parse().unwrap();
        let found = scan_gpus_of_class(&root, Some(nvme)).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].bdf.to_string(), "0000:00:10.0");
        let other = "0302".parse().unwrap();
        assert!(scan_gpus_of_class(&root, Some(other)).unwrap().is_empty());
        fs::remove_dir_all(&root).unwrap();
    }
}
