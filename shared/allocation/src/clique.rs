//! Clique policy: partition one VM's GPUs into P2P cliques 0..15 such that
//! every pair inside a clique may do peer-to-peer under the policy level, with
//! NVLink-joined GPUs kept together, ids dense from 0, and every assignment
//! carrying the reasons an operator needs to audit it.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use p2p_topology::bdf::Bdf;
use p2p_topology::capability::{Clique, MAX_CLIQUE};
use p2p_topology::classify::{classify_functions, PathClass, PeerRoute};
use p2p_topology::topology::Topology;

/// Why a plan could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A GPU address given for the VM is not a function of the topology.
    #[error("{0} is not a PCI function of the topology")]
    UnknownGpu(Bdf),
    /// The same GPU address was given twice for the VM.
    #[error("{0} is listed twice")]
    Duplicate(Bdf),
    /// The GPUs would need more than 16 cliques at this level.
    #[error("the GPUs need {needed} cliques but the capability holds 16 (ids 0..15); raise --max-level or split the VM")]
    TooManyCliques {
        /// Cliques the plan would need, more than the 16 ids the capability holds.
        needed: usize,
    },
    /// The max level given is not a PCIe class (X or an NVLink class was given).
    #[error("max level must be a PCIe class (PIX, PXB, PHB, NODE, SYS), not {0}")]
    BadLevel(PathClass),
}

/// The farthest PCIe class at which two GPUs still share a clique.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(try_from = "PathClass", into = "PathClass")]
pub struct MaxLevel(PathClass);

impl MaxLevel {
    /// The design's default: same root complex ("same IOH").
    pub const DEFAULT: MaxLevel = MaxLevel(PathClass::Phb);

    /// The level `level`, or an error unless it is a PCIe class (PIX..SYS).
    pub fn new(level: PathClass) -> Result<Self, PlanError> {
        match level.pcie_rank() {
            Some(_) => Ok(Self(level)),
            None => Err(PlanError::BadLevel(level)),
        }
    }

    /// The PCIe path class this level stands for.
    pub fn class(self) -> PathClass {
        self.0
    }
}

impl Default for MaxLevel {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl TryFrom<PathClass> for MaxLevel {
    type Error = PlanError;
    fn try_from(c: PathClass) -> Result<Self, PlanError> {
        MaxLevel::new(c)
    }
}

impl From<MaxLevel> for PathClass {
    fn from(m: MaxLevel) -> PathClass {
        m.0
    }
}

impl fmt::Display for MaxLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// What the policy says about one GPU pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PairVerdict {
    /// First GPU of the pair.
    pub a: Bdf,
    /// Second GPU of the pair.
    pub b: Bdf,
    /// Path class as `nvidia-smi topo -m` prints it (NVLink wins over PCIe).
    pub class: PathClass,
    /// The PCIe path class alone, which the level is compared with.
    pub pcie_class: PathClass,
    /// The policy allows P2P between them (NVLink, or PCIe within the level).
    pub allowed: bool,
    /// They ended up in the same clique.
    pub same_clique: bool,
    /// One line: why allowed or not, and how traffic is routed.
    pub reason: String,
    /// Where the pair's peer requests turn around in the host tree (a
    /// switch, up to the root complex for ACS redirect, across root
    /// complexes): what `p2p-guest bench --host-plan` records as each
    /// pair's route. Absent in plans made before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<PeerRoute>,
}

/// One GPU's clique and the reasons for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Assignment {
    /// Address of the GPU.
    pub bdf: Bdf,
    /// Clique id the GPU gets, written into its P2P capability.
    pub clique: Clique,
    /// Why: which GPUs it shares the clique with, which it is kept apart from, and
    /// whether its NVLink group had to be split.
    pub reasons: Vec<String>,
}

/// The clique plan for one VM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CliquePlan {
    /// Name of the VM the plan is for, as the operator gave it.
    pub vm: String,
    /// The farthest PCIe class at which GPUs were allowed to share a clique.
    pub max_level: MaxLevel,
    /// One entry per GPU, in the order given.
    pub assignments: Vec<Assignment>,
    /// `cliques[id]` lists the GPUs of clique `id`.
    pub cliques: Vec<Vec<Bdf>>,
    /// Every unordered pair, in assignment order.
    pub pairs: Vec<PairVerdict>,
}

impl CliquePlan {
    /// The clique assigned to GPU `bdf`; None when the GPU is not in the plan.
    pub fn clique_of(&self, bdf: Bdf) -> Option<Clique> {
        self.assignments
            .iter()
            .find(|a| a.bdf == bdf)
            .map(|a| a.clique)
    }
}

/// Partitions `gpus` (one VM) into cliques under `level`.
///
/// Groups of GPUs joined by NVLink (transitively) are placed first, as units;
/// each unit joins the first clique all of whose members it may do P2P with,
/// else opens a new one. Because PCIe classes come from a tree, "within the
/// level" is an equivalence and this greedy pass finds the fewest cliques;
/// NVLink across the tree can break that, and then the reasons say so.
pub fn plan_cliques(
    topo: &Topology,
    vm: &str,
    gpus: &[Bdf],
    level: MaxLevel,
) -> Result<CliquePlan, PlanError> {
    let mut seen = BTreeSet::new();
    let mut fns = Vec::with_capacity(gpus.len());
    for g in gpus {
        fns.push(topo.function(*g).ok_or(PlanError::UnknownGpu(*g))?);
        if !seen.insert(*g) {
            return Err(PlanError::Duplicate(*g));
        }
    }
    let n = gpus.len();
    let paths: Vec<Vec<_>> = fns
        .iter()
        .map(|a| fns.iter().map(|b| classify_functions(topo, a, b)).collect())
        .collect();
    let allowed = |i: usize, j: usize| {
        let p = &paths[i][j];
        i == j || p.nvlink.is_some() || p.pcie_class.within(level.class())
    };

    let units = nvlink_units(n, |i, j| paths[i][j].nvlink.is_some());
    let mut cliques: Vec<Vec<usize>> = Vec::new();
    let mut split_notes: Vec<(usize, String)> = Vec::new();
    for unit in units {
        // A unit whose members cannot all pair up is placed member by member.
        let whole = unit.iter().all(|&i| unit.iter().all(|&j| allowed(i, j)));
        let pieces: Vec<Vec<usize>> = if whole {
            vec![unit]
        } else {
            for &i in &unit {
                split_notes.push((
                    i,
                    "its NVLink group could not stay together: some members have neither \
                     NVLink nor a PCIe path within the level between them"
                        .to_string(),
                ));
            }
            unit.into_iter().map(|i| vec![i]).collect()
        };
        for piece in pieces {
            let home = cliques
                .iter()
                .position(|c| c.iter().all(|&m| piece.iter().all(|&p| allowed(m, p))));
            match home {
                Some(k) => cliques[k].extend(piece),
                None => cliques.push(piece),
            }
        }
    }
    let mut ids = Vec::with_capacity(cliques.len());
    for k in 0..cliques.len() {
        let id = u8::try_from(k).ok().filter(|&k| k <= MAX_CLIQUE);
        ids.push(
            id.and_then(|k| Clique::new(k).ok())
                .ok_or(PlanError::TooManyCliques {
                    needed: cliques.len(),
                })?,
        );
    }
    let mut clique_of = vec![Clique::MIN; n];
    for (k, members) in cliques.iter_mut().enumerate() {
        members.sort_unstable();
        for &m in members.iter() {
            clique_of[m] = ids[k];
        }
    }

    let mut pairs = Vec::new();
    for i in 0..n {
        for j in i + 1..n {
            let p = &paths[i][j];
            pairs.push(PairVerdict {
                a: gpus[i],
                b: gpus[j],
                class: p.class,
                pcie_class: p.pcie_class,
                allowed: allowed(i, j),
                same_clique: clique_of[i] == clique_of[j],
                reason: pair_reason(p.class, p.pcie_class, &p.route, level, allowed(i, j)),
                route: Some(p.route.clone()),
            });
        }
    }

    let assignments = (0..n)
        .map(|i| {
            let mut reasons = Vec::new();
            let peers: Vec<String> = (0..n)
                .filter(|&j| j != i && clique_of[j] == clique_of[i])
                .map(|j| format!("{} ({})", gpus[j], paths[i][j].class))
                .collect();
            if peers.is_empty() {
                reasons.push("alone: no other GPU of the VM is within the level".to_string());
            } else {
                reasons.push(format!("with {}", peers.join(", ")));
            }
            let apart: Vec<String> = (0..n)
                .filter(|&j| j != i && clique_of[j] != clique_of[i])
                .map(|j| format!("{} ({})", gpus[j], paths[i][j].class))
                .collect();
            if !apart.is_empty() {
                reasons.push(format!(
                    "apart from {}: beyond {level} without NVLink",
                    apart.join(", ")
                ));
            }
            reasons.extend(
                split_notes
                    .iter()
                    .filter(|(k, _)| *k == i)
                    .map(|(_, s)| s.clone()),
            );
            Assignment {
                bdf: gpus[i],
                clique: clique_of[i],
                reasons,
            }
        })
        .collect();
    Ok(CliquePlan {
        vm: vm.to_string(),
        max_level: level,
        assignments,
        cliques: cliques
            .iter()
            .map(|c| c.iter().map(|&i| gpus[i]).collect())
            .collect(),
        pairs,
    })
}

/// Connected components of the NVLink graph, each sorted, in order of first member.
fn nvlink_units(n: usize, linked: impl Fn(usize, usize) -> bool) -> Vec<Vec<usize>> {
    let mut unit_of: Vec<Option<usize>> = vec![None; n];
    let mut units: Vec<Vec<usize>> = Vec::new();
    for start in 0..n {
        if unit_of[start].is_some() {
            continue;
        }
        let id = units.len();
        let mut stack = vec![start];
        let mut members = Vec::new();
        unit_of[start] = Some(id);
        while let Some(i) = stack.pop() {
            members.push(i);
            for (j, slot) in unit_of.iter_mut().enumerate() {
                if slot.is_none() && linked(i, j) {
                    *slot = Some(id);
                    stack.push(j);
                }
            }
        }
        members.sort_unstable();
        units.push(members);
    }
    units
}

fn pair_reason(
    class: PathClass,
    pcie: PathClass,
    route: &PeerRoute,
    level: MaxLevel,
    allowed: bool,
) -> String {
    let routing = match route {
        PeerRoute::Switch { at } => format!("PCIe turns in the switch at {at}"),
        PeerRoute::AcsRedirect { redirected_by, .. } => format!(
            "ACS redirects PCIe peer requests at {} up to the root complex and IOMMU",
            redirected_by
                .iter()
                .map(Bdf::to_string)
                .collect::<Vec<_>>()
                .join(",")
        ),
        PeerRoute::AcsUnknown { unknown, .. } => format!(
            "ACS unknown on {} (config not readable)",
            unknown
                .iter()
                .map(Bdf::to_string)
                .collect::<Vec<_>>()
                .join(",")
        ),
        PeerRoute::RootComplex { host_bridge } => {
            format!("PCIe through root complex {host_bridge}")
        }
        PeerRoute::HostBridges => "PCIe between host bridges".to_string(),
        PeerRoute::Sockets => "PCIe across sockets".to_string(),
        PeerRoute::UnknownNuma => {
            "PCIe between host bridges, a NUMA node unknown (-1), counted as SYS".to_string()
        }
        PeerRoute::SameFunction => "same function".to_string(),
    };
    match (class, allowed) {
        (PathClass::Nv(_), _) => format!("{class}: NVLink; {routing}"),
        (_, true) => format!("{pcie} within {level}; {routing}"),
        (_, false) => format!("{pcie} beyond {level}; {routing}"),
    }
}
