//! The `p2p-host topo` report: GPUs and NICs, the class matrix, per-pair
//! routing, and the bridges on their paths. Field names are a stable schema
//! (README "JSON schemas"); new fields may be added, none renamed.

use serde::{Deserialize, Serialize};

use super::cpulist::CpuList;
use p2p_topology::bdf::Bdf;
use p2p_topology::classify::{classify_functions, PairPath, PathClass};
use p2p_topology::pci::PciePortType;
use p2p_topology::select::{GpuSelector, Role};
use p2p_topology::topology::{
    AcsState, HostBridge, LinkInfo, NumaNode, NvLinkSource, PciFunction, Topology,
};
use p2p_topology::IommuGroup;

/// Schema tag carried in every topo report.
pub const TOPO_SCHEMA: &str = "vp2p.topo/1";

/// A GPU, NIC or NVSwitch in the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceEntry {
    /// Matrix label: GPU0, NIC0, NVS0.
    pub label: String,
    /// Host PCI address of the function.
    pub bdf: Bdf,
    /// PCI vendor ID as hex text (`0x10de`).
    pub vendor: String,
    /// PCI device ID as hex text (`0x2330`).
    pub device: String,
    /// 24-bit class code as hex text (`0x030200`).
    pub class: String,
    /// Bound kernel driver (`nvidia`, `vfio-pci`, `mlx5_core`); None when unbound.
    pub driver: Option<String>,
    /// sysfs name of the host bridge (root complex) it sits below (`pci0000:00`).
    pub host_bridge: String,
    /// The function's own NUMA node, else its host bridge's.
    pub numa_node: Option<u32>,
    /// `local_cpulist`, the CPUs nearest the device; None when sysfs lacks it.
    pub cpu_affinity: Option<String>,
    /// IOMMU group number; None when the IOMMU is off.
    pub iommu_group: Option<IommuGroup>,
    /// PCIe link speed and width, current and max, as sysfs reports them.
    pub link: LinkInfo,
    /// Bridges from the host bridge down to the device.
    pub path: Vec<Bdf>,
    /// Network and RDMA interface names below the function (`net/`, `infiniband/`).
    pub interfaces: Vec<String>,
    /// RDMA devices (`infiniband/`): a NIC row holds at least one unless the
    /// report was asked for every network function.
    #[serde(default)]
    pub rdma_devices: Vec<String>,
    /// Its ATS extended capability (ID 0x000F), read from config space by
    /// `p2p-host topo`: whether its peer requests can carry translated
    /// addresses, which decides whether a turn in a switch goes direct.
    #[serde(default)]
    pub ats: AtsEntry,
}

/// A device's ATS as its config space shows it.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum AtsEntry {
    /// ATS Control bit 15 set (the host's IOMMU driver turned it on).
    Enabled,
    /// The capability is there, Enable clear.
    Disabled,
    /// No ATS capability: requests carry untranslated addresses.
    Absent,
    /// The extended config space was not read (not root, or a tree without it).
    #[default]
    Unknown,
}

/// A bridge on some GPU's or NIC's path, with its ACS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BridgeEntry {
    /// Address of the bridge.
    pub bdf: Bdf,
    /// PCIe port type (root port, switch upstream or downstream); None when unknown.
    pub port_type: Option<PciePortType>,
    /// Its ACS capability and controls, or why they are unknown or were not read.
    pub acs: AcsState,
    /// IOMMU group number of the bridge; None when the IOMMU is off.
    pub iommu_group: Option<IommuGroup>,
}

/// The square matrix `nvidia-smi topo -m` prints: labels and cells.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Matrix {
    /// Row and column labels: GPU0.., then NIC0.. (the same order for both).
    pub labels: Vec<String>,
    /// `cells[i][j]`: the path class between `labels[i]` and `labels[j]` (X on the diagonal).
    pub cells: Vec<Vec<PathClass>>,
}

/// The whole topo report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TopoReport {
    /// Schema tag, [`TOPO_SCHEMA`] (`vp2p.topo/1`).
    pub schema: String,
    /// The sysfs tree scanned: `/sys`, or a captured snapshot's path.
    pub sysfs_root: String,
    /// How GPUs were picked out (NVIDIA display class, a class prefix, or a list).
    pub gpu_selector: GpuSelector,
    /// Where the NVLink map came from; None when no source found one.
    pub nvlink_source: Option<NvLinkSource>,
    /// GPUs in ascending address order; `links` and `pairs` index into it.
    pub gpus: Vec<DeviceEntry>,
    /// NICs in ascending address order (RDMA functions unless every network one was asked).
    pub nics: Vec<DeviceEntry>,
    /// NVSwitch functions (NVS0..); they have no matrix row.
    pub nvswitches: Vec<DeviceEntry>,
    /// `links[i][j]`: class between gpus[i] and gpus[j].
    pub links: Vec<Vec<PathClass>>,
    /// GPUs then NICs, as `nvidia-smi topo -m` lays them out.
    pub matrix: Matrix,
    /// Every unordered GPU pair (i < j) with its route.
    pub pairs: Vec<PairPath>,
    /// Every bridge on a GPU's or NIC's path, in address order, with its ACS.
    pub bridges: Vec<BridgeEntry>,
    /// Every host bridge of the machine, with its NUMA node.
    pub host_bridges: Vec<HostBridge>,
    /// NUMA nodes and their CPUs; empty when sysfs has no node directory.
    pub numa_nodes: Vec<NumaNode>,
    /// What the scan could not establish and other caveats, in words for the operator.
    pub notes: Vec<String>,
}

/// Which network functions are NIC rows of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NicRows {
    /// Only functions with an RDMA device, as `nvidia-smi topo -m` lists them.
    #[default]
    Rdma,
    /// Every network function, RDMA or not (virtio-net, plain Ethernet).
    AllNetwork,
}

impl TopoReport {
    /// Builds the report for the GPUs `selector` picks out of `topo`, with NIC
    /// rows as `nvidia-smi topo -m` has them (RDMA devices only).
    pub fn build(topo: &Topology, selector: &GpuSelector, sysfs_root: &str) -> Self {
        Self::build_with(topo, selector, sysfs_root, NicRows::Rdma)
    }

    /// Builds the report with the NIC rows `nics` asks for.
    pub fn build_with(
        topo: &Topology,
        selector: &GpuSelector,
        sysfs_root: &str,
        nic_rows: NicRows,
    ) -> Self {
        let mut gpus = Vec::new();
        let mut nics = Vec::new();
        let mut nvswitches = Vec::new();
        let (mut gpu_fns, mut nic_fns) = (Vec::new(), Vec::new());
        for f in &topo.functions {
            let (list, prefix) = match selector.role(f) {
                Role::Gpu => {
                    gpu_fns.push(f);
                    (&mut gpus, "GPU")
                }
                Role::Nic => {
                    nic_fns.push(f);
                    (&mut nics, "NIC")
                }
                Role::EthernetOnly if nic_rows == NicRows::AllNetwork => {
                    nic_fns.push(f);
                    (&mut nics, "NIC")
                }
                Role::NvSwitch => (&mut nvswitches, "NVS"),
                Role::EthernetOnly | Role::Bridge | Role::Other => continue,
            };
            let mut path = topo.ancestors(f.bdf);
            path.reverse();
            list.push(DeviceEntry {
                label: format!("{prefix}{}", list.len()),
                bdf: f.bdf,
                vendor: format!("{:#06x}", f.vendor),
                device: format!("{:#06x}", f.device),
                class: format!("{:#08x}", f.class),
                driver: f.driver.clone(),
                host_bridge: f.host_bridge.clone(),
                numa_node: topo.numa_of(f.bdf),
                cpu_affinity: f.cpu_affinity.clone(),
                iommu_group: f.iommu_group,
                link: f.link.clone(),
                path,
                interfaces: f.interfaces.clone(),
                rdma_devices: f.rdma_devices.clone(),
                ats: AtsEntry::Unknown,
            });
        }

        // GPUs then NICs; `links` is the GPUs' block of the same matrix.
        let members: Vec<&DeviceEntry> = gpus.iter().chain(nics.iter()).collect();
        let member_fns: Vec<&PciFunction> = gpu_fns.iter().chain(nic_fns.iter()).copied().collect();
        let cells: Vec<Vec<PathClass>> = member_fns
            .iter()
            .map(|a| {
                member_fns
                    .iter()
                    .map(|b| classify_functions(topo, a, b).class)
                    .collect()
            })
            .collect();
        let n = gpu_fns.len();
        let links = cells[..n].iter().map(|row| row[..n].to_vec()).collect();
        let matrix = Matrix {
            labels: members.iter().map(|d| d.label.clone()).collect(),
            cells,
        };
        let mut pairs = Vec::new();
        for (i, a) in gpu_fns.iter().enumerate() {
            for b in &gpu_fns[i + 1..] {
                pairs.push(classify_functions(topo, a, b));
            }
        }

        let mut on_paths: Vec<Bdf> = members
            .iter()
            .flat_map(|d| d.path.iter().copied())
            .collect();
        on_paths.sort();
        on_paths.dedup();
        let bridges = on_paths
            .into_iter()
            .filter_map(|b| topo.function(b))
            .map(|f| BridgeEntry {
                bdf: f.bdf,
                port_type: f.pcie_port_type,
                acs: f.acs.clone(),
                iommu_group: f.iommu_group,
            })
            .collect();

        let mut report = TopoReport {
            schema: TOPO_SCHEMA.to_string(),
            sysfs_root: sysfs_root.to_string(),
            gpu_selector: selector.clone(),
            nvlink_source: topo.nvlink_source,
            gpus,
            nics,
            nvswitches,
            links,
            matrix,
            pairs,
            bridges,
            host_bridges: topo.host_bridges.clone(),
            numa_nodes: topo.numa_nodes.clone(),
            notes: topo.notes.clone(),
        };
        if report.gpus.is_empty() {
            report.notes.push(format!(
                "no GPUs found ({}); choose them with --gpus or --gpu-class",
                describe_selector(selector)
            ));
        }
        report
    }

    /// NUMA affinity as `nvidia-smi` shows it: the device's node, else the node
    /// whose CPUs contain the device's CPU affinity.
    pub fn numa_affinity(&self, d: &DeviceEntry) -> Option<u32> {
        if d.numa_node.is_some() {
            return d.numa_node;
        }
        let cpus = CpuList::parse(d.cpu_affinity.as_deref()?)?;
        self.numa_nodes
            .iter()
            .find(|n| CpuList::parse(&n.cpulist).is_some_and(|node| cpus.is_subset(&node)))
            .map(|n| n.id)
    }
}

pub(super) fn describe_selector(s: &GpuSelector) -> String {
    match s {
        GpuSelector::Nvidia => "GPUs are NVIDIA display-class functions".to_string(),
        GpuSelector::Class { prefix } => format!("GPUs are functions of class {prefix}"),
        GpuSelector::List { bdfs } => format!(
            "GPUs are {}",
            bdfs.iter()
                .map(Bdf::to_string)
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}
