//! The policies compared: what each publishes about a node's devices and
//! what each VM's claim asks for.
//!
//! - `vp2p`: vp2p's slices as `p2p-host dra slices` prints them, and the
//!   shipped tiered templates (host/kubernetes/dra/claim-templates-tiered.yaml).
//! - `nvidia`: the same devices as NVIDIA's DRA driver (dra-driver-nvidia-gpu
//!   v0.5.0, driver `gpu.nvidia.com`) publishes a GPU bound to vfio-pci:
//!   `type`, `uuid`, `deviceID`, `vendorID`, `productName`, `iommuFDEnabled`,
//!   the `addressableMemory` capacity, the three `resource.kubernetes.io/`
//!   PCI attributes and, on a board with Fabric Manager partitions (its
//!   FabricManagerPartitioning gate on), `gpuModuleID` and `partition<N>`
//!   (no switch, clique, IOMMU group or NIC); the NICs published by a NIC
//!   driver with the standard attributes (`dra.net`); and the claims a user
//!   of those writes ([`nvidia_template`]): a whole partition, then one
//!   `pcieRoot`, one `numaNode`, anywhere.
//! - `count`: vp2p's slices, and claims that only count devices: what a node
//!   chosen by counting (a device plugin) amounts to.
//! - `kubevirt`: vp2p's slices, and claims KubeVirt 1.9 can consume: one
//!   device per request (`gpu-0` .. and `nic`), no prioritized list, one
//!   claim-level `matchAttribute` at a fixed level per size
//!   ([`KUBEVIRT_LEVELS`]).
//! - `greedy`: no claims; [`super::placement::greedy`] places the fill
//!   regime's arrivals offline, largest first (a heuristic, not a bound).
//! - `optimum`: no claims; [`super::optimum`] solves the fill regime's
//!   packing exactly, twice: the most VMs placed (then the most well
//!   placed), and the most well placed (reported as `optimum-well`).

use std::path::Path;

use serde_json::{json, Value};

use super::trees::Shape;

/// A policy of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Policy {
    /// vp2p's attributes and tiered templates.
    Vp2p,
    /// NVIDIA's published attribute set, tiers over pcieRoot and numaNode.
    Nvidia,
    /// Counting only.
    Count,
    /// vp2p's attributes in claims KubeVirt 1.9 takes: one device per
    /// request, one strict level per size.
    Kubevirt,
    /// The offline greedy placer (fill only).
    Greedy,
    /// The offline optimum (fill only).
    Optimum,
}

impl Policy {
    /// Every policy, in the order of the figures.
    pub const ALL: [Policy; 6] = [
        Policy::Vp2p,
        Policy::Nvidia,
        Policy::Count,
        Policy::Kubevirt,
        Policy::Greedy,
        Policy::Optimum,
    ];

    /// The name in `--json` and in the table.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Vp2p => "vp2p",
            Policy::Nvidia => "nvidia",
            Policy::Count => "count",
            Policy::Kubevirt => "kubevirt",
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
/// What the simulated GPUs stand for in NVIDIA's attributes that no claim
/// of the comparison reads: an H100 SXM's name and memory (the captured
/// trees are QEMU's, whose functions have no NVML name).
const PRODUCT: (&str, &str) = ("NVIDIA H100 80GB HBM3", "80Gi");
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
/// vp2p's from `vp2p_file`, NVIDIA's from `nvidia_file` when given (each
/// holding the three names of [`Policy::template_name`]).
pub fn templates(
    policy: Policy,
    vp2p_file: &Path,
    nvidia_file: Option<&Path>,
    ns: &str,
) -> Result<Vec<Value>, String> {
    let mut out = match (policy, nvidia_file) {
        (Policy::Greedy | Policy::Optimum, _) => Vec::new(),
        (Policy::Vp2p, _) => yaml_documents(vp2p_file)?,
        (Policy::Nvidia, Some(f)) => yaml_documents(f)?,
        (Policy::Nvidia, None) => [2u8, 4, 8]
            .into_iter()
            .map(|n| nvidia_template(n, n == 4))
            .collect(),
        (Policy::Kubevirt, _) => [2u8, 4, 8]
            .into_iter()
            .map(|n| kubevirt_template(n, n == 4))
            .collect(),
        (Policy::Count, _) => [2u8, 4, 8]
            .into_iter()
            .map(|n| counting_template(n, n == 4))
            .collect(),
    };
    for t in &mut out {
        t["metadata"]["namespace"] = json!(ns);
    }
    Ok(out)
}

fn exactly(class: &str, count: u8) -> Value {
    json!({"deviceClassName": class, "allocationMode": "ExactCount", "count": count})
}

fn template(name: String, requests: Vec<Value>, constraints: Vec<Value>) -> Value {
    let mut devices = json!({"requests": requests});
    if !constraints.is_empty() {
        devices["constraints"] = json!(constraints);
    }
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": devices}},
    })
}

/// Counting's template for `gpus` GPUs and maybe a NIC: no constraint.
fn counting_template(gpus: u8, nic: bool) -> Value {
    let mut requests = vec![json!({"name": "gpus", "exactly": exactly("vp2p-gpu", gpus)})];
    if nic {
        requests.push(json!({"name": "nic", "exactly": exactly("vp2p-nic", 1)}));
    }
    template(Policy::Count.template_name(gpus), requests, Vec::new())
}

/// The level the `kubevirt` policy holds each size's devices to, by vp2p's
/// attribute (none: counting). Without a prioritized list one level must
/// serve every node: a 2- or 4-GPU VM within one NUMA node (on every shape
/// some NUMA node holds four GPUs, and a stricter level refuses VMs a
/// nearer-first claim would place), an 8-GPU VM anywhere on a node.
pub const KUBEVIRT_LEVELS: [(u8, Option<&str>); 3] = [
    (2, Some("gpu.vp2p.io/cliqueNode")),
    (4, Some("gpu.vp2p.io/cliqueNode")),
    (8, None),
];

/// The claim KubeVirt 1.9 can consume for `gpus` GPUs and maybe a NIC:
/// `gpu-0` .. `gpu-<N-1>` and `nic`, one device each, under one
/// claim-level constraint (no `requests`: every device) at the size's
/// level of [`KUBEVIRT_LEVELS`].
pub fn kubevirt_template(gpus: u8, nic: bool) -> Value {
    let mut requests: Vec<Value> = (0..gpus)
        .map(|i| json!({"name": format!("gpu-{i}"), "exactly": exactly("vp2p-gpu", 1)}))
        .collect();
    if nic {
        requests.push(json!({"name": "nic", "exactly": exactly("vp2p-nic", 1)}));
    }
    let level = KUBEVIRT_LEVELS
        .iter()
        .find(|(n, _)| *n == gpus)
        .and_then(|(_, l)| *l);
    let constraints = level
        .map(|attr| vec![json!({"matchAttribute": attr})])
        .unwrap_or_default();
    template(Policy::Kubevirt.template_name(gpus), requests, constraints)
}

/// The claims a user of NVIDIA's attributes writes for `gpus` GPUs and
/// maybe a NIC, nearest first: a whole Fabric Manager partition of that
/// size (`partition<N>`), then one root complex, one NUMA node, anywhere,
/// the NIC held with the GPUs at each PCIe level and on the partition's
/// NUMA node. The PCIe levels take no partitioned GPU: with the gate on,
/// the driver prepares only a claim whose GPUs are one partition.
pub fn nvidia_template(gpus: u8, nic: bool) -> Value {
    let partition = format!("{NVIDIA_DRIVER}/partition{gpus}");
    let unpartitioned = format!("!has(device.attributes[\"{NVIDIA_DRIVER}\"].partition{gpus})");
    let pcie = [
        ("root-complex", Some("resource.kubernetes.io/pcieRoot")),
        ("numa-node", Some("resource.kubernetes.io/numaNode")),
        ("anywhere", None),
    ];
    let mut gpu_list = vec![{
        let mut s = exactly("nvidia-vfio-gpu", gpus);
        s["name"] = json!("partition");
        s
    }];
    for (t, _) in &pcie {
        let mut s = exactly("nvidia-vfio-gpu", gpus);
        s["name"] = json!(t);
        s["selectors"] = json!([{"cel": {"expression": unpartitioned}}]);
        gpu_list.push(s);
    }
    let mut requests = vec![json!({"name": "gpus", "firstAvailable": gpu_list})];
    let mut constraints =
        vec![json!({"requests": ["gpus/partition"], "matchAttribute": partition})];
    if nic {
        let nic_list: Vec<Value> = pcie
            .iter()
            .map(|(t, _)| {
                let mut s = exactly("standard-nic", 1);
                s["name"] = json!(t);
                s
            })
            .collect();
        requests.push(json!({"name": "nic", "firstAvailable": nic_list}));
    }
    for (i, (_, attr)) in pcie.iter().enumerate() {
        let Some(attr) = attr else { continue };
        let mut refs = Vec::new();
        for (t, _) in &pcie[..=i] {
            refs.push(format!("gpus/{t}"));
            if nic {
                refs.push(format!("nic/{t}"));
            }
        }
        constraints.push(json!({"requests": refs, "matchAttribute": attr}));
    }
    if nic {
        constraints.push(json!({
            "requests": ["gpus/partition", "nic/root-complex", "nic/numa-node"],
            "matchAttribute": "resource.kubernetes.io/numaNode",
        }));
    }
    template(Policy::Nvidia.template_name(gpus), requests, constraints)
}

/// vp2p's slices for a node of `shape` cut to NVIDIA's set: the GPUs under
/// [`NVIDIA_DRIVER`] with v0.5.0's VFIO attributes (and the partition ones
/// when the shape has Fabric Manager partitions), the NICs under
/// [`NIC_DRIVER`] with the standard attributes.
pub fn nvidia_cut(vp2p_slices: &[Value], node: &str, shape: &Shape) -> Vec<Value> {
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
            let name = d["name"].as_str().unwrap_or_default();
            match kind {
                Some("gpu") => {
                    let hex = |k: &str| {
                        let v = d["attributes"][format!("gpu.vp2p.io/{k}")]["string"]
                            .as_str()
                            .unwrap_or("0");
                        json!({"string": format!("0x{v}")})
                    };
                    let bus = d["attributes"]["resource.kubernetes.io/pciBusID"]["string"]
                        .as_str()
                        .unwrap_or_default();
                    attrs.insert("type".into(), json!({"string": "vfio"}));
                    attrs.insert("uuid".into(), json!({"string": uuid_like(node, bus)}));
                    attrs.insert("deviceID".into(), hex("deviceID"));
                    attrs.insert("vendorID".into(), hex("vendorID"));
                    attrs.insert("productName".into(), json!({"string": PRODUCT.0}));
                    attrs.insert("iommuFDEnabled".into(), json!({"bool": false}));
                    if let Some(&at) = shape.index.get(name) {
                        for (k, v) in partition_attributes(shape, at) {
                            attrs.insert(k, json!({"int": v}));
                        }
                    }
                    gpus.push(json!({
                        "name": name, "attributes": attrs,
                        "capacity": {"addressableMemory": {"value": PRODUCT.1}},
                    }));
                }
                Some("nic") => nics.push(json!({"name": name, "attributes": attrs})),
                _ => {}
            }
        }
    }
    // NVIDIA's driver lists GPUs as NVML numbers them, by PCI bus ID,
    // whatever order vp2p's slices were given (`--device-order`).
    let bus = |d: &Value| {
        d["attributes"][p2p_allocation::dra::PCI_BUS_ID]["string"]
            .as_str()
            .map(str::to_string)
    };
    gpus.sort_by_key(bus);
    nics.sort_by_key(bus);
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

/// The partition attributes of the GPU at `at` on a partitioned `shape`:
/// `gpuModuleID` (its place in address order, from 1, as the fixture's
/// list numbers its modules) and `partition<N>`, the id of the size-N
/// partition holding it (the first, when several do).
fn partition_attributes(shape: &Shape, at: usize) -> Vec<(String, i64)> {
    if shape.partitions.is_empty() {
        return Vec::new();
    }
    let mut out = vec![("gpuModuleID".to_string(), at as i64 + 1)];
    let mut sizes = std::collections::BTreeSet::new();
    for p in &shape.partitions {
        if p.gpus.contains(&at) && sizes.insert(p.gpus.len()) {
            out.push((format!("partition{}", p.gpus.len()), i64::from(p.id)));
        }
    }
    out
}

/// A UUID-shaped id for the GPU at `bus` on `node`, unique within the
/// fleet: NVIDIA's driver derives its VFIO devices' from the PCI address;
/// no claim here reads it.
fn uuid_like(node: &str, bus: &str) -> String {
    // FNV-1a, twice with different offsets, for 128 bits.
    let fnv = |seed: u64| {
        format!("{node}/{bus}").bytes().fold(seed, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    };
    let (a, b) = (fnv(0xcbf2_9ce4_8422_2325), fnv(0x8422_2325_cbf2_9ce4));
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
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
        let t = nvidia_template(4, true);
        let c = &t["spec"]["spec"]["devices"]["constraints"];
        assert_eq!(c[0]["requests"], json!(["gpus/partition"]));
        assert_eq!(c[0]["matchAttribute"], "gpu.nvidia.com/partition4");
        assert_eq!(
            c[1]["requests"],
            json!(["gpus/root-complex", "nic/root-complex"])
        );
        assert_eq!(
            c[2]["requests"],
            json!([
                "gpus/root-complex",
                "nic/root-complex",
                "gpus/numa-node",
                "nic/numa-node"
            ])
        );
        assert_eq!(
            c[3]["requests"],
            json!(["gpus/partition", "nic/root-complex", "nic/numa-node"])
        );
        assert_eq!(
            c.as_array().map(Vec::len),
            Some(4),
            "anywhere has no constraint"
        );
        // The PCIe levels leave partitioned GPUs alone.
        let alts = &t["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"];
        assert!(alts[0].get("selectors").is_none());
        for i in 1..4 {
            assert_eq!(
                alts[i]["selectors"][0]["cel"]["expression"],
                "!has(device.attributes[\"gpu.nvidia.com\"].partition4)"
            );
        }
    }

    #[test]
    fn a_uuid_like_id_has_the_uuid_shape_and_differs_per_gpu() {
        let a = uuid_like("n1", "0000:23:00.0");
        let b = uuid_like("n1", "0000:24:00.0");
        assert_ne!(a, b);
        let groups: Vec<usize> = a.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12], "{a}");
    }

    #[test]
    fn kubevirt_claims_take_one_device_per_request_under_one_claim_level_constraint() {
        let t = kubevirt_template(4, true);
        let d = &t["spec"]["spec"]["devices"];
        let names: Vec<&str> = d["requests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["gpu-0", "gpu-1", "gpu-2", "gpu-3", "nic"]);
        for r in d["requests"].as_array().unwrap() {
            assert_eq!(r["exactly"]["count"], 1);
            assert!(r.get("firstAvailable").is_none());
        }
        assert_eq!(
            d["constraints"],
            json!([{"matchAttribute": "gpu.vp2p.io/cliqueNode"}])
        );
        let eight = kubevirt_template(8, false);
        assert!(eight["spec"]["spec"]["devices"]
            .get("constraints")
            .is_none());
    }

    #[test]
    fn counting_claims_have_no_constraint() {
        let t = counting_template(8, false);
        assert!(t["spec"]["spec"]["devices"].get("constraints").is_none());
        assert_eq!(
            t["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"],
            8
        );
    }
}
