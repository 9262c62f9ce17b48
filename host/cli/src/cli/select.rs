//! Options shared by every subcommand that reads a topology.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use p2p_allocation::chooser::{parse_fmpm_list, FmPartition};
use p2p_host::nvlink::NvLinkOptions;
use p2p_host::sysfs::{ReadTimings, SysfsReader, SysfsRoot};
use p2p_host_io::read_limited;
use p2p_topology::select::ClassPrefix;
use p2p_topology::{Bdf, GpuSelector, Topology};

/// Where the topology comes from and which functions are GPUs.
#[derive(Debug, Clone, Args)]
pub struct TopologyArgs {
    /// sysfs tree to read: the live /sys, or a captured tree (a directory
    /// holding bus/ and devices/, or one holding sysfs/).
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    pub sysfs_root: PathBuf,
    /// Treat exactly these functions as GPUs (comma-separated addresses).
    #[arg(
        long,
        value_name = "BDF,...",
        value_delimiter = ',',
        conflicts_with = "gpu_class"
    )]
    pub gpus: Vec<Bdf>,
    /// Treat functions of this class as GPUs, any vendor (2, 4 or 6 hex digits,
    /// for example 0108 for NVMe in an emulated test topology).
    #[arg(long, value_name = "PREFIX")]
    pub gpu_class: Option<ClassPrefix>,
    #[command(flatten)]
    pub nvlinks: NvLinkArgs,
}

/// Where NVLinks come from: `--nvlink FILE`, else NVML on the live /sys
/// unless `--no-nvml`, else the NVSwitch heuristic. Every command that reads
/// a tree takes these, so all of them see the same links.
#[derive(Debug, Clone, Default, Args)]
pub struct NvLinkArgs {
    /// NVLink map: {"links": [{"a": BDF, "b": BDF, "count": N}, ...]}. Wins over
    /// NVML and NVSwitch discovery.
    #[arg(long, value_name = "FILE")]
    pub nvlink: Option<PathBuf>,
    /// Do not ask NVML for NVLinks even when reading the live /sys.
    #[arg(long)]
    pub no_nvml: bool,
}

impl NvLinkArgs {
    /// The tree read with these NVLink sources, for the GPUs `selector` picks.
    pub fn reader(&self, selector: GpuSelector) -> SysfsReader {
        let opts = NvLinkOptions {
            map: self.nvlink.clone(),
            use_nvml: !self.no_nvml,
        };
        SysfsReader::with_nvlinks(selector, opts)
    }
}

impl TopologyArgs {
    pub fn selector(&self) -> GpuSelector {
        if !self.gpus.is_empty() {
            GpuSelector::List {
                bdfs: self.gpus.clone(),
            }
        } else if let Some(prefix) = self.gpu_class {
            GpuSelector::Class { prefix }
        } else {
            GpuSelector::Nvidia
        }
    }

    /// Scans the tree and discovers NVLinks for the selected GPUs.
    pub fn load(&self) -> anyhow::Result<(SysfsRoot, Topology, GpuSelector)> {
        self.load_timed()
            .map(|(root, topo, selector, _)| (root, topo, selector))
    }

    /// [`Self::load`], with how long each phase of the read took.
    pub fn load_timed(&self) -> anyhow::Result<(SysfsRoot, Topology, GpuSelector, ReadTimings)> {
        let root = SysfsRoot::new(&self.sysfs_root)?;
        let selector = self.selector();
        let (topo, timings) = self
            .nvlinks
            .reader(selector.clone())
            .read_root_timed(&root)
            .with_context(|| format!("scanning {}", root.path().display()))?;
        if let GpuSelector::List { bdfs } = &selector {
            for b in bdfs {
                if topo.function(*b).is_none() {
                    anyhow::bail!(
                        "--gpus: {b} is not a PCI function in {}",
                        root.path().display()
                    );
                }
            }
        }
        Ok((root, topo, selector, timings))
    }
}

/// The most a Fabric Manager partition list (`fmpm -l`) may hold: a few KiB
/// for the largest HGX system, so 1 MiB is generous.
const FM_PARTITIONS_MAX: u64 = 1 << 20;

/// Reads `--fm-partitions FILE` (`fmpm -l` output), naming the file in
/// every error.
pub fn read_fm_partitions(path: Option<&Path>) -> anyhow::Result<Option<Vec<FmPartition>>> {
    let Some(path) = path else { return Ok(None) };
    let bytes = read_limited(path, FM_PARTITIONS_MAX)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{}: not UTF-8 text (byte {})",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })?;
    let list = parse_fmpm_list(&text).with_context(|| path.display().to_string())?;
    Ok(Some(list))
}
