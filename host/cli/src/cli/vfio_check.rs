//! `p2p-host vfio-check`: what a container (or a VM's launcher) was given, as
//! it sees it: every VFIO group under /dev/vfio opened through a type-1
//! container, each member function's config space read through its device
//! fd (ids, class, vp2p's P2P capability where an overlay put one), and the
//! KEP-5304 device metadata a DRA driver mounted. Reads only.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::Args;
use p2p_host::serve::vfio::{driver_of, VfioGpu};
use p2p_host::serve::GpuBackend;
use p2p_topology::pci::ConfigSpace;
use p2p_topology::{Bdf, IommuGroup, P2pCapability};
use serde::Serialize;

/// Where a DRA driver's KEP-5304 device metadata appears in a container.
const METADATA_ROOT: &str = "/var/run/kubernetes.io/dra-device-attributes";
/// PCI's vendor-specific capability id.
const VENDOR_SPECIFIC: u8 = 0x09;

#[derive(Debug, Args)]
pub struct VfioCheckArgs {
    /// The VFIO character devices' directory (`/dev/vfio/<group>`).
    #[arg(long, value_name = "DIR", default_value = "/dev/vfio")]
    vfio_dir: PathBuf,
    /// sysfs, for each group's member functions.
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    sysfs_root: PathBuf,
    /// Where the device metadata files are looked for.
    #[arg(long, value_name = "DIR", default_value = METADATA_ROOT)]
    metadata_dir: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// One function opened through its group.
#[derive(Debug, Serialize)]
struct Function {
    group: IommuGroup,
    bdf: String,
    vendor: String,
    device: String,
    class: String,
    /// The clique of vp2p's P2P capability in the config space, if any.
    p2p_clique: Option<u8>,
}

/// One KEP-5304 metadata file.
#[derive(Debug, Serialize)]
struct Metadata {
    path: String,
    document: serde_json::Value,
}

#[derive(Debug, Serialize)]
struct Report {
    functions: Vec<Function>,
    metadata: Vec<Metadata>,
}

pub fn run(a: VfioCheckArgs) -> anyhow::Result<()> {
    let groups = groups(&a.vfio_dir)?;
    if groups.is_empty() {
        bail!(
            "{}: no VFIO group here (was a device allocated to this container?)",
            a.vfio_dir.display()
        );
    }
    let mut functions = Vec::new();
    for group in groups {
        // A group may hold bridges too (a switch's port without ACS), which
        // stay on pcieport: only vfio-pci's functions have a device fd.
        for bdf in members(&a.sysfs_root, group)? {
            let function = a.sysfs_root.join(format!("bus/pci/devices/{bdf}"));
            if driver_of(&function).as_deref() == Some("vfio-pci") {
                functions.push(open(&a.vfio_dir, group, bdf)?);
            }
        }
    }
    let report = Report {
        functions,
        metadata: metadata(&a.metadata_dir)?,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", text(&report));
    }
    Ok(())
}

/// The groups under `dir`: the entries named by a number (`vfio` is the container).
fn groups(dir: &Path) -> anyhow::Result<Vec<IommuGroup>> {
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    let mut groups: Vec<IommuGroup> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    groups.sort();
    Ok(groups)
}

fn members(sysfs: &Path, group: IommuGroup) -> anyhow::Result<Vec<Bdf>> {
    let dir = sysfs.join(format!("kernel/iommu_groups/{group}/devices"));
    let entries = std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?;
    let mut bdfs = Vec::new();
    for e in entries {
        let name = e?.file_name();
        let name = name.to_string_lossy();
        bdfs.push(
            name.parse::<Bdf>()
                .map_err(|e| anyhow::anyhow!("{}: {name}: {e}", dir.display()))?,
        );
    }
    bdfs.sort();
    Ok(bdfs)
}

/// Opens `bdf` through its group and reads its config space through the
/// device fd; the group is closed again before the next function opens it.
fn open(vfio_dir: &Path, group: IommuGroup, bdf: Bdf) -> anyhow::Result<Function> {
    let gpu = VfioGpu::open_group(bdf, group, vfio_dir)
        .with_context(|| format!("opening {bdf} through {}/{group}", vfio_dir.display()))?;
    let mut bytes = vec![0u8; 256];
    gpu.config_read(0, &mut bytes)
        .with_context(|| format!("{bdf}: reading config space through the device fd"))?;
    let config = ConfigSpace::new(&bytes).map_err(|e| anyhow::anyhow!("{bdf}: {e}"))?;
    let p2p_clique = config
        .capabilities()
        .map_err(|e| anyhow::anyhow!("{bdf}: {e}"))?
        .into_iter()
        .filter(|c| c.id == VENDOR_SPECIFIC)
        .find_map(|c| P2pCapability::decode(&bytes[c.offset as usize..]).ok())
        .map(|cap| cap.clique.id());
    Ok(Function {
        group,
        bdf: bdf.to_string(),
        vendor: format!("{:04x}", config.vendor_id()),
        device: format!("{:04x}", config.device_id()),
        class: format!("{:06x}", config.class_code()),
        p2p_clique,
    })
}

/// Every `*-metadata.json` below `root`, parsed; none when `root` is absent.
fn metadata(root: &Path) -> anyhow::Result<Vec<Metadata>> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries {
            let path = e?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.to_string_lossy().ends_with("-metadata.json") {
                let text =
                    std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
                let document = serde_json::from_slice(&text)
                    .with_context(|| format!("{}: not JSON", path.display()))?;
                found.push(Metadata {
                    path: path.display().to_string(),
                    document,
                });
            }
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

fn text(r: &Report) -> String {
    let mut out = format!(
        "{:<6} {:<13} {:<6} {:<6} {:<7} {}\n",
        "GROUP", "FUNCTION", "VENDOR", "DEVICE", "CLASS", "P2P CLIQUE"
    );
    for f in &r.functions {
        let clique = f.p2p_clique.map_or("-".to_string(), |c| c.to_string());
        out += &format!(
            "{:<6} {:<13} {:<6} {:<6} {:<7} {clique}\n",
            f.group.to_string(),
            f.bdf,
            f.vendor,
            f.device,
            f.class
        );
    }
    if r.metadata.is_empty() {
        out += "no device metadata\n";
    }
    for m in &r.metadata {
        out += &format!("metadata {}\n", m.path);
    }
    out
}
