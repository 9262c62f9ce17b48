//! The order a node's devices are published in.
//!
//! Kubernetes' structured allocator tries a pool's devices in the order its
//! slices list them and keeps the first set that meets a claim's request and
//! constraints (`allocateOne` in k8s.io/dynamic-resource-allocation,
//! structured/internal/stable, v0.37.2: pools, then slices, then devices, in
//! order, backtracking on a constraint). So where a node offers a claim
//! several equally good groups, the publication's order picks the one it
//! takes, and with it the room left for the next claim.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use p2p_topology::bdf::Bdf;
use p2p_topology::topology::Topology;

use super::{clique_values, DeviceKind};

/// How a node's GPUs are ordered in its slices (NICs follow the GPUs in
/// address order either way). The default is [`DeviceOrder::NicLast`],
/// chosen on the fleet benchmark's tuning seeds (docs/fleet.md, "Tuning").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DeviceOrder {
    /// PCI address order, as the kernel lists functions.
    Address,
    /// At each level from the NUMA node down to the switch, GPUs whose
    /// group holds no published NIC come before those whose group does, so
    /// a claim that asks no NIC takes GPUs away from the NICs first and a
    /// NIC's neighbours stay free for a VM that asks for one.
    #[default]
    NicLast,
}

impl DeviceOrder {
    /// The name `--device-order` takes.
    pub fn name(self) -> &'static str {
        match self {
            DeviceOrder::Address => "address",
            DeviceOrder::NicLast => "nic-last",
        }
    }
}

impl fmt::Display for DeviceOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a text is not a [`DeviceOrder`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown device order `{0}` (address, nic-last)")]
pub struct UnknownDeviceOrder(pub String);

impl FromStr for DeviceOrder {
    type Err = UnknownDeviceOrder;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [DeviceOrder::Address, DeviceOrder::NicLast]
            .into_iter()
            .find(|o| o.name() == s)
            .ok_or_else(|| UnknownDeviceOrder(s.to_string()))
    }
}

/// The levels a GPU's key compares, outermost first.
const LEVELS: [&str; 4] = ["cliqueNode", "cliquePhb", "cliquePxb", "cliquePix"];

/// Puts `devices` (in address order) in `order`: per level, outermost
/// first, a GPU's key is whether its group holds a NIC, then the group's
/// first address, so groups stay together and, NICs aside, keep the
/// kernel's order (a node without NICs publishes in address order).
pub(super) fn arrange(topo: &Topology, devices: &mut Vec<(Bdf, DeviceKind)>, order: DeviceOrder) {
    if order == DeviceOrder::Address {
        return;
    }
    let values = |bdf: Bdf| -> Vec<(&'static str, String)> {
        topo.function(bdf)
            .map(|f| clique_values(topo, f))
            .unwrap_or_default()
    };
    let (gpus, nics): (Vec<_>, Vec<_>) =
        devices.drain(..).partition(|(_, k)| *k == DeviceKind::Gpu);
    let nic_groups: BTreeSet<(&'static str, String)> =
        nics.iter().flat_map(|(b, _)| values(*b)).collect();
    // Each group's first GPU in address order stands for the group.
    let mut first: BTreeMap<(&'static str, String), Bdf> = BTreeMap::new();
    let gpu_values: Vec<_> = gpus.iter().map(|(b, _)| values(*b)).collect();
    for ((bdf, _), v) in gpus.iter().zip(&gpu_values) {
        for group in v {
            first.entry(group.clone()).or_insert(*bdf);
        }
    }
    let key = |bdf: Bdf, v: &[(&'static str, String)]| -> Vec<(bool, Bdf)> {
        LEVELS
            .iter()
            .map(|level| match v.iter().find(|(name, _)| name == level) {
                Some(group) => (nic_groups.contains(group), first[group]),
                None => (false, bdf),
            })
            .collect()
    };
    let mut keyed: Vec<_> = gpus
        .into_iter()
        .zip(&gpu_values)
        .map(|(d, v)| (key(d.0, v), d))
        .collect();
    // Stable: GPUs of one group keep their address order.
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    devices.extend(keyed.into_iter().map(|(_, d)| d));
    devices.extend(nics);
}
