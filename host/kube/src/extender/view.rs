//! What the extender reads of the cluster: each claim reduced to its spec
//! and the devices it holds, each of the driver's slices to its node's
//! devices (made once, as the watch brings the object), and from them one
//! view per prioritize call: every node's devices, which of them are taken.

use std::collections::{BTreeMap, BTreeSet};

use p2p_allocation::dra::score::{fit_keeping, Ask, Candidate};
use p2p_allocation::dra::{Device, ResourceSliceSpec};
use serde::Deserialize;
use serde_json::Value;

use super::wire::HostPriority;

/// One ResourceClaim, as scoring reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldClaim {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its `spec`, as the API server sent it.
    pub spec: Value,
    /// The devices its allocation holds: (driver, pool, device).
    pub held: Vec<(String, String, String)>,
}

impl HeldClaim {
    /// The claim of its JSON (missing fields read as empty).
    pub fn from_object(o: &Value) -> Self {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let results = &o["status"]["allocation"]["devices"]["results"];
        HeldClaim {
            namespace: text(&o["metadata"]["namespace"]),
            name: text(&o["metadata"]["name"]),
            spec: o["spec"].clone(),
            held: results
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| {
                    Some((
                        r["driver"].as_str()?.to_string(),
                        r["pool"].as_str()?.to_string(),
                        r["device"].as_str()?.to_string(),
                    ))
                })
                .collect(),
        }
    }
}

/// One ResourceSlice's devices and where they are; None (from
/// [`NodeDevices::from_object`]) for a slice that is not one of a node's.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeDevices {
    /// The driver that published it.
    pub driver: String,
    /// The node it describes.
    pub node: String,
    /// Its devices.
    pub devices: Vec<Device>,
}

impl NodeDevices {
    /// The slice of its JSON; None when its spec is not a node's slice.
    pub fn from_object(o: &Value) -> Option<Self> {
        let spec = ResourceSliceSpec::deserialize(&o["spec"]).ok()?;
        Some(NodeDevices {
            driver: spec.driver,
            node: spec.node_name,
            devices: spec.devices,
        })
    }
}

/// Every node's devices under one driver, and the devices some claim holds.
#[derive(Debug, Default)]
pub struct DriverView<'a> {
    /// Node name -> its devices.
    pub devices: BTreeMap<&'a str, Vec<&'a Device>>,
    /// Pool -> its devices held by an allocated claim.
    pub taken: BTreeMap<&'a str, BTreeSet<&'a str>>,
}

impl<'a> DriverView<'a> {
    /// The view of `driver`'s slices and every claim's allocation.
    pub fn new(
        driver: &str,
        slices: impl IntoIterator<Item = &'a NodeDevices>,
        claims: impl IntoIterator<Item = &'a HeldClaim>,
    ) -> Self {
        let mut view = DriverView::default();
        for s in slices.into_iter().filter(|s| s.driver == driver) {
            view.devices
                .entry(s.node.as_str())
                .or_default()
                .extend(&s.devices);
        }
        for (d, pool, device) in claims.into_iter().flat_map(|c| &c.held) {
            if d == driver {
                view.taken.entry(pool).or_default().insert(device);
            }
        }
        view
    }

    /// Each of `nodes` scored for `ask`, keeping room for `keep` (0 where it
    /// does not fit or has no devices of the driver).
    pub fn scores(
        &self,
        driver: &str,
        nodes: &[String],
        ask: Ask,
        keep: &[Ask],
    ) -> Vec<HostPriority> {
        nodes
            .iter()
            .map(|n| {
                let devices = self
                    .devices
                    .get(n.as_str())
                    .map(Vec::as_slice)
                    .unwrap_or(&[]);
                // vp2p's pool is named after its node.
                let taken = self.taken.get(n.as_str());
                let candidates: Vec<Candidate<'_>> = devices
                    .iter()
                    .map(|&device| Candidate {
                        device,
                        free: !taken.is_some_and(|t| t.contains(device.name.as_str())),
                    })
                    .collect();
                let score = fit_keeping(driver, &candidates, ask, keep).map_or(0, |f| f.score());
                HostPriority {
                    host: n.clone(),
                    score,
                }
            })
            .collect()
    }
}
