//! NCCL's topology XML (`NCCL_TOPO_FILE`, else
//! `/var/run/nvidia-topologyd/virtualTopology.xml`), as NCCL 2.28 reads it.
//!
//! NCCL never reads the P2P capability: it decides peer access from the PCI
//! tree it detects, and a passthrough VM's flat bus puts every pair at PHB.
//! The file gives NCCL the tree instead. Facts from NCCL 2.28's `src/graph`
//! (xml.cc, topo.cc, paths.cc) that shape this module:
//! - `<system version="1">` is required; other versions are refused.
//! - `<cpu>` needs `numaid` (and `arch`, x86 `vendor`, Intel `familyid` and
//!   `modelid`); NCCL fills whichever are missing, `affinity` included (from
//!   `/sys/devices/system/node/node<numaid>/cpumap`), for every `<cpu>` a
//!   detected GPU hangs below. One `<cpu>` per NUMA node: two with one id
//!   confuse NCCL.
//! - A switch is one `<pci>` keyed by its upstream port; root ports and
//!   downstream ports are not nodes. GPU-switch-GPU is PIX, a path through two
//!   `<pci>` nodes PXB, through `<cpu>` PHB, across `<cpu>`s SYS.
//! - A `<pci>` already in the file keeps the parent the file gives it; NCCL
//!   fills `vendor`, `device`, `subsystem_*`, `link_speed`, `link_width` only
//!   where missing but overwrites `class` from sysfs when the bus id exists.
//!   Invented switches must therefore use bus ids the VM does not have.
//! - `link_speed` must be the kernel's spelling (`32.0 GT/s PCIe`); bandwidth
//!   is width x speed; width 0 counts as 16.
//! - GPUs and NICs are written without `<gpu>`/`<nic>` children: NCCL adds them
//!   when it detects the device at that bus id. An `<nvlink>` in the file would
//!   stop NCCL from asking NVML for NVLinks, so NVLink is left to NVML, which
//!   sees it through passthrough (fixture `nccl-topo-dump.xml`).

mod build;
mod render;

use serde::{Deserialize, Serialize};

use crate::bdf::Bdf;

pub use build::{from_cliques, from_guest, CliqueGpu};
pub use render::{render, render_hiding_nvlink, PLACEHOLDER_NVLINK, PLACEHOLDER_NVLINK_TARGET};

/// The one version NCCL 2.28 accepts.
pub const NCCL_TOPO_VERSION: u32 = 1;
/// Where NCCL looks when `NCCL_TOPO_FILE` is unset.
pub const NCCL_DEFAULT_PATH: &str = "/var/run/nvidia-topologyd/virtualTopology.xml";
/// The fw_cfg name the host hands the file to the guest under.
pub const FW_CFG_NAME: &str = "opt/vp2p/nccl-topo.xml";

/// How deep `<pci>` elements may nest below their `<cpu>` in a file vp2p
/// reads. NCCL 2.28.3 loads at most 256 nodes from a topology file
/// (`NCCL_TOPO_XML_MAX_NODES`, src/graph/topo.h; `xmlLoadSub` in
/// src/graph/xml.cc refuses more; NVIDIA/nccl tag v2.28.3-1), so no file NCCL
/// accepts nests deeper. The readers and the walks over the tree recurse once
/// per level: the bound keeps a hostile file from overflowing the stack.
pub const MAX_PCI_DEPTH: usize = 256;

/// The class code NCCL gives switch nodes.
pub const BRIDGE_CLASS: u32 = 0x060400;

/// A whole NCCL topology: one `<cpu>` per NUMA node.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NcclSystem {
    /// The `<cpu>` nodes, one per NUMA node, each with the PCI trees below it.
    pub cpus: Vec<NcclCpu>,
}

/// A `<cpu>`: a NUMA node and the PCI trees below it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NcclCpu {
    /// -1 when unknown, as NCCL writes it.
    pub numaid: i32,
    /// Hex cpumask as in sysfs `cpumap` (`ffffffff,ffffffff`).
    pub affinity: Option<String>,
    /// `arch` attribute (`x86_64`, ...); None leaves it to NCCL, which fills it in.
    pub arch: Option<String>,
    /// `vendor` attribute, the x86 CPU vendor; None leaves it to NCCL.
    pub vendor: Option<String>,
    /// `familyid` attribute (Intel CPU family); None leaves it to NCCL.
    pub familyid: Option<u32>,
    /// `modelid` attribute (Intel CPU model); None leaves it to NCCL.
    pub modelid: Option<u32>,
    /// Top-level `<pci>` nodes below this CPU: switches and endpoints.
    pub pci: Vec<NcclPci>,
}

/// A `<pci>`: a switch (children) or a GPU/NIC (no children).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NcclPci {
    /// `busid`: the node's guest PCI address, or an unused one for an invented switch.
    pub busid: Bdf,
    /// `class`: 24-bit PCI class code ([`BRIDGE_CLASS`] for switches).
    pub class: u32,
    /// `vendor` ID; None for a switch that stands for no host function.
    pub vendor: Option<u16>,
    /// `device` ID; None for a switch that stands for no host function.
    pub device: Option<u16>,
    /// `subsystem_vendor`; None when unknown or for an invented switch.
    pub subsystem_vendor: Option<u16>,
    /// `subsystem_device`; None when unknown or for an invented switch.
    pub subsystem_device: Option<u16>,
    /// Kernel spelling, `32.0 GT/s PCIe`.
    pub link_speed: Option<String>,
    /// `link_width`, in lanes; None when unknown (NCCL fills it where the bus id exists).
    pub link_width: Option<u8>,
    /// Nodes below a switch; empty for a GPU or NIC.
    pub children: Vec<NcclPci>,
}

impl NcclPci {
    /// Whether NCCL treats the node as a switch.
    pub fn is_bridge(&self) -> bool {
        self.class >> 8 == BRIDGE_CLASS >> 8
    }

    /// This node and every node below it, parents first.
    pub fn walk(&self) -> Vec<&NcclPci> {
        let mut out = vec![self];
        for c in &self.children {
            out.extend(c.walk());
        }
        out
    }
}

impl NcclSystem {
    /// Every `<pci>` in the file, parents first.
    pub fn all_pci(&self) -> Vec<&NcclPci> {
        self.cpus
            .iter()
            .flat_map(|c| c.pci.iter().flat_map(|p| p.walk()))
            .collect()
    }

    /// The path class NCCL computes between two endpoints of the file (PIX,
    /// PXB, PHB, SYS), from the rules above; None when one is missing.
    pub fn nccl_class(&self, a: Bdf, b: Bdf) -> Option<&'static str> {
        let pa = self.path_to(a)?;
        let pb = self.path_to(b)?;
        if pa.0 != pb.0 {
            return Some("SYS");
        }
        let common = pa.1.iter().zip(&pb.1).take_while(|(x, y)| x == y).count();
        if common == 0 {
            return Some("PHB");
        }
        // Switch nodes crossed: from each side up to the common one, counted once.
        let crossed = (pa.1.len() - common) + (pb.1.len() - common) + 1;
        Some(if crossed <= 1 { "PIX" } else { "PXB" })
    }

    /// (cpu index, switch bus ids from the top down) of an endpoint.
    fn path_to(&self, target: Bdf) -> Option<(usize, Vec<Bdf>)> {
        fn find(nodes: &[NcclPci], target: Bdf, stack: &mut Vec<Bdf>) -> bool {
            for n in nodes {
                if n.busid == target && n.children.is_empty() {
                    return true;
                }
                stack.push(n.busid);
                if find(&n.children, target, stack) {
                    return true;
                }
                stack.pop();
            }
            false
        }
        for (i, c) in self.cpus.iter().enumerate() {
            let mut stack = Vec::new();
            if find(&c.pci, target, &mut stack) {
                return Some((i, stack));
            }
        }
        None
    }
}
