//! How well a node can serve one claim of vp2p's devices, from its published
//! devices and which of them are free: the nearest level at which the claim's
//! GPUs (and its NIC) fit, and whether taking them costs the node a larger
//! VM it could still take. A scheduler extender (`p2p-host dra extender`)
//! scores each feasible node by it, so a VM lands where its nearest level is
//! free and, among such nodes, where it spoils no room a larger VM needs.
//! Pure: devices in, a score out.
//!
//! Which devices a claim takes is the scheduler's allocator's choice, not
//! the extender's: [`taken_by`] follows its order (devices as published,
//! the first group that fits), so the room left is the room it will leave.
//!
//! The levels are those of the shipped tiered claims, nearest first: a whole
//! Fabric Manager partition of the claim's size (`fmPartition<N>`), NVLink
//! among GPUs without partitions (`nvlinkDomain`), then the clique attributes
//! (`cliquePix` .. `cliqueNode`), then anywhere on the node.

use std::fmt;
use std::str::FromStr;

use super::{Device, DeviceAttribute};

/// What one claim asks of a node: GPUs, and whether an RDMA NIC beside them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    /// GPUs in the claim.
    pub gpus: usize,
    /// Whether the claim also asks for a NIC.
    pub nic: bool,
}

/// Why a text is not an [`Ask`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not an ask: GPUs, optionally +nic (e.g. 4+nic, 8)")]
pub struct AskParseError(pub String);

impl FromStr for Ask {
    type Err = AskParseError;

    /// `N` or `N+nic`, N at least 1.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (count, nic) = match s.strip_suffix("+nic") {
            Some(c) => (c, true),
            None => (s, false),
        };
        match count.parse::<usize>() {
            Ok(gpus) if gpus > 0 => Ok(Ask { gpus, nic }),
            _ => Err(AskParseError(s.to_string())),
        }
    }
}

impl fmt::Display for Ask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.gpus, if self.nic { "+nic" } else { "" })
    }
}

/// A level a claim's devices can share, nearest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// One Fabric Manager partition of exactly the claim's size, all free.
    FmPartition,
    /// One NVLink domain (GPUs without Fabric Manager partitions).
    NvLink,
    /// One PCIe switch.
    Pix,
    /// Switches below one root port.
    Pxb,
    /// One root complex.
    Phb,
    /// One NUMA node.
    Node,
    /// Anywhere on the node.
    Anywhere,
}

impl Level {
    /// Every level, nearest first.
    pub const ALL: [Level; 7] = [
        Level::FmPartition,
        Level::NvLink,
        Level::Pix,
        Level::Pxb,
        Level::Phb,
        Level::Node,
        Level::Anywhere,
    ];

    /// The attribute (in the driver's domain) whose equal value holds the
    /// level; None for anywhere. `gpus` names the partition size.
    pub fn attribute(self, gpus: usize) -> Option<String> {
        Some(match self {
            Level::FmPartition => format!("fmPartition{gpus}"),
            Level::NvLink => "nvlinkDomain".into(),
            Level::Pix => "cliquePix".into(),
            Level::Pxb => "cliquePxb".into(),
            Level::Phb => "cliquePhb".into(),
            Level::Node => "cliqueNode".into(),
            Level::Anywhere => return None,
        })
    }

    /// Its name in the shipped tiered claims.
    pub fn name(self) -> &'static str {
        match self {
            Level::FmPartition => "fm-partition",
            Level::NvLink => "nvlink",
            Level::Pix => "switch",
            Level::Pxb => "switches",
            Level::Phb => "root-complex",
            Level::Node => "numa-node",
            Level::Anywhere => "anywhere",
        }
    }
}

/// Where a claim fits best on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fit {
    /// The nearest level it fits at.
    pub level: Level,
    /// Free GPUs the chosen group keeps after the claim (the smallest over
    /// the groups of that level it fits in): 0 when it fills a group exactly.
    pub left_in_group: usize,
    /// Whether the devices the allocator takes for it leave the node room
    /// for fewer of a larger kept ask than before ([`fit_keeping`], [`room`]).
    pub spoils: bool,
}

/// The most an extender may score a node (the scheduler's
/// `MaxExtenderPriority`, k8s.io/kube-scheduler extender/v1).
pub const MAX_SCORE: i64 = 10;

impl Fit {
    /// The node's score, 0 ..= [`MAX_SCORE`]: two points a level (both NVLink
    /// levels alike), one taken off when the placement spoils a larger ask.
    pub fn score(self) -> i64 {
        let rank: i64 = match self.level {
            Level::FmPartition | Level::NvLink => 0,
            Level::Pix => 1,
            Level::Pxb => 2,
            Level::Phb => 3,
            Level::Node => 4,
            Level::Anywhere => 5,
        };
        (MAX_SCORE - 2 * rank - i64::from(self.spoils)).max(0)
    }
}

/// One published device as the scorer sees it.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    /// The device.
    pub device: &'a Device,
    /// Whether no claim holds it.
    pub free: bool,
}

/// The best fit of `ask` on a node whose devices under `driver` are
/// `devices`; None when it does not fit at all. GPUs and NICs are told
/// apart by the `kind` attribute.
pub fn best_fit(driver: &str, devices: &[Candidate<'_>], ask: Ask) -> Option<Fit> {
    let node = NodeView::new(driver, devices);
    if ask.gpus == 0 || (ask.nic && node.free_nics.is_empty()) {
        return None;
    }
    Level::ALL.into_iter().find_map(|level| {
        let left_in_group = node
            .groups(ask, level)
            .iter()
            .map(|g| g.free.len() - ask.gpus)
            .min()?;
        Some(Fit {
            level,
            left_in_group,
            spoils: false,
        })
    })
}

/// How many claims of `ask` the node's free devices hold, each placed at
/// its best level as the allocator would take it ([`taken_by`]) before the
/// next: the room a node has for one size.
pub fn room(driver: &str, devices: &[Candidate<'_>], ask: Ask) -> usize {
    let mut left: Vec<Candidate<'_>> = devices.to_vec();
    let mut n = 0;
    while let Some(fit) = best_fit(driver, &left, ask) {
        let taken = taken_by(driver, &left, ask, fit.level);
        if taken.is_empty() {
            break;
        }
        for i in taken {
            left[i].free = false;
        }
        n += 1;
    }
    n
}

/// [`best_fit`], with [`Fit::spoils`] set: whether the devices
/// [`taken_by`] the claim at its level leave [`room`] for fewer of one of
/// `keep` (the asks larger than this one) than the node had before.
pub fn fit_keeping(driver: &str, devices: &[Candidate<'_>], ask: Ask, keep: &[Ask]) -> Option<Fit> {
    let fit = best_fit(driver, devices, ask)?;
    let taken = taken_by(driver, devices, ask, fit.level);
    let after: Vec<Candidate<'_>> = devices
        .iter()
        .enumerate()
        .map(|(i, c)| Candidate {
            device: c.device,
            free: c.free && !taken.contains(&i),
        })
        .collect();
    let spoils = keep
        .iter()
        .filter(|k| k.gpus > ask.gpus)
        .any(|&k| room(driver, &after, k) < room(driver, devices, k));
    Some(Fit { spoils, ..fit })
}

/// The devices (indices into `devices`) the scheduler's allocator takes for
/// `ask` at `level`: it walks the devices in their published order, so the
/// group it takes is the one of the first free GPU whose group fits (with a
/// free NIC of the same group at the PCIe levels), and of it the first free
/// GPUs; the NIC is the first free one sharing the group, or at the NVLink
/// levels and anywhere the first free one. Empty when the ask does not fit
/// at that level.
pub fn taken_by(driver: &str, devices: &[Candidate<'_>], ask: Ask, level: Level) -> Vec<usize> {
    NodeView::new(driver, devices)
        .groups(ask, level)
        .into_iter()
        .next()
        .map(|g| g.free.into_iter().take(ask.gpus).chain(g.nic).collect())
        .unwrap_or_default()
}

/// One node's devices, told apart by kind, in their published order.
struct NodeView<'d, 'a> {
    driver: &'d str,
    devices: &'d [Candidate<'a>],
    gpus: Vec<usize>,
    free_nics: Vec<usize>,
}

/// GPUs sharing one value of a level's attribute (at `Anywhere`, every GPU),
/// with the NIC a claim would take beside them.
struct Group {
    /// Its free GPUs, in published order.
    free: Vec<usize>,
    /// The NIC taken with them; None when the ask has none.
    nic: Option<usize>,
}

impl<'d, 'a> NodeView<'d, 'a> {
    fn new(driver: &'d str, devices: &'d [Candidate<'a>]) -> Self {
        let mut view = NodeView {
            driver,
            devices,
            gpus: Vec::new(),
            free_nics: Vec::new(),
        };
        for (i, c) in devices.iter().enumerate() {
            match view.attr(i, "kind").and_then(DeviceAttribute::as_str) {
                Some("gpu") => view.gpus.push(i),
                Some("nic") if c.free => view.free_nics.push(i),
                _ => {}
            }
        }
        view
    }

    fn attr(&self, i: usize, id: &str) -> Option<&'a DeviceAttribute> {
        let driver = self.driver;
        self.devices[i]
            .device
            .attribute(driver, &format!("{driver}/{id}"))
    }

    /// The groups at `level` that `ask` fits in, in the order the
    /// allocator meets them (by their first free GPU): a partition must be
    /// whole and all free, NVLink leaves partitioned GPUs out, and at the
    /// PCIe levels the NIC must share the group's value.
    fn groups(&self, ask: Ask, level: Level) -> Vec<Group> {
        let Some(id) = level.attribute(ask.gpus) else {
            let free: Vec<usize> = self.free_gpus().collect();
            return self
                .with_nic(ask, None)
                .filter(|_| free.len() >= ask.gpus)
                .map(|nic| vec![Group { free, nic }])
                .unwrap_or_default();
        };
        let partition = format!("fmPartition{}", ask.gpus);
        let member = |i: &usize| !(level == Level::NvLink && self.attr(*i, &partition).is_some());
        // (value, GPUs with it, its free GPUs), one per value, in published order.
        let mut groups: Vec<(&DeviceAttribute, usize, Vec<usize>)> = Vec::new();
        for i in self.gpus.iter().copied().filter(member) {
            let Some(v) = self.attr(i, &id) else {
                continue;
            };
            let at = match groups.iter().position(|(value, ..)| *value == v) {
                Some(at) => at,
                None => {
                    groups.push((v, 0, Vec::new()));
                    groups.len() - 1
                }
            };
            groups[at].1 += 1;
            if self.devices[i].free {
                groups[at].2.push(i);
            }
        }
        groups.retain(|(_, _, free)| !free.is_empty());
        groups.sort_by_key(|(_, _, free)| free[0]);
        let pcie = !matches!(level, Level::FmPartition | Level::NvLink);
        groups
            .into_iter()
            .filter(|(_, all, free)| {
                free.len() >= ask.gpus
                    && (level != Level::FmPartition || *all == ask.gpus && free.len() == ask.gpus)
            })
            .filter_map(|(v, _, free)| {
                let nic = self.with_nic(ask, pcie.then_some((id.as_str(), v)))?;
                Some(Group { free, nic })
            })
            .collect()
    }

    fn free_gpus(&self) -> impl Iterator<Item = usize> + '_ {
        self.gpus.iter().copied().filter(|&i| self.devices[i].free)
    }

    /// The NIC an ask takes: `Some(None)` when it asks none, else the
    /// first free one, sharing the attribute `id`'s value `v` when given;
    /// None when no NIC will do.
    fn with_nic(
        &self,
        ask: Ask,
        shared: Option<(&str, &DeviceAttribute)>,
    ) -> Option<Option<usize>> {
        if !ask.nic {
            return Some(None);
        }
        self.free_nics
            .iter()
            .copied()
            .find(|&n| shared.is_none_or(|(id, v)| self.attr(n, id) == Some(v)))
            .map(Some)
    }
}

#[cfg(test)]
mod tests;
