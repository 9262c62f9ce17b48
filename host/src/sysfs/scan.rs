//! The scan: `bus/pci/devices` links, followed to their real paths, give every
//! function's host bridge and upstream bridges; attributes and config space
//! give ids, port types, ACS, IOMMU groups, NUMA and links.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Component, Path, PathBuf};

use p2p_topology::pci::{ConfigSpace, PciePortType, CONFIG_EXTENDED_LEN, CONFIG_LEGACY_LEN};
use p2p_topology::topology::{AcsState, HostBridge, LinkInfo, NumaNode, PciFunction, Topology};
use p2p_topology::Bdf;

use super::attrs;
use super::resolve::Resolver;

/// Why a tree could not be scanned. Every variant names the offending path.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    /// Neither the directory nor its `sysfs/` holds `bus/pci/devices`.
    #[error("{path}: not a sysfs tree (no bus/pci/devices below it)")]
    NotSysfs {
        /// The directory given.
        path: PathBuf,
    },
    /// A directory (the root, or `bus/pci/devices`) cannot be resolved or listed.
    #[error("{path}: cannot list: {why}")]
    List {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        why: String,
    },
    /// A `bus/pci/devices` link does not resolve: the capture lacks its device directory.
    #[error("{path}: dangling link (points to {target}, which is not in the tree)")]
    DanglingLink {
        /// The link.
        path: PathBuf,
        /// Where it points, as read (or why it could not be read).
        target: String,
    },
    /// A `bus/pci/devices` link resolves to a directory outside the root.
    #[error("{path}: resolves to {real}, outside the tree {root}")]
    OutsideTree {
        /// The link.
        path: PathBuf,
        /// Where it resolves.
        real: PathBuf,
        /// The tree's canonical root.
        root: PathBuf,
    },
    /// A device's resolved path has no `pciDDDD:BB` host bridge directory.
    #[error("{path}: no PCI host bridge (pciDDDD:BB) on the device's path")]
    NoHostBridge {
        /// The `bus/pci/devices` link.
        path: PathBuf,
    },
    /// A directory below the host bridge on a device's path, or the link's own name,
    /// is not a PCI address (DDDD:BB:DD.F).
    #[error("{path}: '{name}' is not a PCI address")]
    BadName {
        /// The resolved directory, or the link.
        path: PathBuf,
        /// The path component that does not parse.
        name: String,
    },
    /// A function's sysfs attribute or link (vendor, class, config, numa_node,
    /// iommu_group, ...) cannot be read or does not parse.
    #[error("{path}: {why}")]
    Attribute {
        /// The attribute file or link.
        path: PathBuf,
        /// The I/O error, or what the text is not.
        why: String,
    },
    /// The `config` file holds fewer than the 64 bytes of the header.
    #[error("{path}: config space has {len} bytes, fewer than the 64-byte header")]
    TruncatedConfig {
        /// The `config` file.
        path: PathBuf,
        /// Bytes it holds.
        len: usize,
    },
    /// The `config` file reads all ones: the function does not answer (gone, or powered
    /// down).
    #[error("{path}: config space reads all ones: the function does not answer")]
    DeadFunction {
        /// The `config` file.
        path: PathBuf,
    },
}

/// A sysfs tree to scan: the live `/sys` or a captured copy.
#[derive(Debug, Clone)]
pub struct SysfsRoot {
    path: PathBuf,
}

impl SysfsRoot {
    /// Accepts the directory holding `bus/` and `devices/`, or one holding a
    /// `sysfs/` directory that does (the layout of captured fixtures).
    pub fn new(path: impl AsRef<Path>) -> Result<Self, ScanError> {
        let path = path.as_ref();
        for candidate in [path.to_path_buf(), path.join("sysfs")] {
            if candidate.join("bus/pci/devices").is_dir() {
                let path = fs::canonicalize(&candidate).map_err(|e| ScanError::List {
                    path: candidate.clone(),
                    why: e.to_string(),
                })?;
                return Ok(Self { path });
            }
        }
        Err(ScanError::NotSysfs {
            path: path.to_path_buf(),
        })
    }

    /// The tree's canonical root: the directory holding `bus/` and `devices/`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True for the running kernel's own `/sys`, where NVML describes the same machine.
    pub fn is_live(&self) -> bool {
        self.path == Path::new("/sys")
    }
}

/// A function found under `bus/pci/devices`, before its attributes are read.
struct Located {
    bdf: Bdf,
    dir: PathBuf,
    host_bridge: String,
    parent: Option<Bdf>,
}

/// Scans every PCI function of the tree into a [`Topology`].
///
/// The functions are located and read on a few threads when there are many
/// (each function costs a few dozen file reads); the result and the error
/// reported, the first in `bus/pci/devices` order, are those of a serial scan.
pub fn scan(root: &SysfsRoot) -> Result<Topology, ScanError> {
    let devices = root.path.join("bus/pci/devices");
    let entries = fs::read_dir(&devices).map_err(|e| ScanError::List {
        path: devices.clone(),
        why: e.to_string(),
    })?;
    let mut links = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| ScanError::List {
            path: devices.clone(),
            why: e.to_string(),
        })?;
        links.push(entry.path());
    }
    let located = in_parallel(&links, Resolver::default, |resolver, link| {
        locate(root, resolver, link)
    })
    .into_iter()
    .collect::<Result<Vec<_>, _>>()?;
    let functions = in_parallel(&located, || (), |(), loc| read_function(loc))
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;

    let mut topo = Topology::default();
    let mut bridges: BTreeMap<String, HostBridge> = BTreeMap::new();
    let mut truncated = Vec::new();
    for (loc, f) in located.iter().zip(functions) {
        if f.config_len < p2p_topology::pci::CONFIG_LEGACY_LEN {
            truncated.push(f.bdf);
        }
        let hb = bridges
            .entry(loc.host_bridge.clone())
            .or_insert_with(|| host_bridge(&loc.host_bridge));
        if hb.numa_node.is_none() {
            hb.numa_node = f.numa_node;
        }
        topo.functions.push(f);
    }
    topo.host_bridges = bridges.into_values().collect();
    topo.numa_nodes = numa_nodes(root)?;
    topo.sort();

    if !truncated.is_empty() {
        let inferred = match infer_port_types(&mut topo) {
            0 => String::new(),
            n => format!("; {n} bridge port type(s) inferred from the tree shape"),
        };
        topo.notes.push(format!(
            "config space of {} function(s) read as {} bytes, the header only (the kernel gives \
             non-root readers 64 bytes): ACS and PCIe port types are unknown for them{inferred}; \
             run as root for the rest",
            truncated.len(),
            topo.function(truncated[0]).map_or(0, |f| f.config_len),
        ));
    }
    Ok(topo)
}

/// Functions per thread below which a thread is not worth starting.
const PER_THREAD: usize = 32;
/// Threads at most: beyond this the kernel's path lookups contend.
const MAX_THREADS: usize = 8;

/// `f` applied to every item, in order, on up to [`MAX_THREADS`] threads, each
/// with its own `state`.
fn in_parallel<T: Sync, S, R: Send>(
    items: &[T],
    state: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, &T) -> R + Sync,
) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_THREADS)
        .min(items.len().div_ceil(PER_THREAD))
        .max(1);
    if threads == 1 {
        let mut s = state();
        return items.iter().map(|t| f(&mut s, t)).collect();
    }
    let chunk = items.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| {
                let (state, f) = (&state, &f);
                scope.spawn(move || {
                    let mut s = state();
                    part.iter().map(|t| f(&mut s, t)).collect::<Vec<R>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// Follows a `bus/pci/devices` link to its real directory and reads the path.
fn locate(root: &SysfsRoot, resolver: &mut Resolver, link: &Path) -> Result<Located, ScanError> {
    let real = resolver
        .canonicalize(link)
        .map_err(|_| ScanError::DanglingLink {
            path: link.to_path_buf(),
            target: fs::read_link(link)
                .map(|t| t.display().to_string())
                .unwrap_or_else(|e| format!("<unreadable: {e}>")),
        })?;
    let rel = real
        .strip_prefix(&root.path)
        .map_err(|_| ScanError::OutsideTree {
            path: link.to_path_buf(),
            real: real.clone(),
            root: root.path.clone(),
        })?;
    let names: Vec<String> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    let hb_index = names
        .iter()
        .rposition(|n| is_host_bridge_name(n))
        .ok_or_else(|| ScanError::NoHostBridge {
            path: link.to_path_buf(),
        })?;
    let mut chain = Vec::new();
    for name in &names[hb_index + 1..] {
        let bdf: Bdf = name.parse().map_err(|_| ScanError::BadName {
            path: real.clone(),
            name: name.clone(),
        })?;
        chain.push(bdf);
    }
    let link_name = link
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let bdf = match chain.last() {
        Some(b) if b.to_string() == link_name || link_name.parse::<Bdf>().ok() == Some(*b) => *b,
        _ => {
            return Err(ScanError::BadName {
                path: link.to_path_buf(),
                name: link_name,
            })
        }
    };
    Ok(Located {
        bdf,
        dir: real,
        host_bridge: names[hb_index].clone(),
        parent: chain.len().checked_sub(2).map(|i| chain[i]),
    })
}

/// `pci0000:00`, `pci10000:e0`: the name sysfs gives a host bridge.
fn is_host_bridge_name(n: &str) -> bool {
    let Some(rest) = n.strip_prefix("pci") else {
        return false;
    };
    let Some((dom, bus)) = rest.split_once(':') else {
        return false;
    };
    dom.len() >= 4
        && bus.len() == 2
        && dom.chars().all(|c| c.is_ascii_hexdigit())
        && bus.chars().all(|c| c.is_ascii_hexdigit())
}

fn host_bridge(name: &str) -> HostBridge {
    let (dom, bus) = name[3..].split_once(':').unwrap_or(("0", "0"));
    HostBridge {
        name: name.to_string(),
        domain: u32::from_str_radix(dom, 16).unwrap_or(0),
        bus: u8::from_str_radix(bus, 16).unwrap_or(0),
        numa_node: None,
    }
}

fn read_function(loc: &Located) -> Result<PciFunction, ScanError> {
    let dir = &loc.dir;
    let vendor = attrs::required_hex(dir, "vendor")?;
    let device = attrs::required_hex(dir, "device")?;
    let class = attrs::required_hex(dir, "class")?;
    // The first 256 bytes for everyone; the 4 KiB extended space (ACS) only
    // for bridges: reading it costs a kernel trip per dword on a live host.
    let mut raw = attrs::config(dir, CONFIG_LEGACY_LEN)?;
    let bridge_header = raw.get(0x0e).is_some_and(|h| h & 0x7f == 1);
    if bridge_header && raw.len() == CONFIG_LEGACY_LEN {
        raw = attrs::config(dir, CONFIG_EXTENDED_LEN)?;
    }
    let cfg = ConfigSpace::new(&raw).map_err(|e| match e {
        p2p_topology::pci::ConfigError::ShorterThanHeader(len) => ScanError::TruncatedConfig {
            path: dir.join("config"),
            len,
        },
        p2p_topology::pci::ConfigError::NoFunction => ScanError::DeadFunction {
            path: dir.join("config"),
        },
    })?;
    let (pcie_port_type, acs) = port_and_acs(&cfg, dir);
    let width = |name: &str| -> Result<Option<u8>, ScanError> {
        Ok(attrs::optional(dir, name)?.and_then(|t| t.parse().ok()))
    };
    let rdma_devices = attrs::child_names(dir, "infiniband");
    let mut interfaces = attrs::child_names(dir, "net");
    interfaces.extend(rdma_devices.iter().cloned());
    Ok(PciFunction {
        bdf: loc.bdf,
        vendor,
        device,
        subsystem_vendor: attrs::optional_hex(dir, "subsystem_vendor")?,
        subsystem_device: attrs::optional_hex(dir, "subsystem_device")?,
        class,
        is_bridge: cfg.header_type() == 1,
        host_bridge: loc.host_bridge.clone(),
        parent: loc.parent,
        pcie_port_type,
        acs,
        iommu_group: attrs::link_name(dir, "iommu_group")?.and_then(|g| g.parse().ok()),
        numa_node: attrs::numa_node(dir)?,
        cpu_affinity: attrs::optional(dir, "local_cpulist")?,
        driver: attrs::link_name(dir, "driver")?,
        link: LinkInfo {
            current_speed: attrs::optional(dir, "current_link_speed")?,
            current_width: width("current_link_width")?,
            max_speed: attrs::optional(dir, "max_link_speed")?,
            max_width: width("max_link_width")?,
        },
        config_len: raw.len(),
        interfaces,
        rdma_devices,
    })
}

/// Port type and ACS from config space, saying why when they cannot be read.
fn port_and_acs(cfg: &ConfigSpace<'_>, dir: &Path) -> (Option<PciePortType>, AcsState) {
    if cfg.is_truncated() {
        let why = format!(
            "{}: config read returned {} bytes (not root?)",
            dir.join("config").display(),
            cfg.len()
        );
        return (None, AcsState::Unknown { why });
    }
    let port = match cfg.pcie_port_type() {
        Ok(p) => p,
        Err(e) => {
            let why = format!("{}: capability list: {e}", dir.join("config").display());
            return (None, AcsState::Unknown { why });
        }
    };
    if !cfg.has_extended_space() {
        let acs = if cfg.header_type() != 1 && cfg.len() == CONFIG_LEGACY_LEN {
            AcsState::NotRead // endpoints: only the first 256 bytes are read
        } else if port.is_some() {
            AcsState::Unknown {
                why: format!(
                    "{}: only {} bytes readable; ACS lives in the extended space",
                    dir.join("config").display(),
                    cfg.len()
                ),
            }
        } else {
            AcsState::Absent // conventional PCI has no extended space
        };
        return (port, acs);
    }
    let acs = match cfg.acs() {
        Ok(Some(a)) => AcsState::Present(a),
        Ok(None) => AcsState::Absent,
        Err(e) => AcsState::Unknown {
            why: format!(
                "{}: extended capability list: {e}",
                dir.join("config").display()
            ),
        },
    };
    (port, acs)
}

/// Gives bridges whose config could not be read the port type their place in
/// the tree implies: on the host bridge a root port, below a root port or a
/// downstream port an upstream port, below an upstream port a downstream port.
fn infer_port_types(topo: &mut Topology) -> usize {
    let mut order: Vec<(usize, usize)> = topo
        .functions
        .iter()
        .enumerate()
        .filter(|(_, f)| f.is_bridge && f.pcie_port_type.is_none() && f.config_len < 256)
        .map(|(i, f)| (topo.ancestors(f.bdf).len(), i))
        .collect();
    order.sort();
    let mut count = 0;
    for (_, i) in order {
        let parent_type = topo.functions[i]
            .parent
            .map(|p| topo.function(p).and_then(|f| f.pcie_port_type));
        let inferred = match parent_type {
            None => Some(PciePortType::RootPort),
            Some(Some(PciePortType::RootPort | PciePortType::SwitchDownstream)) => {
                Some(PciePortType::SwitchUpstream)
            }
            Some(Some(PciePortType::SwitchUpstream)) => Some(PciePortType::SwitchDownstream),
            Some(_) => None,
        };
        if inferred.is_some() {
            topo.functions[i].pcie_port_type = inferred;
            count += 1;
        }
    }
    count
}

/// NUMA nodes and their CPUs from `devices/system/node`, when the tree has them.
fn numa_nodes(root: &SysfsRoot) -> Result<Vec<NumaNode>, ScanError> {
    let dir = root.path.join("devices/system/node");
    let Ok(entries) = fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut nodes = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(id) = name.strip_prefix("node").and_then(|n| n.parse().ok()) else {
            continue;
        };
        if let Some(cpulist) = attrs::optional(&e.path(), "cpulist")? {
            nodes.push(NumaNode { id, cpulist });
        }
    }
    nodes.sort_by_key(|n| n.id);
    Ok(nodes)
}
