//! The PCI topology model: host bridges, functions with their upstream bridge,
//! ACS and IOMMU facts, NUMA nodes and NVLink edges. Built by `p2p-host` from
//! sysfs, serialised into reports, read by classification and clique policy.

use serde::{Deserialize, Serialize};

use crate::bdf::Bdf;
use crate::pci::{Acs, PciePortType};

/// A PCI host bridge (root complex), the `pciDDDD:BB` directory in sysfs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HostBridge {
    /// sysfs name, for example `pci0000:00`.
    pub name: String,
    /// PCI domain (segment) of the root bus, the `DDDD` of `pciDDDD:BB`.
    pub domain: u32,
    /// Number of the root bus below the bridge, the `BB` of `pciDDDD:BB`.
    pub bus: u8,
    /// NUMA node of the functions below it; None when the kernel says -1.
    pub numa_node: Option<u32>,
}

/// What is known of a function's ACS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum AcsState {
    /// The function has no ACS capability.
    Absent,
    /// The ACS capability was read: what the port supports and has enabled.
    Present(Acs),
    /// ACS could not be read; `why` says what is missing (for example a 64-byte
    /// config read by a non-root user).
    Unknown {
        /// What kept ACS from being read, with the config path.
        why: String,
    },
    /// Not read: an endpoint's extended config space is skipped, because ACS
    /// decides routing only on the ports peer traffic crosses, and reading 4 KiB
    /// of config per function is slow on a live host.
    NotRead,
}

/// Link attributes as sysfs reports them (strings such as "32.0 GT/s PCIe").
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LinkInfo {
    /// `current_link_speed` as sysfs prints it; None when the attribute is absent.
    pub current_speed: Option<String>,
    /// Negotiated lane count (`current_link_width`); None when absent or not a number.
    pub current_width: Option<u8>,
    /// `max_link_speed`, the fastest rate both ends support; None when absent.
    pub max_speed: Option<String>,
    /// Most lanes the link supports (`max_link_width`); None when absent or not a number.
    pub max_width: Option<u8>,
}

/// One PCI function and the facts vp2p needs of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PciFunction {
    /// Address of the function.
    pub bdf: Bdf,
    /// PCI vendor ID (0x10de for NVIDIA).
    pub vendor: u16,
    /// PCI device ID, vendor-specific (tells GPU models apart).
    pub device: u16,
    /// Subsystem vendor ID (the board maker); None when sysfs lacks the attribute.
    pub subsystem_vendor: Option<u16>,
    /// Subsystem device ID (the board model); None when sysfs lacks the attribute.
    pub subsystem_device: Option<u16>,
    /// 24-bit class code.
    pub class: u32,
    /// Type-1 header: a PCI-to-PCI bridge (root port, switch port, ...).
    pub is_bridge: bool,
    /// Name of the host bridge this function sits below.
    pub host_bridge: String,
    /// The bridge directly upstream, None when on the host bridge's bus.
    pub parent: Option<Bdf>,
    /// PCIe device/port type from the Express capability; None for conventional
    /// PCI or when the capability list could not be read.
    pub pcie_port_type: Option<PciePortType>,
    /// Access Control Services of the function: present, absent, unread or unknown.
    pub acs: AcsState,
    /// IOMMU group number; None when the IOMMU is off or the function has no group.
    pub iommu_group: Option<crate::iommu_groups::IommuGroup>,
    /// NUMA node the kernel gives the function; None when it says -1 or has no attribute.
    pub numa_node: Option<u32>,
    /// `local_cpulist`, the CPUs nearest the function.
    pub cpu_affinity: Option<String>,
    /// Name of the bound kernel driver (`nvidia`, `vfio-pci`, ...); None when unbound.
    pub driver: Option<String>,
    /// PCIe link speed and width as sysfs reports them.
    pub link: LinkInfo,
    /// Bytes of config space read: 256 for endpoints, up to 4096 for bridges
    /// (whose extended space holds ACS), fewer when the kernel truncated the
    /// read (64 for non-root readers).
    pub config_len: usize,
    /// Network or RDMA interface names below the function (`net/`, `infiniband/`).
    pub interfaces: Vec<String>,
    /// RDMA devices of the function (`infiniband/` below it, the devices
    /// `/sys/class/infiniband/*/device` points at): what makes a network
    /// function a NIC for `nvidia-smi topo -m` and for NCCL's GPUDirect RDMA.
    #[serde(default)]
    pub rdma_devices: Vec<String>,
}

impl PciFunction {
    /// Base class, the top byte of the class code (0x03 display, 0x06 bridge, ...).
    pub fn base_class(&self) -> u8 {
        (self.class >> 16) as u8
    }

    /// Sub-class, the middle byte of the class code (0x02 for a 3D controller).
    pub fn sub_class(&self) -> u8 {
        (self.class >> 8) as u8
    }

    /// A function that can do RDMA (it has an `infiniband/` device).
    pub fn has_rdma(&self) -> bool {
        !self.rdma_devices.is_empty()
    }
}

/// How the NVLink map was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NvLinkSource {
    /// NVML, with the NVIDIA driver loaded.
    Nvml,
    /// NVSwitch functions on the bus: every GPU on the baseboard is connected.
    NvSwitch,
    /// A map the operator gave (`--nvlink FILE`).
    OperatorMap,
}

/// `count` NVLinks join GPUs `a` and `b` (directly or through NVSwitches).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NvLink {
    /// One GPU of the pair.
    pub a: Bdf,
    /// The other GPU of the pair.
    pub b: Bdf,
    /// Links in the bond; None when the source could not count them.
    pub count: Option<u32>,
}

/// A NUMA node and its CPUs, from `devices/system/node` when the tree has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NumaNode {
    /// Node number, as in `devices/system/node/nodeN`.
    pub id: u32,
    /// The node's CPUs in kernel cpulist form (`0-15,32-47`).
    pub cpulist: String,
}

/// The PCI topology of one machine.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Topology {
    /// Every host bridge (root complex), sorted by domain and bus.
    pub host_bridges: Vec<HostBridge>,
    /// Every function, sorted by address.
    pub functions: Vec<PciFunction>,
    /// NUMA nodes of the machine; empty when the tree has no `devices/system/node`.
    pub numa_nodes: Vec<NumaNode>,
    /// NVLink bonds between GPUs; empty when no source found any.
    pub nvlinks: Vec<NvLink>,
    /// Where `nvlinks` came from; None when no source (NVML, NVSwitches, an operator
    /// map) was used.
    pub nvlink_source: Option<NvLinkSource>,
    /// Facts the scan could not establish, in words an operator can act on.
    pub notes: Vec<String>,
}

impl Topology {
    /// Looks a function up by address.
    pub fn function(&self, bdf: Bdf) -> Option<&PciFunction> {
        self.functions
            .binary_search_by(|f| f.bdf.cmp(&bdf))
            .ok()
            .map(|i| &self.functions[i])
    }

    /// Looks a host bridge up by its sysfs name (`pci0000:00`).
    pub fn host_bridge(&self, name: &str) -> Option<&HostBridge> {
        self.host_bridges.iter().find(|h| h.name == name)
    }

    /// The bridges above `bdf`, nearest first, ending at the one on the host bridge.
    pub fn ancestors(&self, bdf: Bdf) -> Vec<Bdf> {
        let mut out = Vec::new();
        let mut cur = self.function(bdf).and_then(|f| f.parent);
        while let Some(p) = cur {
            if out.contains(&p) || out.len() > 256 {
                break; // a cycle cannot come from sysfs paths; refuse to spin anyway
            }
            out.push(p);
            cur = self.function(p).and_then(|f| f.parent);
        }
        out
    }

    /// NUMA node of a function: its own, else its host bridge's.
    pub fn numa_of(&self, bdf: Bdf) -> Option<u32> {
        let f = self.function(bdf)?;
        f.numa_node
            .or_else(|| self.host_bridge(&f.host_bridge).and_then(|h| h.numa_node))
    }

    /// NVLink count between two GPUs, if the map joins them.
    pub fn nvlink_between(&self, a: Bdf, b: Bdf) -> Option<Option<u32>> {
        self.nvlinks
            .iter()
            .find(|l| (l.a == a && l.b == b) || (l.a == b && l.b == a))
            .map(|l| l.count)
    }

    /// Sorts functions so lookups work; call after building by hand.
    pub fn sort(&mut self) {
        self.functions.sort_by_key(|f| f.bdf);
        self.host_bridges.sort_by_key(|h| (h.domain, h.bus));
    }
}

/// How code that re-reads the host while it runs (the Kubernetes edge: the
/// device plugin's health, the DRA driver's slices and prepares) gets the
/// topology of a sysfs tree. p2p-host's scan implements it; a trait so the
/// code that asks needs none of the code that reads, and a test can hand it
/// any reader.
pub trait TopologyReader: Send + Sync + std::fmt::Debug {
    /// The topology under `root` (`/sys`, or a captured copy) as it is now,
    /// with the NVLinks the reader knows of.
    fn read(&self, root: &std::path::Path) -> Result<Topology, TopologyReadError>;

    /// The directory the tree's files are under, as [`read`](Self::read)
    /// takes it (`root`, or `root/sysfs` for a capture), canonical: where
    /// code that writes to the tree (binding a function to a driver) writes.
    fn files(&self, root: &std::path::Path) -> Result<std::path::PathBuf, TopologyReadError>;
}

/// Why a [`TopologyReader`] could not read a tree: the reader's own error,
/// which names the path and the cause.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct TopologyReadError(pub Box<dyn std::error::Error + Send + Sync>);

impl TopologyReadError {
    /// Wraps a reader's error.
    pub fn new(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Box::new(e))
    }
}
