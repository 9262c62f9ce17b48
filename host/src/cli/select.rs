//! Options shared by every subcommand that reads a topology.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use p2p_host::nvlink::{self, NvLinkOptions};
use p2p_host::sysfs::{self, SysfsRoot};
use p2p_shared::select::ClassPrefix;
use p2p_shared::{Bdf, GpuSelector, Topology};

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
    /// NVLink map: {"links": [{"a": BDF, "b": BDF, "count": N}, ...]}. Wins over
    /// NVML and NVSwitch discovery.
    #[arg(long, value_name = "FILE")]
    pub nvlink: Option<PathBuf>,
    /// Do not ask NVML for NVLinks even when reading the live /sys.
    #[arg(long)]
    pub no_nvml: bool,
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
        let root = SysfsRoot::new(&self.sysfs_root)?;
        let mut topo =
            sysfs::scan(&root).with_context(|| format!("scanning {}", root.path().display()))?;
        let selector = self.selector();
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
        let opts = NvLinkOptions {
            map: self.nvlink.clone(),
            use_nvml: root.is_live() && !self.no_nvml,
        };
        nvlink::discover(&mut topo, &selector, &opts)?;
        Ok((root, topo, selector))
    }
}
