//! Pair classification: the path class `nvidia-smi topo -m` prints, computed
//! from the topology model alone, and how peer traffic between the pair is
//! routed (switch-local, redirected by ACS, through the root complex, across
//! host bridges or sockets) and whether the IOMMU translates it.

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::bdf::Bdf;
use crate::pci::PciePortType;
use crate::topology::{AcsState, PciFunction, Topology};

/// The connection classes of `nvidia-smi topo -m`, in its spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PathClass {
    /// The device itself.
    X,
    /// At most one PCIe bridge (one switch) between the pair.
    Pix,
    /// Several PCIe bridges, without the host bridge.
    Pxb,
    /// Through one PCIe host bridge.
    Phb,
    /// Between host bridges within one NUMA node.
    Node,
    /// Across the SMP interconnect between NUMA nodes.
    Sys,
    /// A bonded set of NVLinks; None when the count is not known.
    Nv(Option<u32>),
}

impl PathClass {
    /// Rank of a PCIe class, nearest first; NVLink and X have none.
    pub fn pcie_rank(self) -> Option<u8> {
        match self {
            PathClass::Pix => Some(0),
            PathClass::Pxb => Some(1),
            PathClass::Phb => Some(2),
            PathClass::Node => Some(3),
            PathClass::Sys => Some(4),
            PathClass::X | PathClass::Nv(_) => None,
        }
    }

    /// True when this PCIe class is no farther than `level`.
    pub fn within(self, level: PathClass) -> bool {
        match (self.pcie_rank(), level.pcie_rank()) {
            (Some(a), Some(b)) => a.cmp(&b) != Ordering::Greater,
            _ => false,
        }
    }
}

impl fmt::Display for PathClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathClass::X => f.write_str("X"),
            PathClass::Pix => f.write_str("PIX"),
            PathClass::Pxb => f.write_str("PXB"),
            PathClass::Phb => f.write_str("PHB"),
            PathClass::Node => f.write_str("NODE"),
            PathClass::Sys => f.write_str("SYS"),
            PathClass::Nv(Some(n)) => write!(f, "NV{n}"),
            PathClass::Nv(None) => f.write_str("NV?"),
        }
    }
}

/// Why a string is not a path class.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a path class (X, PIX, PXB, PHB, NODE, SYS, NV<n>)")]
pub struct PathClassParseError(pub String);

impl FromStr for PathClass {
    type Err = PathClassParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let up = s.trim().to_ascii_uppercase();
        Ok(match up.as_str() {
            "X" => PathClass::X,
            "PIX" => PathClass::Pix,
            "PXB" => PathClass::Pxb,
            "PHB" => PathClass::Phb,
            "NODE" => PathClass::Node,
            "SYS" => PathClass::Sys,
            "NV?" => PathClass::Nv(None),
            _ => match up.strip_prefix("NV").map(str::parse::<u32>) {
                Some(Ok(n)) => PathClass::Nv(Some(n)),
                _ => return Err(PathClassParseError(s.to_string())),
            },
        })
    }
}

impl Serialize for PathClass {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PathClass {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// Where peer-to-peer requests between the pair turn around.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PeerRoute {
    /// Both addresses are the same function.
    SameFunction,
    /// Inside the bridge or switch at `at`, below the root complex: the IOMMU
    /// does not see it.
    Switch {
        /// The bridge where the paths from the pair meet (their nearest common upstream bridge).
        at: Bdf,
    },
    /// The pair meets at `at`, but ACS P2P Request Redirect on `redirected_by`
    /// sends requests up to the root complex (and its IOMMU).
    AcsRedirect {
        /// The bridge where the paths from the pair meet.
        at: Bdf,
        /// Ports just below `at` on the pair's path that have ACS P2P Request Redirect on.
        redirected_by: Vec<Bdf>,
    },
    /// The pair meets at `at`, but ACS could not be read on `unknown`.
    AcsUnknown {
        /// The bridge where the paths from the pair meet.
        at: Bdf,
        /// Ports just below `at` on the pair's path whose ACS is unknown or was not read.
        unknown: Vec<Bdf>,
    },
    /// Through the root complex of `host_bridge`.
    RootComplex {
        /// sysfs name of the host bridge both functions sit below (`pci0000:00`).
        host_bridge: String,
    },
    /// Between two host bridges of one NUMA node.
    HostBridges,
    /// Across the interconnect between NUMA nodes (sockets).
    Sockets,
    /// Between host bridges, one or both with an unknown NUMA node (-1):
    /// counted as different nodes (SYS), since nothing says they share one.
    UnknownNuma,
}

impl PeerRoute {
    /// True when requests reach the root complex (and so the IOMMU, if on).
    pub fn reaches_root_complex(&self) -> Option<bool> {
        match self {
            PeerRoute::SameFunction | PeerRoute::Switch { .. } => Some(false),
            PeerRoute::AcsUnknown { .. } => None,
            _ => Some(true),
        }
    }
}

/// A bridge on a pair's path and what its ACS does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PathBridge {
    /// Address of the bridge.
    pub bdf: Bdf,
    /// Its PCIe port type (root, switch upstream or downstream); None when unknown.
    pub port_type: Option<PciePortType>,
    /// Its ACS capability and controls, as far as they were read.
    pub acs: AcsState,
}

/// NVLinks joining a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NvLinkBond {
    /// Links in the bond; None when the source could not count them.
    pub count: Option<u32>,
}

/// Everything vp2p knows about the path between two functions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PairPath {
    /// First function of the pair.
    pub a: Bdf,
    /// Second function of the pair.
    pub b: Bdf,
    /// What `nvidia-smi topo -m` prints: NVLink wins over PCIe.
    pub class: PathClass,
    /// The PCIe class alone.
    pub pcie_class: PathClass,
    /// The NVLink bond joining the pair, if any.
    pub nvlink: Option<NvLinkBond>,
    /// Where peer requests between the pair turn around.
    pub route: PeerRoute,
    /// Bridges from `a` up to where the path turns and down to `b`.
    pub bridges: Vec<PathBridge>,
    /// IOMMU groups of `a` and `b`; None for a side outside any group.
    pub iommu_groups: [Option<crate::IommuGroup>; 2],
    /// Peer requests reach the root complex and both sides sit in IOMMU groups,
    /// so the IOMMU translates them. None when ACS is unknown.
    pub via_iommu: Option<bool>,
}

/// Why a pair could not be classified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClassifyError {
    /// The address is not a function of the topology.
    #[error("{0} is not in the topology")]
    UnknownFunction(Bdf),
}

/// Classifies the path between `a` and `b`.
pub fn classify(topo: &Topology, a: Bdf, b: Bdf) -> Result<PairPath, ClassifyError> {
    let fa = topo.function(a).ok_or(ClassifyError::UnknownFunction(a))?;
    let fb = topo.function(b).ok_or(ClassifyError::UnknownFunction(b))?;
    Ok(classify_functions(topo, fa, fb))
}

/// Classifies the path between two functions of `topo`.
pub fn classify_functions(topo: &Topology, fa: &PciFunction, fb: &PciFunction) -> PairPath {
    let (a, b) = (fa.bdf, fb.bdf);
    let nvlink = if a == b {
        None
    } else {
        topo.nvlink_between(a, b).map(|count| NvLinkBond { count })
    };
    let iommu_groups = [fa.iommu_group, fb.iommu_group];
    let anc_a = topo.ancestors(a);
    let anc_b = topo.ancestors(b);

    let (pcie_class, route, path): (PathClass, PeerRoute, Vec<Bdf>) = if a == b {
        (PathClass::X, PeerRoute::SameFunction, Vec::new())
    } else if fa.host_bridge != fb.host_bridge {
        let mut path = anc_a.clone();
        path.extend(anc_b.iter().rev());
        let (na, nb) = (topo.numa_of(a), topo.numa_of(b));
        if na.is_some() && na == nb {
            (PathClass::Node, PeerRoute::HostBridges, path)
        } else if na.is_none() || nb.is_none() {
            (PathClass::Sys, PeerRoute::UnknownNuma, path)
        } else {
            (PathClass::Sys, PeerRoute::Sockets, path)
        }
    } else {
        match anc_a.iter().position(|x| anc_b.contains(x)) {
            None => {
                let mut path = anc_a.clone();
                path.extend(anc_b.iter().rev());
                let route = PeerRoute::RootComplex {
                    host_bridge: fa.host_bridge.clone(),
                };
                (PathClass::Phb, route, path)
            }
            Some(ia) => {
                let meet = anc_a[ia];
                let ib = anc_b.iter().position(|x| *x == meet).unwrap_or(anc_b.len());
                let mut path: Vec<Bdf> = anc_a[..=ia].to_vec();
                path.extend(anc_b[..ib].iter().rev());
                let class = if switch_units(topo, &path) <= 1 {
                    PathClass::Pix
                } else {
                    PathClass::Pxb
                };
                // Requests enter the meeting switch at the port just below it.
                let ingress_a = if ia == 0 { None } else { Some(anc_a[ia - 1]) };
                let ingress_b = if ib == 0 { None } else { Some(anc_b[ib - 1]) };
                (class, meet_route(topo, meet, [ingress_a, ingress_b]), path)
            }
        }
    };

    let bridges = path
        .iter()
        .filter_map(|bdf| topo.function(*bdf))
        .map(|f| PathBridge {
            bdf: f.bdf,
            port_type: f.pcie_port_type,
            acs: f.acs.clone(),
        })
        .collect();
    let grouped = iommu_groups.iter().all(Option::is_some);
    let via_iommu = route.reaches_root_complex().map(|rc| rc && grouped);
    let class = match nvlink {
        Some(bond) => PathClass::Nv(bond.count),
        None => pcie_class,
    };
    PairPath {
        a,
        b,
        class,
        pcie_class,
        nvlink,
        route,
        bridges,
        iommu_groups,
        via_iommu,
    }
}

/// Route of a pair that meets at bridge `meet`, given the ports requests enter
/// it by. Ports with ACS P2P Request Redirect on send requests upstream.
fn meet_route(topo: &Topology, meet: Bdf, ingress: [Option<Bdf>; 2]) -> PeerRoute {
    let mut redirected_by = Vec::new();
    let mut unknown = Vec::new();
    for port in ingress.into_iter().flatten() {
        let Some(f) = topo.function(port) else {
            continue;
        };
        if !f.is_bridge {
            continue; // a function directly on `meet`'s bus: no port of its own
        }
        match &f.acs {
            AcsState::Present(acs) if acs.control.request_redirect => redirected_by.push(port),
            AcsState::Present(_) | AcsState::Absent => {}
            AcsState::Unknown { .. } | AcsState::NotRead => unknown.push(port),
        }
    }
    if !redirected_by.is_empty() {
        PeerRoute::AcsRedirect {
            at: meet,
            redirected_by,
        }
    } else if !unknown.is_empty() {
        PeerRoute::AcsUnknown { at: meet, unknown }
    } else {
        PeerRoute::Switch { at: meet }
    }
}

/// Counts the PCIe switches and bridges on a path, treating a switch's upstream
/// port and its downstream ports as one unit, as `nvidia-smi` and NCCL do.
fn switch_units(topo: &Topology, path: &[Bdf]) -> usize {
    let unit = |bdf: Bdf| -> Bdf {
        let Some(f) = topo.function(bdf) else {
            return bdf;
        };
        if f.pcie_port_type == Some(PciePortType::SwitchDownstream) {
            if let Some(parent) = f.parent.and_then(|p| topo.function(p)) {
                if parent.pcie_port_type == Some(PciePortType::SwitchUpstream) {
                    return parent.bdf;
                }
            }
        }
        bdf
    };
    path.iter().map(|b| unit(*b)).collect::<BTreeSet<_>>().len()
}

impl schemars::JsonSchema for PathClass {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PathClass".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "Path class as nvidia-smi topo -m prints it: X, PIX, PXB, PHB, NODE, SYS, NV<count> (NV? when the count is unknown)",
            "pattern": "^(X|PIX|PXB|PHB|NODE|SYS|NV[0-9]+|NV\\?)$"
        })
    }
}
