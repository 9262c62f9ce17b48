//! p2p-host's [`TopologyReader`]: what every `p2p-host` command does to a
//! tree (the scan, then NVLink discovery), for code that asks through the
//! trait (the Kubernetes edge).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use p2p_topology::{GpuSelector, Topology, TopologyReadError, TopologyReader};

use super::{scan, SysfsRoot};
use crate::nvlink::{self, NvLinkOptions, NvmlTimings};

/// Reads a sysfs tree as the `p2p-host` commands do: [`scan`], then, unless
/// PCI alone was asked for, NVLink discovery for the GPUs `selector` picks
/// (an operator's map, NVML on the live `/sys`, else the NVSwitch heuristic).
///
/// ```
/// use p2p_host::sysfs::SysfsReader;
/// use p2p_topology::{GpuSelector, TopologyReader};
///
/// let reader = SysfsReader::pci_only(GpuSelector::Nvidia);
/// let err = reader.read("/nonexistent".as_ref()).unwrap_err();
/// assert!(err.to_string().contains("/nonexistent"));
/// ```
#[derive(Debug, Clone)]
pub struct SysfsReader {
    selector: GpuSelector,
    nvlink: Option<NvLinkOptions>,
}

impl SysfsReader {
    /// The PCI topology alone: no NVLinks looked for.
    pub fn pci_only(selector: GpuSelector) -> Self {
        Self {
            selector,
            nvlink: None,
        }
    }

    /// The PCI topology and the NVLinks between the GPUs `selector` picks,
    /// found as `opts` says (NVML only where the tree is the live `/sys`).
    pub fn with_nvlinks(selector: GpuSelector, opts: NvLinkOptions) -> Self {
        Self {
            selector,
            nvlink: Some(opts),
        }
    }

    /// Reads the tree at `root`, keeping the resolved root (for commands that
    /// go on to read more of it).
    pub fn read_root(&self, root: &SysfsRoot) -> Result<Topology, TopologyReadError> {
        self.read_root_timed(root).map(|(topo, _)| topo)
    }

    /// [`Self::read_root`], with how long each phase took. Where NVML will be
    /// asked, it is opened on a thread of its own while the tree is scanned:
    /// its initialisation, not the scan, is most of a live read.
    pub fn read_root_timed(
        &self,
        root: &SysfsRoot,
    ) -> Result<(Topology, ReadTimings), TopologyReadError> {
        let opts = self.nvlink.as_ref().map(|o| NvLinkOptions {
            map: o.map.clone(),
            use_nvml: o.use_nvml && root.is_live(),
        });
        let early_nvml = opts.as_ref().is_some_and(|o| o.use_nvml && o.map.is_none());
        std::thread::scope(|s| {
            let opening = early_nvml.then(|| {
                s.spawn(|| {
                    let t = Instant::now();
                    (nvlink::open_nvml(), t.elapsed())
                })
            });
            let t = Instant::now();
            let scanned = scan(root).map_err(TopologyReadError::new);
            let scan_took = t.elapsed();
            let opened = opening.and_then(|h| h.join().ok());
            let mut topo = scanned?;
            let t = Instant::now();
            let nvml = match &opts {
                Some(opts) => nvlink::discover_with(&mut topo, &self.selector, opts, opened)
                    .map_err(TopologyReadError::new)?,
                None => NvmlTimings::default(),
            };
            Ok((
                topo,
                ReadTimings {
                    scan: scan_took,
                    nvlink: t.elapsed(),
                    nvml,
                },
            ))
        })
    }
}

/// How long one read of a tree took, phase by phase (`p2p-host topo --timings`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadTimings {
    /// The PCI scan: every function's attributes and config header.
    pub scan: Duration,
    /// NVLink discovery after the scan (NVML's queries; its opening ran
    /// beside the scan and is in `nvml.open`).
    pub nvlink: Duration,
    /// NVML's phases.
    pub nvml: NvmlTimings,
}

impl TopologyReader for SysfsReader {
    fn read(&self, root: &Path) -> Result<Topology, TopologyReadError> {
        let root = SysfsRoot::new(root).map_err(TopologyReadError::new)?;
        self.read_root(&root)
    }

    fn files(&self, root: &Path) -> Result<PathBuf, TopologyReadError> {
        let root = SysfsRoot::new(root).map_err(TopologyReadError::new)?;
        Ok(root.path().to_path_buf())
    }
}
