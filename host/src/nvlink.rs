//! NVLink discovery: NVML when the NVIDIA driver is loaded, else NVSwitch
//! functions on the bus, else a map the operator gives. An operator's map,
//! when given, wins: it is the only source on a vfio-pci host without NVSwitch
//! functions in view.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use std::ffi::OsStr;

use nvml_wrapper::enum_wrappers::device::{P2pCapabilitiesIndex, P2pStatus};
use nvml_wrapper::Nvml;
use p2p_topology::select::{Role, NVIDIA_VENDOR};
use p2p_topology::topology::{NvLink, NvLinkSource, Topology};
use p2p_topology::{Bdf, GpuSelector};
use serde::Deserialize;

/// Why an NVLink map could not be used.
#[derive(Debug, thiserror::Error)]
pub enum NvLinkError {
    /// The operator's map (`--nvlink FILE`) cannot be read, is not JSON of the expected
    /// shape, or names a link wrongly (not a GPU of the tree, to itself, twice, count 0).
    #[error("{path}: {why}")]
    Map {
        /// The map file.
        path: PathBuf,
        /// What is wrong, with the `links[i]` entry at fault when there is one.
        why: String,
    },
}

/// Where to look for NVLinks.
#[derive(Debug, Clone, Default)]
pub struct NvLinkOptions {
    /// An operator's map (`--nvlink FILE`).
    pub map: Option<PathBuf>,
    /// Ask NVML; only meaningful when the tree is the live `/sys`.
    pub use_nvml: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MapFile {
    links: Vec<MapLink>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MapLink {
    a: String,
    b: String,
    count: u32,
}

/// Fills `topo.nvlinks` and `topo.nvlink_source` for the GPUs `selector` picks.
pub fn discover(
    topo: &mut Topology,
    selector: &GpuSelector,
    opts: &NvLinkOptions,
) -> Result<(), NvLinkError> {
    discover_with(topo, selector, opts, None).map(|_| ())
}

/// [`discover`] with NVML perhaps already opened (`nvml`: the result of
/// [`open_nvml`], started by the caller while it scanned), returning how
/// long NVML took phase by phase.
pub fn discover_with(
    topo: &mut Topology,
    selector: &GpuSelector,
    opts: &NvLinkOptions,
    nvml: Option<(Result<Nvml, NvmlError>, Duration)>,
) -> Result<NvmlTimings, NvLinkError> {
    let mut timings = NvmlTimings::default();
    let gpus: Vec<Bdf> = topo
        .functions
        .iter()
        .filter(|f| selector.role(f) == Role::Gpu)
        .map(|f| f.bdf)
        .collect();
    if let Some(path) = &opts.map {
        topo.nvlinks = read_map(path, &gpus)?;
        topo.nvlink_source = Some(NvLinkSource::OperatorMap);
        return Ok(timings);
    }
    let any_nvidia = gpus
        .iter()
        .any(|b| topo.function(*b).is_some_and(|f| f.vendor == NVIDIA_VENDOR));
    if opts.use_nvml && any_nvidia {
        let (opened, open_took) = nvml.unwrap_or_else(|| {
            let t = Instant::now();
            (open_nvml(), t.elapsed())
        });
        timings.open = open_took;
        match opened.and_then(|n| nvml_links(&n, &gpus, &mut timings)) {
            Ok(links) => {
                topo.nvlinks = links;
                topo.nvlink_source = Some(NvLinkSource::Nvml);
                return Ok(timings);
            }
            Err(why) => topo.notes.push(format!("NVML not used: {why}")),
        }
    }
    if let Some(links) = from_nvswitches(topo, &gpus) {
        topo.notes.extend(nvswitch_caveats(topo, &gpus));
        topo.nvlinks = links;
        topo.nvlink_source = Some(NvLinkSource::NvSwitch);
    }
    Ok(timings)
}

/// How long NVLink discovery spent in NVML, phase by phase (`p2p-host topo
/// --timings`); zero for phases that did not run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NvmlTimings {
    /// Loading and initialising NVML (its driver attach included).
    pub open: Duration,
    /// Device handles and their PCI bus ids.
    pub devices: Duration,
    /// Every link's state and remote end, all GPUs at once.
    pub links: Duration,
    /// NVLink P2P status of the pairs joined through NVSwitches.
    pub p2p: Duration,
}

/// GPUs on one HGX baseboard (8 GPUs behind its NVSwitches).
pub const GPUS_PER_BASEBOARD: usize = 8;

/// What the NVSwitch heuristic assumes and when it is wrong, in words for the
/// report's notes.
fn nvswitch_caveats(topo: &Topology, gpus: &[Bdf]) -> Vec<String> {
    let switches = topo
        .functions
        .iter()
        .filter(|f| f.vendor == NVIDIA_VENDOR && f.class >> 8 == 0x0680)
        .count();
    let nvidia = gpus
        .iter()
        .filter_map(|b| topo.function(*b))
        .filter(|f| f.vendor == NVIDIA_VENDOR)
        .count();
    let mut notes = vec![format!(
        "NVLink assumed from {switches} NVSwitch function(s) on the bus (a heuristic): every \
         NVIDIA GPU counted as connected to every other, as on one HGX baseboard. It is wrong \
         under Fabric Manager partitions (GPUs in different partitions share no NVLink) and \
         across baseboards; NVML (driver loaded) or --nvlink FILE says what is really there"
    )];
    if nvidia > GPUS_PER_BASEBOARD {
        notes.push(format!(
            "{nvidia} NVIDIA GPUs is more than one baseboard ({GPUS_PER_BASEBOARD}): NVLinks \
             between baseboards are assumed but need an NVLink switch system; give --nvlink FILE"
        ));
    }
    notes
}

/// Reads `{"links": [{"a": BDF, "b": BDF, "count": N}, ...]}`, checking that
/// both ends are GPUs of the tree and that no pair is given twice.
pub fn read_map(path: &Path, gpus: &[Bdf]) -> Result<Vec<NvLink>, NvLinkError> {
    let err = |why: String| NvLinkError::Map {
        path: path.to_path_buf(),
        why,
    };
    let text = fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let file: MapFile =
        serde_json::from_str(&text).map_err(|e| err(p2p_topology::excerpt::json_error(&e)))?;
    let mut out: Vec<NvLink> = Vec::new();
    for (i, l) in file.links.iter().enumerate() {
        let parse = |s: &str| -> Result<Bdf, NvLinkError> {
            let b: Bdf = s.parse().map_err(|e| err(format!("links[{i}]: {e}")))?;
            if !gpus.contains(&b) {
                return Err(err(format!(
                    "links[{i}]: {b} is not one of the GPUs in the tree"
                )));
            }
            Ok(b)
        };
        let (a, b) = (parse(&l.a)?, parse(&l.b)?);
        if a == b {
            return Err(err(format!(
                "links[{i}]: a GPU cannot link to itself ({a})"
            )));
        }
        if l.count == 0 {
            return Err(err(format!("links[{i}]: count must be at least 1")));
        }
        if out
            .iter()
            .any(|o| (o.a == a && o.b == b) || (o.a == b && o.b == a))
        {
            return Err(err(format!("links[{i}]: pair {a} {b} given twice")));
        }
        out.push(NvLink {
            a,
            b,
            count: Some(l.count),
        });
    }
    Ok(out)
}

/// NVLinks per GPU of boards joined by NVSwitches, by PCI device id.
fn links_per_gpu(device: u16) -> Option<u32> {
    match device {
        // Hopper SXM: H100, H800, H20, H200.
        0x2330 | 0x2324 | 0x2329 | 0x2335 => Some(18),
        // Ampere SXM4: A100 40/80 GB, A800.
        0x20b0 | 0x20b2 | 0x20b3 | 0x20f3 => Some(12),
        // Blackwell SXM: B200.
        0x2901 => Some(18),
        _ => None,
    }
}

/// NVSwitch functions on the bus: every NVIDIA GPU of the baseboard is connected.
pub fn from_nvswitches(topo: &Topology, gpus: &[Bdf]) -> Option<Vec<NvLink>> {
    let has_switch = topo
        .functions
        .iter()
        .any(|f| f.vendor == NVIDIA_VENDOR && f.class >> 8 == 0x0680);
    if !has_switch {
        return None;
    }
    let nvidia: Vec<(Bdf, u16)> = gpus
        .iter()
        .filter_map(|b| topo.function(*b))
        .filter(|f| f.vendor == NVIDIA_VENDOR)
        .map(|f| (f.bdf, f.device))
        .collect();
    let mut out = Vec::new();
    for (i, (a, da)) in nvidia.iter().enumerate() {
        for (b, db) in &nvidia[i + 1..] {
            let count = match (links_per_gpu(*da), links_per_gpu(*db)) {
                (Some(x), Some(y)) => Some(x.min(y)),
                _ => None,
            };
            out.push(NvLink {
                a: *a,
                b: *b,
                count,
            });
        }
    }
    Some(out)
}

/// Opens NVML from the driver's library (`libnvidia-ml.so.1`, then the dev name).
/// Why NVML gave no NVLink map (the topology then falls back to NVSwitches).
#[derive(Debug, thiserror::Error)]
pub enum NvmlError {
    /// libnvidia-ml could not be loaded or initialised.
    #[error("cannot load libnvidia-ml: {0}")]
    Load(nvml_wrapper::error::NvmlError),
    /// A query about one device failed.
    #[error("device {index}: {what}: {source}")]
    Device {
        /// NVML's device index.
        index: u32,
        /// The query.
        what: &'static str,
        /// NVML's error.
        source: nvml_wrapper::error::NvmlError,
    },
    /// NVML's device count failed.
    #[error("device count: {0}")]
    Count(nvml_wrapper::error::NvmlError),
    /// NVML's bus id is not a PCI address.
    #[error("device {index}: bus id '{bus_id}' is not a PCI address")]
    BusId {
        /// NVML's device index.
        index: u32,
        /// What NVML said.
        bus_id: String,
    },
}

/// Loads and initialises NVML. Callers that scan meanwhile start this on a
/// thread of its own: NVML's initialisation is most of a live read.
pub fn open_nvml() -> Result<Nvml, NvmlError> {
    let mut builder = Nvml::builder();
    builder.lib_path(OsStr::new("libnvidia-ml.so.1"));
    builder
        .init()
        .or_else(|_| Nvml::init())
        .map_err(NvmlError::Load)
}

/// Active NVLinks from NVML: links to another GPU count for that pair; links
/// to NVSwitches count for every pair NVML says can do NVLink P2P, as the
/// smaller of the two GPUs' switch link counts (what `nvidia-smi topo -m` shows).
pub fn from_nvml(gpus: &[Bdf]) -> Result<Vec<NvLink>, NvmlError> {
    nvml_links(&open_nvml()?, gpus, &mut NvmlTimings::default())
}

/// One GPU's active links as NVML reports them: the remote end's bus id
/// where NVML gives one.
fn active_links(dev: &nvml_wrapper::Device<'_>) -> Vec<Option<Bdf>> {
    // NVML_NVLINK_MAX_LINKS is 18 on Hopper and Blackwell.
    (0..18u32)
        .map(|link| dev.link_wrapper_for(link))
        .filter(|l| l.is_active().unwrap_or(false))
        .map(|l| {
            l.remote_pci_info()
                .ok()
                .and_then(|p| p.bus_id.parse::<Bdf>().ok())
        })
        .collect()
}

/// [`from_nvml`] on an opened NVML, timing each phase into `t`.
pub fn nvml_links(
    nvml: &Nvml,
    gpus: &[Bdf],
    t: &mut NvmlTimings,
) -> Result<Vec<NvLink>, NvmlError> {
    let started = Instant::now();
    let count = nvml.device_count().map_err(NvmlError::Count)?;
    let mut devices = Vec::new();
    for index in 0..count {
        let dev = nvml
            .device_by_index(index)
            .map_err(|source| NvmlError::Device {
                index,
                what: "handle",
                source,
            })?;
        let bus_id = dev
            .pci_info()
            .map_err(|source| NvmlError::Device {
                index,
                what: "PCI info",
                source,
            })?
            .bus_id;
        let bdf: Bdf = bus_id.parse().map_err(|_| NvmlError::BusId {
            index,
            bus_id: bus_id.clone(),
        })?;
        devices.push((bdf, dev));
    }
    t.devices = started.elapsed();
    let started = Instant::now();
    // Each GPU's 18 link queries are driver calls of their own: one thread
    // per GPU asks them all at once (NVML is thread-safe).
    let remotes: Vec<Vec<Option<Bdf>>> = std::thread::scope(|scope| {
        let asked: Vec<_> = devices
            .iter()
            .map(|(_, dev)| scope.spawn(move || active_links(dev)))
            .collect();
        asked
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    t.links = started.elapsed();
    let started = Instant::now();
    let known: Vec<Bdf> = devices.iter().map(|(b, _)| *b).collect();
    let mut direct: BTreeMap<(Bdf, Bdf), u32> = BTreeMap::new();
    let mut to_switch: BTreeMap<Bdf, u32> = BTreeMap::new();
    for ((bdf, _), links) in devices.iter().zip(&remotes) {
        for remote in links {
            match remote {
                Some(r) if known.contains(r) => {
                    let key = if bdf < r { (*bdf, *r) } else { (*r, *bdf) };
                    *direct.entry(key).or_default() += 1;
                }
                _ => *to_switch.entry(*bdf).or_default() += 1,
            }
        }
    }
    let mut out = Vec::new();
    for (i, (a, da)) in devices.iter().enumerate() {
        for (b, db) in &devices[i + 1..] {
            if !gpus.contains(a) || !gpus.contains(b) {
                continue;
            }
            let key = if a < b { (*a, *b) } else { (*b, *a) };
            // Each side counts a direct link once from its own end.
            if let Some(n) = direct.get(&key) {
                out.push(NvLink {
                    a: *a,
                    b: *b,
                    count: Some(n / 2),
                });
                continue;
            }
            let (Some(sa), Some(sb)) = (to_switch.get(a), to_switch.get(b)) else {
                continue;
            };
            if matches!(
                da.p2p_status(db, P2pCapabilitiesIndex::NvLink),
                Ok(P2pStatus::Ok)
            ) {
                out.push(NvLink {
                    a: *a,
                    b: *b,
                    count: Some((*sa).min(*sb)),
                });
            }
        }
    }
    t.p2p = started.elapsed();
    Ok(out)
}
