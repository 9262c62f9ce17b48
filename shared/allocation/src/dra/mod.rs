//! The ResourceSlices a vp2p DRA driver publishes for one node: one pool per
//! node, one device per GPU and per RDMA NIC that VFIO can assign alone, with
//! Kubernetes' standard PCI attributes and vp2p's clique attributes, whose
//! equal value means "the chooser lets these two be peers at this level"
//! (docs/DESIGN.md, "DRA, on paper"). Pure: the topology in, the objects out.
//!
//! The clique attributes, per policy level, and why equality is exact
//! (the classes are those of [`mod@p2p_topology::classify`]):
//! - `cliquePix`: the switch unit right above the device (its downstream
//!   port's upstream port, or the bridge it sits on when that is no switch
//!   port). Two devices are PIX exactly when their paths meet within one such
//!   unit, which is when these units are the same.
//! - `cliquePxb`: the topmost bridge above the device (the one on the host
//!   bridge's bus). Two paths share a bridge exactly when they share this one.
//! - `cliquePhb`: the host bridge (`pci0000:20`, the standard `pcieRoot`).
//! - `cliqueNode`: `node<N>` when the NUMA node is known; else the host
//!   bridge's name, so a device of unknown NUMA matches only its own root
//!   complex (unknown NUMA counts as SYS across host bridges).
//! - `nvlinkDomain`: one id per NVLink-connected set whose every pair is
//!   linked (an NVSwitch baseboard); `fmPartition<N>`: the Fabric Manager
//!   partition of N GPUs holding the GPU.
//!
//! Attribute names, checked: `resource.kubernetes.io/pciBusID`,
//! `resource.kubernetes.io/pcieRoot` (kubernetes/kubernetes,
//! staging/src/k8s.io/dynamic-resource-allocation/deviceattribute, the
//! `StandardDeviceAttributePCIBusID` and `...PCIeRoot` constants) and
//! `resource.kubernetes.io/numaNode` in its scalar integer form, omitted
//! when the kernel says -1 (numa_linux.go there, `ScalarAttribute`, at commit
//! 1b445ee5615493859aa807dbb9ec483608ee8bd1; the list form needs the alpha
//! DRAListTypeAttributes gate and is not published).

mod api;
pub mod claim;
pub mod names;
pub mod order;
pub mod score;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::chooser::FmPartition;
use crate::clique::MaxLevel;
use p2p_topology::bdf::Bdf;
use p2p_topology::classify::{classify_functions, PathClass};
use p2p_topology::pci::PciePortType;
use p2p_topology::select::{GpuSelector, Role};
use p2p_topology::topology::{PciFunction, Topology};

pub use api::*;
pub use order::DeviceOrder;

/// The driver name when none is given.
pub const DEFAULT_DRIVER: &str = "gpu.vp2p.io";
/// Standard attribute: the PCI address in extended BDF notation.
pub const PCI_BUS_ID: &str = "resource.kubernetes.io/pciBusID";
/// Standard attribute: the PCIe root complex, `pci<domain>:<bus>`.
pub const PCIE_ROOT: &str = "resource.kubernetes.io/pcieRoot";
/// Standard attribute: the NUMA node (scalar form).
pub const NUMA_NODE: &str = "resource.kubernetes.io/numaNode";

/// The clique attribute of each PCIe policy level (SYS has none: every
/// device of a node is within SYS of every other, and a claim is node-local).
pub const CLIQUE_ATTRIBUTES: [(PathClass, &str); 4] = [
    (PathClass::Pix, "cliquePix"),
    (PathClass::Pxb, "cliquePxb"),
    (PathClass::Phb, "cliquePhb"),
    (PathClass::Node, "cliqueNode"),
];

/// The clique attribute's id for `level`; None for SYS.
pub fn clique_attribute(level: MaxLevel) -> Option<&'static str> {
    CLIQUE_ATTRIBUTES
        .iter()
        .find(|(c, _)| *c == level.class())
        .map(|(_, a)| *a)
}

/// What the slices are built from, besides the topology.
#[derive(Debug, Clone)]
pub struct SliceOptions<'a> {
    /// The node's name: the pool's name and every slice's `nodeName`.
    pub node_name: &'a str,
    /// The driver's name, also the domain of vp2p's own attributes.
    pub driver: &'a str,
    /// Which functions are GPUs.
    pub selector: &'a GpuSelector,
    /// Fabric Manager's partitions (`fmpm -l`), for `fmPartition<N>`.
    pub partitions: Option<&'a [FmPartition]>,
    /// Publish devices not bound to vfio-pci yet (the driver binds them at
    /// prepare); otherwise they are left out.
    pub bind: bool,
    /// Devices per slice (Kubernetes allows 128; smaller only in tests).
    pub max_devices_per_slice: usize,
    /// The pool's generation.
    pub generation: i64,
    /// The order GPUs are listed in: the order the scheduler tries them.
    pub order: DeviceOrder,
}

impl<'a> SliceOptions<'a> {
    /// The defaults: 128 devices per slice, generation 1, no partitions,
    /// only devices bound to vfio-pci, GPUs away from a NIC first
    /// ([`DeviceOrder::NicLast`]).
    pub fn new(node_name: &'a str, driver: &'a str, selector: &'a GpuSelector) -> Self {
        Self {
            node_name,
            driver,
            selector,
            partitions: None,
            bind: false,
            max_devices_per_slice: MAX_DEVICES_PER_SLICE,
            generation: 1,
            order: DeviceOrder::NicLast,
        }
    }
}

/// A published device's kind (the `kind` attribute).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// A GPU.
    Gpu,
    /// An RDMA NIC.
    Nic,
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeviceKind::Gpu => "gpu",
            DeviceKind::Nic => "nic",
        })
    }
}

/// A GPU or NIC that is not published, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LeftOut {
    /// Its address.
    pub bdf: Bdf,
    /// GPU or NIC.
    pub kind: DeviceKind,
    /// Why it is not published, in words an operator can act on.
    pub reason: String,
}

/// Everything the driver would publish for the node, and what it left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    /// The driver's name.
    pub driver: String,
    /// The node's name.
    pub node_name: String,
    /// The pool's slices, at least one (an empty pool is one slice without devices).
    pub slices: Vec<ResourceSlice>,
    /// GPUs and NICs not published, with reasons.
    pub left_out: Vec<LeftOut>,
    /// Facts about attributes that could not be given (an NVLink set not
    /// fully connected, a GPU in two partitions of one size).
    pub notes: Vec<String>,
}

impl Publication {
    /// Every published device, slice by slice.
    pub fn devices(&self) -> impl Iterator<Item = &Device> {
        self.slices.iter().flat_map(|s| s.spec.devices.iter())
    }

    /// The fully qualified name of vp2p's attribute `id` (`gpu.vp2p.io/cliquePix`).
    pub fn attribute_name(&self, id: &str) -> String {
        format!("{}/{id}", self.driver)
    }
}

/// Why no slices could be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SliceError {
    /// The driver name is not a DNS subdomain of at most 63 characters.
    #[error("driver name '{0}' is not a DNS subdomain of at most 63 characters (lowercase letters, digits, '-' and '.')")]
    BadDriverName(String),
    /// The node name is not a DNS subdomain of at most 253 characters.
    #[error("node name '{0}' is not a DNS subdomain of at most 253 characters")]
    BadNodeName(String),
    /// A slice's object name would be too long.
    #[error("slice name '{0}' is longer than 253 characters: use a shorter node or driver name")]
    SliceNameTooLong(String),
    /// The devices-per-slice setting is out of range.
    #[error("devices per slice must be 1 to 128, not {0}")]
    BadSliceSize(usize),
    /// A device carries more attributes than the API allows.
    #[error("device {device} ({bdf}) would carry {count} attributes, more than the 32 Kubernetes allows")]
    TooManyAttributes {
        /// The device name.
        device: String,
        /// Its address.
        bdf: Bdf,
        /// Attributes it would carry.
        count: usize,
    },
    /// An attribute's name or value breaks the API's format.
    #[error("device {device}: attribute '{name}' = '{value}' breaks Kubernetes' format: {why}")]
    BadAttribute {
        /// The device name.
        device: String,
        /// The attribute's qualified name.
        name: String,
        /// Its value as text.
        value: String,
        /// What is wrong.
        why: &'static str,
    },
}

/// Builds the node's ResourceSlices from `topo`.
pub fn build_slices(topo: &Topology, opts: &SliceOptions) -> Result<Publication, SliceError> {
    if !names::is_dns_subdomain(opts.driver, MAX_DRIVER_NAME) {
        return Err(SliceError::BadDriverName(opts.driver.to_string()));
    }
    if !names::is_dns_subdomain(opts.node_name, MAX_POOL_NAME) {
        return Err(SliceError::BadNodeName(opts.node_name.to_string()));
    }
    if !(1..=MAX_DEVICES_PER_SLICE).contains(&opts.max_devices_per_slice) {
        return Err(SliceError::BadSliceSize(opts.max_devices_per_slice));
    }
    let (mut published, left_out) = eligible(topo, opts);
    order::arrange(topo, &mut published, opts.order);
    let mut notes = Vec::new();
    let nvlink = nvlink_domains(topo, opts.selector, &mut notes);
    let fm = partition_attributes(opts.partitions, &mut notes);
    let nics: Vec<Bdf> = published
        .iter()
        .filter(|(_, k)| *k == DeviceKind::Nic)
        .map(|(b, _)| *b)
        .collect();
    let mut devices = Vec::new();
    for (bdf, kind) in &published {
        let Some(f) = topo.function(*bdf) else {
            continue;
        };
        let dev = device(topo, f, *kind, opts.driver, &nvlink, &fm, &nics);
        names::check_device(&dev, *bdf)?;
        devices.push(dev);
    }
    let chunks: Vec<Vec<Device>> = if devices.is_empty() {
        vec![Vec::new()]
    } else {
        devices
            .chunks(opts.max_devices_per_slice)
            .map(<[Device]>::to_vec)
            .collect()
    };
    let count = chunks.len() as i64;
    let mut slices = Vec::new();
    for (i, devices) in chunks.into_iter().enumerate() {
        let name = format!("{}-{}-{i}", opts.node_name, opts.driver);
        if name.len() > MAX_POOL_NAME {
            return Err(SliceError::SliceNameTooLong(name));
        }
        slices.push(ResourceSlice {
            api_version: API_VERSION.to_string(),
            kind: "ResourceSlice".to_string(),
            metadata: ObjectMeta { name },
            spec: ResourceSliceSpec {
                driver: opts.driver.to_string(),
                pool: ResourcePool {
                    name: opts.node_name.to_string(),
                    generation: opts.generation,
                    resource_slice_count: count,
                },
                node_name: opts.node_name.to_string(),
                devices,
            },
        });
    }
    Ok(Publication {
        driver: opts.driver.to_string(),
        node_name: opts.node_name.to_string(),
        slices,
        left_out,
        notes,
    })
}

/// The GPUs and NICs to publish, in address order, and those left out.
fn eligible(topo: &Topology, opts: &SliceOptions) -> (Vec<(Bdf, DeviceKind)>, Vec<LeftOut>) {
    let kind_of = |f: &PciFunction| match opts.selector.role(f) {
        Role::Gpu => Some(DeviceKind::Gpu),
        Role::Nic => Some(DeviceKind::Nic),
        _ => None,
    };
    let mut published = Vec::new();
    let mut left_out = Vec::new();
    for f in &topo.functions {
        let Some(kind) = kind_of(f) else {
            continue;
        };
        let reason = if f.bdf.domain > 0xffff {
            // Kubernetes' pciBusID is `dddd:bb:dd.f`, four hex digits of
            // domain (the format k8s.io/dynamic-resource-allocation's
            // deviceattribute checks); the API server stores any string, so
            // a consumer would be the first to fail on a longer one.
            Some(format!(
                "PCI domain {:x} is above ffff: Kubernetes' pciBusID (dddd:bb:dd.f) cannot name it",
                f.bdf.domain
            ))
        } else if f.driver.as_deref() != Some("vfio-pci") && !opts.bind {
            Some(match &f.driver {
                Some(d) => format!("bound to {d}, not vfio-pci (bind it, or publish with --bind: the driver binds at prepare)"),
                None => "bound to no driver, not vfio-pci (bind it, or publish with --bind: the driver binds at prepare)".to_string(),
            })
        } else if let Some(group) = f.iommu_group {
            let others: Vec<String> = topo
                .functions
                .iter()
                .filter(|o| o.bdf != f.bdf && o.iommu_group == Some(group) && !o.is_bridge)
                .filter_map(|o| kind_of(o).map(|k| format!("{} ({k})", o.bdf)))
                .collect();
            (!others.is_empty()).then(|| {
                format!(
                    "IOMMU group {group} also holds {}: VFIO assigns the group whole, and a DRA device is one GPU or NIC",
                    others.join(", ")
                )
            })
        } else {
            Some("no IOMMU group (the IOMMU is off): VFIO cannot assign it".to_string())
        };
        match reason {
            Some(reason) => left_out.push(LeftOut {
                bdf: f.bdf,
                kind,
                reason,
            }),
            None => published.push((f.bdf, kind)),
        }
    }
    (published, left_out)
}

/// `cliquePix`: the switch unit right above `f` (a downstream port stands for
/// its upstream port), as [`p2p_topology::classify`] counts switch units.
fn pix_unit(topo: &Topology, f: &PciFunction) -> Option<Bdf> {
    let parent = topo.function(f.parent?)?;
    if parent.pcie_port_type == Some(PciePortType::SwitchDownstream) {
        if let Some(up) = parent.parent.and_then(|p| topo.function(p)) {
            if up.pcie_port_type == Some(PciePortType::SwitchUpstream) {
                return Some(up.bdf);
            }
        }
    }
    Some(parent.bdf)
}

/// The value of each clique attribute for `f` (absent ones left out).
pub fn clique_values(topo: &Topology, f: &PciFunction) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if let Some(u) = pix_unit(topo, f) {
        out.push(("cliquePix", u.to_string()));
    }
    if let Some(top) = topo.ancestors(f.bdf).last() {
        out.push(("cliquePxb", top.to_string()));
    }
    out.push(("cliquePhb", f.host_bridge.clone()));
    let node = match topo.numa_of(f.bdf) {
        Some(n) => format!("node{n}"),
        None => f.host_bridge.clone(),
    };
    out.push(("cliqueNode", node));
    out
}

/// `nvlinkDomain` per GPU: the lowest address of its NVLink-connected set,
/// for sets whose every pair is linked.
fn nvlink_domains(
    topo: &Topology,
    selector: &GpuSelector,
    notes: &mut Vec<String>,
) -> BTreeMap<Bdf, String> {
    let gpus: BTreeSet<Bdf> = topo
        .functions
        .iter()
        .filter(|f| selector.role(f) == Role::Gpu)
        .map(|f| f.bdf)
        .collect();
    let mut seen = BTreeSet::new();
    let mut out = BTreeMap::new();
    for start in &gpus {
        if seen.contains(start) || !topo.nvlinks.iter().any(|l| l.a == *start || l.b == *start) {
            continue;
        }
        let mut set = BTreeSet::from([*start]);
        let mut stack = vec![*start];
        while let Some(g) = stack.pop() {
            for l in &topo.nvlinks {
                let other = if l.a == g {
                    l.b
                } else if l.b == g {
                    l.a
                } else {
                    continue;
                };
                if gpus.contains(&other) && set.insert(other) {
                    stack.push(other);
                }
            }
        }
        seen.extend(set.iter().copied());
        let list: Vec<Bdf> = set.iter().copied().collect();
        let complete = list.iter().enumerate().all(|(i, a)| {
            list[i + 1..]
                .iter()
                .all(|b| topo.nvlink_between(*a, *b).is_some())
        });
        if complete && list.len() > 1 {
            for g in &list {
                out.insert(*g, list[0].to_string());
            }
        } else if list.len() > 1 {
            notes.push(format!(
                "NVLink set {} is not fully connected: no nvlinkDomain (equal values must mean every pair is linked)",
                list.iter().map(Bdf::to_string).collect::<Vec<_>>().join(", ")
            ));
        }
    }
    out
}

/// `fmPartition<N>` per GPU: the partition of N GPUs holding it.
fn partition_attributes(
    partitions: Option<&[FmPartition]>,
    notes: &mut Vec<String>,
) -> BTreeMap<Bdf, BTreeMap<usize, u32>> {
    let mut out: BTreeMap<Bdf, BTreeMap<usize, u32>> = BTreeMap::new();
    let mut parts: Vec<&FmPartition> = partitions.unwrap_or_default().iter().collect();
    parts.sort_by_key(|p| p.id);
    for p in parts {
        let n = p.gpus.len();
        for g in &p.gpus {
            let sizes = out.entry(*g).or_default();
            match sizes.get(&n) {
                Some(first) => notes.push(format!(
                    "{g} is in Fabric Manager partitions {first} and {} of {n} GPUs: fmPartition{n} names {first} only",
                    p.id
                )),
                None => {
                    sizes.insert(n, p.id);
                }
            }
        }
    }
    out
}

/// One device with all its attributes.
fn device(
    topo: &Topology,
    f: &PciFunction,
    kind: DeviceKind,
    driver: &str,
    nvlink: &BTreeMap<Bdf, String>,
    fm: &BTreeMap<Bdf, BTreeMap<usize, u32>>,
    nics: &[Bdf],
) -> Device {
    let own = |id: &str| format!("{driver}/{id}");
    let s = |v: String| DeviceAttribute::String(v);
    let mut a = BTreeMap::new();
    a.insert(PCI_BUS_ID.to_string(), s(f.bdf.to_string()));
    a.insert(PCIE_ROOT.to_string(), s(f.host_bridge.clone()));
    if let Some(n) = topo.numa_of(f.bdf) {
        a.insert(NUMA_NODE.to_string(), DeviceAttribute::Int(i64::from(n)));
    }
    a.insert(own("kind"), s(kind.to_string()));
    a.insert(own("vendorID"), s(format!("{:04x}", f.vendor)));
    a.insert(own("deviceID"), s(format!("{:04x}", f.device)));
    for (id, v) in clique_values(topo, f) {
        a.insert(own(id), s(v));
    }
    if let Some(g) = f.iommu_group {
        a.insert(own("iommuGroup"), DeviceAttribute::Int(i64::from(g.0)));
    }
    if kind == DeviceKind::Gpu {
        if let Some(d) = nvlink.get(&f.bdf) {
            a.insert(own("nvlinkDomain"), s(d.clone()));
        }
        for (n, id) in fm.get(&f.bdf).into_iter().flatten() {
            a.insert(
                own(&format!("fmPartition{n}")),
                DeviceAttribute::Int(i64::from(*id)),
            );
        }
        if let Some((nic, class)) = nearest_nic(topo, f, nics) {
            a.insert(own("nearestNic"), s(nic.to_string()));
            a.insert(own("nearestNicClass"), s(class.to_string()));
        }
    }
    let prefix = match kind {
        DeviceKind::Gpu => "gpu",
        DeviceKind::Nic => "nic",
    };
    Device {
        name: names::device_name(prefix, f.bdf),
        attributes: a,
    }
}

/// The published NIC nearest `f` by PCIe class, the lowest address on a tie.
fn nearest_nic(topo: &Topology, f: &PciFunction, nics: &[Bdf]) -> Option<(Bdf, PathClass)> {
    nics.iter()
        .filter_map(|n| topo.function(*n))
        .map(|n| (classify_functions(topo, f, n).pcie_class, n.bdf))
        .min_by_key(|(c, b)| (c.pcie_rank().unwrap_or(u8::MAX), *b))
        .map(|(c, b)| (b, c))
}

#[cfg(test)]
mod tests;
