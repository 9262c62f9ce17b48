//! p2p-host's [`TopologyReader`]: what every `p2p-host` command does to a
//! tree (the scan, then NVLink discovery), for code that asks through the
//! trait (the Kubernetes edge).

use std::path::{Path, PathBuf};

use p2p_shared::{GpuSelector, Topology, TopologyReadError, TopologyReader};

use super::{scan, SysfsRoot};
use crate::nvlink::{self, NvLinkOptions};

/// Reads a sysfs tree as the `p2p-host` commands do: [`scan`], then, unless
/// PCI alone was asked for, NVLink discovery for the GPUs `selector` picks
/// (an operator's map, NVML on the live `/sys`, else the NVSwitch heuristic).
///
/// ```
/// use p2p_host::sysfs::SysfsReader;
/// use p2p_shared::{GpuSelector, TopologyReader};
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
        let mut topo = scan(root).map_err(TopologyReadError::new)?;
        if let Some(opts) = &self.nvlink {
            let opts = NvLinkOptions {
                map: opts.map.clone(),
                use_nvml: opts.use_nvml && root.is_live(),
            };
            nvlink::discover(&mut topo, &self.selector, &opts).map_err(TopologyReadError::new)?;
        }
        Ok(topo)
    }
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
