//! The policies compared: what each publishes about a node's devices and
//! what each VM's claim asks for.
//!
//! - `vp2p`: vp2p's slices as `p2p-host dra slices` prints them, and the
//!   shipped tiered templates (host/kubernetes/dra/claim-templates-tiered.yaml).
//! - `nvidia`: the same devices cut to what NVIDIA's DRA driver publishes for
//!   a passthrough GPU (driver `gpu.nvidia.com`: `pciBusID`, `pcieRoot` and,
//!   after v0.4.1, `resource.kubernetes.io/numaNode`; no switch, clique,
//!   IOMMU group or NIC), the NICs published by a NIC driver with the same
//!   standard attributes (`dra.net`), and the claims a user of those writes:
//!   the same prioritized list over `pcieRoot`, then `numaNode`, then anywhere.
//! - `count`: vp2p's slices, and claims that only count devices: what a node
//!   chosen by counting (a device plugin) amounts to.
//! - `greedy`: no claims; [`super::placement::greedy`] places the fill
//!   regime's arrivals offline, largest first (a heuristic, not a bound).
//! - `optimum`: no claims; [`super::optimum`] solves the fill regime's
//!   packing exactly, twice: the most VMs placed (then the most well
//!   placed), and the most well placed (reported as `optimum-well`).

use std::path::Path;

use serde_json::{json, Value};

/// A policy of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Policy {
    /// vp2p's attributes and tiered templates.
    Vp2p,
    /// NVIDIA's published attribute set, tiers over pcieRoot and numaNode.
    Nvidia,
    /// Counting only.
    Count,
    /// The offline greedy placer (fill only).
    Greedy,
    /// The offline optimum (fill only).
    Optimum,
}

impl Policy {
    /// Every policy, in the order of the figures.
    pub const ALL: [Policy; 5] = [
        Policy::Vp2p,
        Policy::Nvidia,
        Policy::Count,
        Policy::Greedy,
        Policy::Optimum,
    ];

    /// The name in `--json` and in the table.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Vp2p => "vp2p",
            Policy::Nvidia => "nvidia",
            Policy::Count => "count",
            Policy::Greedy => "greedy",
            Policy::Optimum => "optimum",
        }
    }

    /// Whether kube-scheduler places its VMs (the offline ones place by themselves).
    pub fn scheduled(self) -> bool {
        !matches!(self, Policy::Greedy | Policy::Optimum)
    }

    /// The policy called `name`.
    pub fn parse(name: &str) -> Option<Policy> {
        Policy::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The ResourceClaimTemplate's name for a VM of `gpus` GPUs.
    pub fn template_name(self, gpus: u8) -> String {
        match self {
            Policy::Vp2p => match gpus {
                2 => "two-peer-gpus-tiered".into(),
                4 => "four-peer-gpus-and-nic-tiered".into(),
                _ => "eight-peer-gpus-tiered".into(),
            },
            _ => format!("{}-{gpus}", self.name()),
        }
    }
}

/// NVIDIA's DRA driver's name.
pub const NVIDIA_DRIVER: &str = "gpu.nvidia.com";
/// The NIC driver beside it, publishing the standard attributes (DRANET's domain).
pub const NIC_DRIVER: &str = "dra.net";
/// The standard attributes both keep.
const STANDARD: [&str; 3] = [
    "resource.kubernetes.io/pciBusID",
    "resource.kubernetes.io/pcieRoot",
    "resource.kubernetes.io/numaNode",
];

/// The DeviceClasses every policy's claims name: vp2p's shipped two, and one
/// for each driver of the NVIDIA cut.
pub fn device_classes(repo: &Path) -> Result<Vec<Value>, String> {
    let mut out = yaml_documents(&repo.join("host/kubernetes/dra/deviceclasses.yaml"))?;
    for (name, driver) in [
        ("nvidia-vfio-gpu", NVIDIA_DRIVER),
        ("standard-nic", NIC_DRIVER),
    ] {
        out.push(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{driver}\"")}}]},
        }));
    }
    Ok(out)
}

/// The shipped tiered templates, vp2p's claims unless a run names others.
pub const TIERED: &str = "host/kubernetes/dra/claim-templates-tiered.yaml";

/// Every ResourceClaimTemplate of `policy` (none for the offline ones), in `ns`;
/// vp2p's from `vp2p_file` (the three names of [`Policy::template_name`]).
pub fn templates(policy: Policy, vp2p_file: &Path, ns: &str) -> Result<Vec<Value>, String> {
    let mut out = match policy {
        Policy::Greedy | Policy::Optimum => Vec::new(),
        Policy::Vp2p => yaml_documents(vp2p_file)?,
        Policy::Nvidia | Policy::Count => [2u8, 4, 8]
            .into_iter()
            .map(|n| generated(policy, n, n == 4))
            .collect(),
    };
    for t in &mut out {
        t["metadata"]["namespace"] = json!(ns);
    }
    Ok(out)
}

/// A template of `policy` (nvidia or count) for `gpus` GPUs and maybe a NIC.
fn generated(policy: Policy, gpus: u8, nic: bool) -> Value {
    let exactly = |class: &str, count: u8| json!({"deviceClassName": class, "allocationMode": "ExactCount", "count": count});
    let (gpu_class, nic_class) = match policy {
        Policy::Nvidia => ("nvidia-vfio-gpu", "standard-nic"),
        _ => ("vp2p-gpu", "vp2p-nic"),
    };
    let (mut requests, mut constraints) = (Vec::new(), Vec::new());
    if policy == Policy::Count {
        requests.push(json!({"name": "gpus", "exactly": exactly(gpu_class, gpus)}));
        if nic {
            requests.push(json!({"name": "nic", "exactly": exactly(nic_class, 1)}));
        }
    } else {
        // The tiers a user of the standard attributes can write: one root
        // complex, one NUMA node, anywhere; the NIC held with the GPUs at
        // each level, as vp2p's tiered template holds it.
        let tiers = [
            ("root-complex", Some("resource.kubernetes.io/pcieRoot")),
            ("numa-node", Some("resource.kubernetes.io/numaNode")),
            ("anywhere", None),
        ];
        let list = |class: &str, count: u8| -> Vec<Value> {
            tiers
                .iter()
                .map(|(t, _)| {
                    let mut s = exactly(class, count);
                    s["name"] = json!(t);
                    s
                })
                .collect()
        };
        requests.push(json!({"name": "gpus", "firstAvailable": list(gpu_class, gpus)}));
        if nic {
            requests.push(json!({"name": "nic", "firstAvailable": list(nic_class, 1)}));
        }
        for (i, (_, attr)) in tiers.iter().enumerate() {
            let Some(attr) = attr else { continue };
            let mut refs = Vec::new();
            for (t, _) in &tiers[..=i] {
                refs.push(format!("gpus/{t}"));
                if nic {
                    refs.push(format!("nic/{t}"));
                }
            }
            constraints.push(json!({"requests": refs, "matchAttribute": attr}));
        }
    }
    let mut devices = json!({"requests": requests});
    if !constraints.is_empty() {
        devices["constraints"] = json!(constraints);
    }
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": policy.template_name(gpus)},
        "spec": {"spec": {"devices": devices}},
    })
}

/// vp2p's slices for a node cut to NVIDIA's set: the GPUs under
/// [`NVIDIA_DRIVER`] and the NICs under [`NIC_DRIVER`], standard attributes
/// only (and the driver's `type: vfio`).
pub fn nvidia_cut(vp2p_slices: &[Value], node: &str) -> Vec<Value> {
    let mut gpus = Vec::new();
    let mut nics = Vec::new();
    for s in vp2p_slices {
        for d in s["spec"]["devices"].as_array().into_iter().flatten() {
            let kind = d["attributes"]["gpu.vp2p.io/kind"]["string"].as_str();
            let mut attrs = serde_json::Map::new();
            for k in STANDARD {
                if let Some(v) = d["attributes"].get(k) {
                    attrs.insert(k.to_string(), v.clone());
                }
            }
            match kind {
                Some("gpu") => {
                    attrs.insert("type".into(), json!({"string": "vfio"}));
                    gpus.push(json!({"name": d["name"], "attributes": attrs}));
                }
                Some("nic") => nics.push(json!({"name": d["name"], "attributes": attrs})),
                _ => {}
            }
        }
    }
    [(NVIDIA_DRIVER, gpus), (NIC_DRIVER, nics)]
        .into_iter()
        .filter(|(_, devs)| !devs.is_empty())
        .map(|(driver, devs)| {
            json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": format!("{node}-{driver}-0")},
                "spec": {
                    "driver": driver, "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": devs,
                },
            })
        })
        .collect()
}

/// The YAML documents of `file` as JSON values.
fn yaml_documents(file: &Path) -> Result<Vec<Value>, String> {
    use serde::Deserialize;
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v = Value::deserialize(doc).map_err(|e| format!("{}: {e}", file.display()))?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nvidia_tiers_hold_the_nic_with_the_gpus_at_each_level() {
        let t = generated(Policy::Nvidia, 4, true);
        let c = &t["spec"]["spec"]["devices"]["constraints"];
        assert_eq!(
            c[0]["requests"],
            json!(["gpus/root-complex", "nic/root-complex"])
        );
        assert_eq!(
            c[1]["requests"],
            json!([
                "gpus/root-complex",
                "nic/root-complex",
                "gpus/numa-node",
                "nic/numa-node"
            ])
        );
        assert_eq!(
            c.as_array().map(Vec::len),
            Some(2),
            "anywhere has no constraint"
        );
    }

    #[test]
    fn counting_claims_have_no_constraint() {
        let t = generated(Policy::Count, 8, false);
        assert!(t["spec"]["spec"]["devices"].get("constraints").is_none());
        assert_eq!(
            t["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"],
            8
        );
    }
}
