//! The GPU chooser: given the host topology, the devices still free and what a
//! VM needs (a GPU count, optionally RDMA NICs, devices it must include), the
//! best set and the reasons for it. What the kubelet's GetPreferredAllocation,
//! `p2p-host allocate` and `p2p-host plan --vm NAME=COUNT` ask.
//!
//! Best means, in this order:
//! 1. every chosen GPU in one clique under the policy level, and the nearest
//!    such set: the worst pair class, NVLink (or one Fabric Manager partition)
//!    before PIX, PXB, PHB, NODE, SYS;
//! 2. IOMMU groups whole: a group is taken with all its GPUs or not at all, and
//!    its other endpoints (a GPU's audio function) come along, named;
//! 3. the NICs nearest the GPUs;
//! 4. one NUMA node;
//! 5. the largest block of GPUs that can still be one clique left free for the
//!    next request (least fragmentation);
//! 6. the smallest sum of pair classes, then the lowest addresses.
//!
//! Deterministic: the same inputs give the same answer, whatever their order.

mod fm;
mod score;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::clique::MaxLevel;
use p2p_topology::bdf::Bdf;
use p2p_topology::classify::{classify_functions, PathClass};
use p2p_topology::select::{GpuSelector, Role};
use p2p_topology::topology::Topology;
use p2p_topology::IommuGroup;

pub use fm::{parse_fmpm_list, FmPartition, FmPartitionError};
use score::{Candidate, Matrix};

/// What one VM asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// GPUs wanted (at least 1).
    pub gpus: usize,
    /// RDMA NICs wanted (0 for none).
    pub nics: usize,
    /// GPUs the answer must hold (the kubelet's must-include ids).
    pub must_include: Vec<Bdf>,
    /// The farthest PCIe class at which two GPUs still share a clique.
    pub max_level: MaxLevel,
    /// Refuse, instead of answering with the best set and a reason, when no set
    /// of the size is one clique.
    pub strict: bool,
}

/// Why no set could be chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChooseError {
    /// Zero GPUs were asked for.
    #[error("the size must be at least 1 GPU")]
    ZeroSize,
    /// An address is not a function of the topology.
    #[error("{0} is not a PCI function of this host")]
    UnknownDevice(Bdf),
    /// An available device is neither a GPU nor an RDMA NIC.
    #[error(
        "{0} is neither a GPU nor an RDMA NIC (select test devices with --gpus or --gpu-class)"
    )]
    NotGpuOrNic(Bdf),
    /// An address is listed twice.
    #[error("{0} is listed twice")]
    Duplicate(Bdf),
    /// A must-include device is not among the available ones.
    #[error("{0} must be included but is not available")]
    MustIncludeNotAvailable(Bdf),
    /// A must-include device is not a GPU.
    #[error("{0} must be included but is not a GPU")]
    MustIncludeNotGpu(Bdf),
    /// More GPUs asked for than are available.
    #[error("{wanted} GPUs asked for, {available} available")]
    TooLarge {
        /// GPUs asked for.
        wanted: usize,
        /// GPUs available.
        available: usize,
    },
    /// IOMMU groups leave no set of exactly the size (groups come whole).
    #[error("no set of {wanted} GPUs keeps IOMMU groups whole: {why}")]
    GroupsDoNotFit {
        /// GPUs asked for.
        wanted: usize,
        /// Which groups were in the way.
        why: String,
    },
    /// `strict`: no set of the size is one clique under the level.
    #[error("no {wanted} available GPUs form one clique under {level} (the largest has {largest}); raise --max-level or ask for fewer")]
    NotOneClique {
        /// GPUs asked for.
        wanted: usize,
        /// The policy level.
        level: MaxLevel,
        /// GPUs in the largest clique available.
        largest: usize,
    },
    /// Fewer RDMA NICs available than asked for.
    #[error("{wanted} RDMA NICs asked for, {available} available")]
    NotEnoughNics {
        /// NICs asked for.
        wanted: usize,
        /// NICs available.
        available: usize,
    },
    /// With a Fabric Manager partition list: no whole, free partition of the size.
    #[error("no Fabric Manager partition of {wanted} GPUs is wholly available{}", if *.must_include { " and holds every must-include GPU" } else { "" })]
    NoPartition {
        /// GPUs asked for.
        wanted: usize,
        /// Whether must-include GPUs narrowed the partitions.
        must_include: bool,
    },
}

/// Why a device is in the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChosenRole {
    /// A GPU asked for.
    Gpu,
    /// An RDMA NIC asked for.
    Nic,
    /// Another endpoint of a chosen device's IOMMU group (VFIO takes groups whole).
    Companion,
}

/// One device of the answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ChosenDevice {
    /// Address of the device.
    pub bdf: Bdf,
    /// Why it is in the answer.
    pub role: ChosenRole,
    /// Its IOMMU group; None without an IOMMU.
    pub iommu_group: Option<IommuGroup>,
    /// Its NUMA node; None when unknown.
    pub numa_node: Option<u32>,
    /// One line: why this device.
    pub reason: String,
}

/// A set that was considered and lost, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Alternative {
    /// Its GPUs, in address order.
    pub gpus: Vec<Bdf>,
    /// The worst class between two of its GPUs (X for one GPU).
    pub worst_class: PathClass,
    /// The first criterion on which it lost to the chosen set.
    pub why_not: String,
}

/// The chooser's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Choice {
    /// The chosen GPUs, in address order.
    pub gpus: Vec<Bdf>,
    /// The chosen RDMA NICs, in address order.
    pub nics: Vec<Bdf>,
    /// Every device of the answer, GPUs then NICs then companions, with reasons.
    pub devices: Vec<ChosenDevice>,
    /// Every pair of GPUs may do P2P under the level (one clique).
    pub one_clique: bool,
    /// The worst class between two chosen GPUs (X for one GPU).
    pub worst_class: PathClass,
    /// NUMA nodes of the chosen GPUs, sorted.
    pub numa_nodes: Vec<u32>,
    /// The Fabric Manager partition the GPUs make up, when a list was given.
    pub fm_partition: Option<u32>,
    /// GPUs still free after this choice that can be one clique together (the
    /// largest such block).
    pub largest_free_block: usize,
    /// Why this set, in words.
    pub reasons: Vec<String>,
    /// The best sets that lost, up to three, and why.
    pub considered: Vec<Alternative>,
}

/// Chooses `req.gpus` GPUs (and `req.nics` RDMA NICs) among `available` on `topo`.
///
/// `available` holds the free GPUs and NICs; roles come from `selector`.
/// With `partitions` (Fabric Manager's shared NVSwitch model), only whole
/// partitions of exactly the size are candidates.
pub fn choose(
    topo: &Topology,
    selector: &GpuSelector,
    available: &[Bdf],
    req: &Request,
    partitions: Option<&[FmPartition]>,
) -> Result<Choice, ChooseError> {
    if req.gpus == 0 {
        return Err(ChooseError::ZeroSize);
    }
    let mut gpus = BTreeSet::new();
    let mut nics = BTreeSet::new();
    for b in available {
        let f = topo.function(*b).ok_or(ChooseError::UnknownDevice(*b))?;
        let fresh = match selector.role(f) {
            Role::Gpu => gpus.insert(*b),
            Role::Nic => nics.insert(*b),
            _ => return Err(ChooseError::NotGpuOrNic(*b)),
        };
        if !fresh {
            return Err(ChooseError::Duplicate(*b));
        }
    }
    for m in &req.must_include {
        let f = topo.function(*m).ok_or(ChooseError::UnknownDevice(*m))?;
        if selector.role(f) != Role::Gpu {
            return Err(ChooseError::MustIncludeNotGpu(*m));
        }
        if !gpus.contains(m) {
            return Err(ChooseError::MustIncludeNotAvailable(*m));
        }
    }
    if req.gpus > gpus.len() {
        return Err(ChooseError::TooLarge {
            wanted: req.gpus,
            available: gpus.len(),
        });
    }
    let free: BTreeSet<Bdf> = gpus.iter().chain(&nics).copied().collect();
    let (units, blocked) = gpu_units(topo, selector, &gpus, &free);
    let gpu_list: Vec<Bdf> = units.iter().flatten().copied().collect();
    let nic_list: Vec<Bdf> = nics.iter().copied().collect();
    let matrix = Matrix::new(topo, &gpu_list, &nic_list, req.max_level, partitions);

    let must: BTreeSet<Bdf> = req.must_include.iter().copied().collect();
    let sets: Vec<Vec<Bdf>> = match partitions {
        Some(parts) => {
            // A GPU of an activated partition is in use, whatever `available` says.
            let busy: BTreeSet<Bdf> = parts
                .iter()
                .filter(|p| p.active)
                .flat_map(|p| p.gpus.iter().copied())
                .collect();
            let sets: Vec<Vec<Bdf>> = parts
                .iter()
                .filter(|p| !p.active && p.gpus.len() == req.gpus)
                .filter(|p| p.gpus.iter().all(|g| !busy.contains(g)))
                .filter(|p| p.gpus.iter().all(|g| gpu_list.contains(g)))
                .filter(|p| must.iter().all(|m| p.gpus.contains(m)))
                .map(|p| p.gpus.iter().copied().collect::<BTreeSet<_>>())
                .map(|s| s.into_iter().collect())
                .collect();
            if sets.is_empty() {
                return Err(ChooseError::NoPartition {
                    wanted: req.gpus,
                    must_include: !must.is_empty(),
                });
            }
            sets
        }
        None => score::candidate_sets(&units, &must, req.gpus, &matrix),
    };
    if sets.is_empty() {
        let why = if blocked.is_empty() {
            "the groups' GPU counts do not add up to it".to_string()
        } else {
            blocked.join("; ")
        };
        return Err(ChooseError::GroupsDoNotFit {
            wanted: req.gpus,
            why,
        });
    }
    if req.nics > nic_list.len() {
        return Err(ChooseError::NotEnoughNics {
            wanted: req.nics,
            available: nic_list.len(),
        });
    }
    let mut candidates: Vec<Candidate> = sets
        .into_iter()
        .map(|s| Candidate::new(topo, s, &gpu_list, req.nics, &matrix))
        .collect();
    candidates.sort_by(|a, b| a.key.cmp(&b.key));
    candidates.dedup_by(|a, b| a.gpus == b.gpus);
    let best = candidates.remove(0);
    if req.strict && !best.key.one_clique() {
        return Err(ChooseError::NotOneClique {
            wanted: req.gpus,
            level: req.max_level,
            largest: matrix.largest_block(&gpu_list),
        });
    }
    Ok(answer(
        topo,
        selector,
        req,
        &matrix,
        &gpu_list,
        best,
        &candidates,
        partitions,
        &blocked,
    ))
}

/// The usable GPUs grouped by IOMMU group (each group whole), in address order,
/// and why other groups could not be used.
fn gpu_units(
    topo: &Topology,
    selector: &GpuSelector,
    gpus: &BTreeSet<Bdf>,
    free: &BTreeSet<Bdf>,
) -> (Vec<Vec<Bdf>>, Vec<String>) {
    let mut by_group: BTreeMap<IommuGroup, Vec<Bdf>> = BTreeMap::new();
    let mut units = Vec::new();
    for g in gpus {
        match topo.function(*g).and_then(|f| f.iommu_group) {
            Some(grp) => by_group.entry(grp).or_default().push(*g),
            None => units.push(vec![*g]),
        }
    }
    let mut blocked = Vec::new();
    for (grp, members) in by_group {
        let busy: Vec<String> = topo
            .functions
            .iter()
            .filter(|f| f.iommu_group == Some(grp) && !f.is_bridge)
            .filter(|f| matches!(selector.role(f), Role::Gpu | Role::Nic) && !free.contains(&f.bdf))
            .map(|f| f.bdf.to_string())
            .collect();
        if busy.is_empty() {
            units.push(members);
        } else {
            blocked.push(format!(
                "IOMMU group {grp} ({}) also holds {}, not available",
                members
                    .iter()
                    .map(Bdf::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                busy.join(", ")
            ));
        }
    }
    units.sort();
    (units, blocked)
}

/// Other endpoints of the IOMMU groups of `devices`: they go to the VM too.
fn companions(topo: &Topology, selector: &GpuSelector, devices: &[Bdf]) -> Vec<(Bdf, Bdf)> {
    let mut out = Vec::new();
    for d in devices {
        let Some(grp) = topo.function(*d).and_then(|f| f.iommu_group) else {
            continue;
        };
        for f in &topo.functions {
            let other = f.iommu_group == Some(grp) && !f.is_bridge && !devices.contains(&f.bdf);
            let plain = !matches!(selector.role(f), Role::Gpu | Role::Nic);
            if other && plain && !out.iter().any(|(b, _)| *b == f.bdf) {
                out.push((f.bdf, *d));
            }
        }
    }
    out.sort();
    out
}

#[allow(clippy::too_many_arguments)]
fn answer(
    topo: &Topology,
    selector: &GpuSelector,
    req: &Request,
    matrix: &Matrix,
    gpu_list: &[Bdf],
    best: Candidate,
    rest: &[Candidate],
    partitions: Option<&[FmPartition]>,
    blocked: &[String],
) -> Choice {
    let level = req.max_level;
    let n = best.gpus.len();
    let mut reasons = Vec::new();
    if n == 1 {
        reasons.push("one GPU: no peer to pair with".to_string());
    } else if best.key.one_clique() {
        reasons.push(format!(
            "all {n} GPUs in one clique under {level}; worst pair {}",
            best.worst_class
        ));
    } else {
        reasons.push(format!(
            "no {n} available GPUs form one clique under {level} (the largest has {}): \
             the nearest set, worst pair {}; the plan splits it into cliques",
            matrix.largest_block(gpu_list),
            best.worst_class
        ));
    }
    let fm_partition = partitions.and_then(|parts| {
        parts
            .iter()
            .find(|p| {
                let s: BTreeSet<_> = p.gpus.iter().collect();
                s == best.gpus.iter().collect()
            })
            .map(|p| p.id)
    });
    if let Some(id) = fm_partition {
        reasons.push(format!("the GPUs make up Fabric Manager partition {id}"));
    }
    if best.numa.len() == 1 {
        reasons.push(format!("one NUMA node ({})", best.numa[0]));
    } else if best.numa.is_empty() {
        reasons.push("NUMA node unknown".to_string());
    } else {
        let nodes: Vec<String> = best.numa.iter().map(u32::to_string).collect();
        reasons.push(format!("spans NUMA nodes {}", nodes.join(", ")));
    }
    reasons.push(format!(
        "leaves {} GPUs free, the largest block that can be one clique has {}",
        gpu_list.len() - n,
        best.largest_free
    ));
    reasons.extend(blocked.iter().map(|b| format!("skipped: {b}")));

    let mut devices = Vec::new();
    for g in &best.gpus {
        let peers: Vec<String> = best
            .gpus
            .iter()
            .filter(|p| *p != g)
            .map(|p| format!("{p} ({})", matrix.class(*g, *p)))
            .collect();
        let reason = if peers.is_empty() {
            "the GPU asked for".to_string()
        } else {
            format!("with {}", peers.join(", "))
        };
        devices.push(device(topo, *g, ChosenRole::Gpu, reason));
    }
    for (nic, class) in &best.nics {
        let reason = format!("nearest free RDMA NIC to the GPUs ({class})");
        devices.push(device(topo, *nic, ChosenRole::Nic, reason));
    }
    let taken: Vec<Bdf> = best
        .gpus
        .iter()
        .copied()
        .chain(best.nics.iter().map(|(b, _)| *b))
        .collect();
    for (c, of) in companions(topo, selector, &taken) {
        let grp = topo
            .function(c)
            .and_then(|f| f.iommu_group)
            .unwrap_or(IommuGroup(0));
        let reason = format!("in IOMMU group {grp} with {of}: VFIO assigns the group whole");
        devices.push(device(topo, c, ChosenRole::Companion, reason));
    }
    let considered = rest
        .iter()
        .take(3)
        .map(|c| Alternative {
            gpus: c.gpus.clone(),
            worst_class: c.worst_class,
            why_not: score::why_not(&best, c, level),
        })
        .collect();
    Choice {
        gpus: best.gpus.clone(),
        nics: best.nics.iter().map(|(b, _)| *b).collect(),
        devices,
        one_clique: best.key.one_clique(),
        worst_class: best.worst_class,
        numa_nodes: best.numa.clone(),
        fm_partition,
        largest_free_block: best.largest_free,
        reasons,
        considered,
    }
}

fn device(topo: &Topology, bdf: Bdf, role: ChosenRole, reason: String) -> ChosenDevice {
    ChosenDevice {
        bdf,
        role,
        iommu_group: topo.function(bdf).and_then(|f| f.iommu_group),
        numa_node: topo.numa_of(bdf),
        reason,
    }
}

/// Whether the chooser lets GPUs `a` and `b` share a clique under `level`:
/// NVLink-joined, in one Fabric Manager partition of `partitions`, or a PCIe
/// class within the level. The relation the DRA clique attributes encode
/// ([`crate::dra`]); the chooser's own pair matrix uses the same rule.
pub fn pair_allowed(
    topo: &Topology,
    a: Bdf,
    b: Bdf,
    level: MaxLevel,
    partitions: Option<&[FmPartition]>,
) -> bool {
    let (c, pcie) = pair_class(topo, a, b);
    let rank = if score::same_partition(partitions, a, b) {
        0
    } else {
        score::rank_of(c, pcie)
    };
    score::allows(rank, pcie, level)
}

/// The PCIe-or-NVLink class between two functions of `topo`.
fn pair_class(topo: &Topology, a: Bdf, b: Bdf) -> (PathClass, PathClass) {
    match (topo.function(a), topo.function(b)) {
        (Some(fa), Some(fb)) => {
            let p = classify_functions(topo, fa, fb);
            (p.class, p.pcie_class)
        }
        _ => (PathClass::Sys, PathClass::Sys),
    }
}

#[cfg(test)]
mod tests;
