//! The DRA slice builder and `p2p-host dra slices` on every captured tree:
//! the clique property (equal `clique<L>` exactly when the chooser allows
//! the pair at L; every allocation of N one-device requests under
//! `matchAttribute` is one clique, and every clique is one), the printed
//! objects against Kubernetes' own schemas for 1.34 and 1.37
//! (kubernetes-validate, strict), and the manifests of host/kubernetes/dra:
//! schemas, the DeviceClasses' CEL selectors evaluated with
//! `cel-interpreter` on published devices, the claim template's requests
//! and constraint run through the allocator model, the VirtualMachine's
//! references. No cluster runs here: Kubernetes' scheduler is modelled by
//! `p2p_tests::dra_model::allocations` (resource.k8s.io/v1 `matchAttribute`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use p2p_allocation::chooser::{parse_fmpm_list, FmPartition};
use p2p_allocation::dra::{
    build_slices, Device, DeviceAttribute, Publication, ResourceSlice, SliceOptions, DEFAULT_DRIVER,
};
use p2p_host::nvlink::{self, NvLinkOptions};
use p2p_host::sysfs::{self, SysfsRoot};
use p2p_test_support::topologies::{self as built, BRIDGE, GPU, NIC};
use p2p_tests::dra_model::{allocations, verify_cliques, Claim};
use p2p_tests::kubernetes_validate::assert_valid;
use p2p_tests::{fixture_dir, repo_root, run};
use p2p_topology::pci::PciePortType;
use p2p_topology::{Bdf, GpuSelector, Topology};
use serde_json::{json, Value};

/// A captured tree with IOMMU groups, its GPU selector (`--gpu-class`), and
/// what `dra slices --bind` publishes there, worked out from the fixture's
/// README and `p2p-host topo` (chooser.rs quotes them): published GPUs and
/// the ones left out for a shared IOMMU group.
struct Tree {
    name: &'static str,
    class: Option<&'static str>,
    published: usize,
    shared_group: &'static [&'static str],
}

const TREES: [Tree; 6] = [
    Tree {
        name: "qemu-11.1-two-socket-iommu-on",
        class: Some("0108"),
        published: 7,
        shared_group: &[],
    },
    Tree {
        name: "qemu-7.2-two-socket-iommu-on",
        class: Some("0108"),
        published: 7,
        shared_group: &[],
    },
    // gpu0 (25:00.0) and gpu1 (26:00.0) share IOMMU group 9.
    Tree {
        name: "qemu-11.1-nested-switch-iommu-on",
        class: Some("0108"),
        published: 3,
        shared_group: &["0000:25:00.0", "0000:26:00.0"],
    },
    Tree {
        name: "qemu-7.2-nested-switch-iommu-on",
        class: Some("0108"),
        published: 3,
        shared_group: &["0000:25:00.0", "0000:26:00.0"],
    },
    Tree {
        name: "qemu-11.1-pcie-costs-iommu-on",
        class: Some("0100"),
        published: 6,
        shared_group: &[],
    },
    Tree {
        name: "qemu-11.1-vfio-user-gpus",
        class: None,
        published: 6,
        shared_group: &[],
    },
];

pub(super) fn selector(class: Option<&str>) -> GpuSelector {
    match class {
        Some(c) => GpuSelector::Class {
            prefix: c.parse().unwrap(),
        },
        None => GpuSelector::Nvidia,
    }
}

pub(super) fn tree_dir(name: &str) -> PathBuf {
    fixture_dir(name).join("sysfs")
}

pub(super) fn load(dir: &Path, sel: &GpuSelector) -> Topology {
    let root = SysfsRoot::new(dir).unwrap();
    let mut topo = sysfs::scan(&root).unwrap();
    let opts = NvLinkOptions {
        map: None,
        use_nvml: false,
    };
    nvlink::discover(&mut topo, sel, &opts).unwrap();
    topo
}

fn publish(topo: &Topology, sel: &GpuSelector, parts: Option<&[FmPartition]>) -> Publication {
    let mut opts = SliceOptions::new("node-a", DEFAULT_DRIVER, sel);
    opts.bind = true;
    opts.partitions = parts;
    build_slices(topo, &opts).unwrap()
}

/// `fmpm -l` output (the shape fmpm.cpp's listPartitions writes) for the
/// two-socket tree: one 4-GPU partition (the node-0 GPUs 23, 24, 26, 41)
/// and two 2-GPU ones (23+24, 83+84).
const FMPM: &str = r#"{
   "maxNumPartitions" : 3,
   "numPartitions" : 3,
   "partitionInfo" : [
      { "gpuInfo" : [ { "pciBusId" : "00000000:23:00.0" }, { "pciBusId" : "00000000:24:00.0" },
                      { "pciBusId" : "00000000:26:00.0" }, { "pciBusId" : "00000000:41:00.0" } ],
        "isActive" : 0, "numGpus" : 4, "partitionId" : 1 },
      { "gpuInfo" : [ { "pciBusId" : "00000000:23:00.0" }, { "pciBusId" : "00000000:24:00.0" } ],
        "isActive" : 0, "numGpus" : 2, "partitionId" : 2 },
      { "gpuInfo" : [ { "pciBusId" : "00000000:83:00.0" }, { "pciBusId" : "00000000:84:00.0" } ],
        "isActive" : 0, "numGpus" : 2, "partitionId" : 3 }
   ],
   "version" : 1
}"#;

#[test]
fn every_captured_tree_keeps_the_clique_property() {
    for t in &TREES {
        let sel = selector(t.class);
        let topo = load(&tree_dir(t.name), &sel);
        let p = publish(&topo, &sel, None);
        assert_eq!(p.devices().count(), t.published, "{}", t.name);
        let shared: Vec<String> = p
            .left_out
            .iter()
            .filter(|l| l.reason.contains("IOMMU group"))
            .map(|l| l.bdf.to_string())
            .collect();
        assert_eq!(shared, t.shared_group, "{}", t.name);
        let v = verify_cliques(&topo, &p, None, 4);
        assert!(v.is_empty(), "{}: {v:#?}", t.name);
    }
}

#[test]
fn fabric_manager_partitions_become_attributes_the_chooser_agrees_with() {
    let t = &TREES[0];
    let sel = selector(t.class);
    let topo = load(&tree_dir(t.name), &sel);
    let parts = parse_fmpm_list(FMPM).unwrap();
    let p = publish(&topo, &sel, Some(&parts));
    let v = verify_cliques(&topo, &p, Some(&parts), 4);
    assert!(v.is_empty(), "{v:#?}");
    let fm4 = p.attribute_name("fmPartition4");
    let in4: BTreeSet<&str> = p
        .devices()
        .filter(|d| d.attributes.get(&fm4) == Some(&DeviceAttribute::Int(1)))
        .map(|d| d.name.as_str())
        .collect();
    let want: BTreeSet<&str> = [
        "gpu-0000-23-00-0",
        "gpu-0000-24-00-0",
        "gpu-0000-26-00-0",
        "gpu-0000-41-00-0",
    ]
    .into();
    assert_eq!(in4, want);
    // Four requests matching fmPartition4: exactly that partition.
    let claim = Claim {
        gpus: 4,
        nics: 0,
        match_attribute: fm4,
    };
    let devs: Vec<&Device> = p.devices().collect();
    let got = allocations(&p.driver, &devs, &claim);
    assert_eq!(got.len(), 1);
    assert_eq!(
        got.iter()
            .next()
            .unwrap()
            .iter()
            .map(String::as_str)
            .collect::<BTreeSet<_>>(),
        want
    );
}

#[test]
fn iommu_off_trees_publish_nothing_and_say_why() {
    for (name, class) in [
        ("qemu-11.1-two-socket-iommu-off", "0108"),
        ("qemu-11.1-pcie-costs-iommu-off", "0100"),
    ] {
        let out = run(
            "p2p-host",
            &[
                "dra",
                "slices",
                "--node-name",
                "n1",
                "--sysfs-root",
                tree_dir(name).to_str().unwrap(),
                "--gpu-class",
                class,
                "--bind",
            ],
        );
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        assert!(
            out.stdout.contains("0 device(s) in 1 slice(s)"),
            "{}",
            out.stdout
        );
        let left = out
            .stdout
            .lines()
            .filter(|l| l.contains("no IOMMU group (the IOMMU is off)"))
            .count();
        assert!(left >= 6, "{name}: {}", out.stdout);
    }
    // Without --bind a GPU bound to another driver is left out, named.
    let out = run(
        "p2p-host",
        &[
            "dra",
            "slices",
            "--node-name",
            "n1",
            "--sysfs-root",
            tree_dir(TREES[0].name).to_str().unwrap(),
            "--gpu-class",
            "0108",
        ],
    );
    assert!(
        out.stdout
            .contains("left out: 0000:23:00.0 (gpu): bound to nvme, not vfio-pci"),
        "{}",
        out.stdout
    );
}

/// Writes `text` to a file in `dir` and returns its path.
fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn printed_slices_validate_against_kubernetes_1_34_and_1_37() {
    let tmp = tempfile::tempdir().unwrap();
    let fm = write(tmp.path(), "fmpm.json", FMPM);
    for t in &TREES {
        let dir = tree_dir(t.name);
        let mut args = vec![
            "dra",
            "slices",
            "--node-name",
            "node-a",
            "--sysfs-root",
            dir.to_str().unwrap(),
            "--bind",
        ];
        if let Some(c) = t.class {
            args.extend(["--gpu-class", c]);
        }
        if t.name == TREES[0].name {
            args.extend(["--fm-partitions", fm.to_str().unwrap()]);
        }
        let yaml = run("p2p-host", &[args.as_slice(), &["--yaml"]].concat());
        assert_eq!(yaml.code, Some(0), "{}", yaml.stderr);
        let file = write(tmp.path(), &format!("{}.yaml", t.name), &yaml.stdout);
        assert_valid(&file, &["resourceslice/node-a-gpu.vp2p.io-0"]);

        // --json: a v1 List whose items are the same slices; each item is
        // validated as a document of its own (the tool has no List schema).
        let out = run("p2p-host", &[args.as_slice(), &["--json"]].concat());
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let list: Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(
            (list["apiVersion"].as_str(), list["kind"].as_str()),
            (Some("v1"), Some("List"))
        );
        let items = list["items"].as_array().unwrap();
        let docs: Vec<String> = items
            .iter()
            .map(|i| format!("---\n{}\n", serde_json::to_string_pretty(i).unwrap()))
            .collect();
        let file = write(
            tmp.path(),
            &format!("{}.json-items.yaml", t.name),
            &docs.concat(),
        );
        assert_valid(&file, &["resourceslice/node-a-gpu.vp2p.io-0"]);

        // What was printed, read back with the driver's own types, keeps
        // the property: the allocator model on the printed devices.
        let slices: Vec<ResourceSlice> = serde_json::from_value(list["items"].clone()).unwrap();
        let devices: usize = slices.iter().map(|s| s.spec.devices.len()).sum();
        assert_eq!(devices, t.published, "{}", t.name);
    }
}

/// An in-memory node of `n` switches, each with two GPUs and two RDMA NICs
/// on its downstream ports, on one host bridge (NUMA 0), every endpoint in
/// its own IOMMU group, bound to vfio-pci: the captured trees have no RDMA
/// NIC, so the NIC side is tested here.
fn switches(n: u8) -> Topology {
    use PciePortType::*;
    let mut t = built::Tree::new();
    let hb = t.host_bridge(0, Some(0));
    let numa = Some(0);
    for s in 0..n {
        let base = 1 + s * 0x10;
        let rp = Bdf::new(0, 0, 1 + s, 0).unwrap();
        let up = Bdf::new(0, base, 0, 0).unwrap();
        t.add(
            rp,
            &hb,
            None,
            BRIDGE,
            Some(RootPort),
            numa,
            None,
            "pcieport",
        );
        t.add(
            up,
            &hb,
            Some(rp),
            BRIDGE,
            Some(SwitchUpstream),
            numa,
            None,
            "pcieport",
        );
        for port in 0..4u8 {
            let down = Bdf::new(0, base + 1, port, 0).unwrap();
            let ep = Bdf::new(0, base + 2 + port, 0, 0).unwrap();
            t.add(
                down,
                &hb,
                Some(up),
                BRIDGE,
                Some(SwitchDownstream),
                numa,
                None,
                "pcieport",
            );
            if port < 2 {
                t.add(
                    ep,
                    &hb,
                    Some(down),
                    GPU,
                    Some(Endpoint),
                    numa,
                    None,
                    "vfio-pci",
                );
            } else {
                // A ConnectX-7, its RDMA device named after its IOMMU group.
                let group = t.next_group();
                let nic = t.add(
                    ep,
                    &hb,
                    Some(down),
                    NIC,
                    Some(Endpoint),
                    numa,
                    Some(group),
                    "vfio-pci",
                );
                nic.device = 0x1021;
                nic.rdma_devices = vec![format!("mlx5_{group}")];
            }
        }
    }
    t.done()
}

fn read_yaml_docs(path: &Path) -> Vec<serde_yaml::Value> {
    p2p_tests::yaml_documents(&std::fs::read_to_string(path).unwrap())
}

fn manifests() -> PathBuf {
    repo_root().join("host/kubernetes/dra")
}

/// The CEL input of a device, as the CELDeviceSelector reference defines it
/// (resource/v1 types.go): `device.driver`, and `device.attributes` grouped
/// by domain, an unqualified name in the driver's domain.
fn cel_device(driver: &str, d: &Device) -> Value {
    let mut by_domain: BTreeMap<String, serde_json::Map<String, Value>> = BTreeMap::new();
    for (name, value) in &d.attributes {
        let (domain, id) = name.split_once('/').unwrap_or((driver, name));
        let v = match value {
            DeviceAttribute::Int(i) => json!(i),
            DeviceAttribute::Bool(b) => json!(b),
            DeviceAttribute::String(s) | DeviceAttribute::Version(s) => json!(s),
        };
        by_domain
            .entry(domain.to_string())
            .or_default()
            .insert(id.to_string(), v);
    }
    json!({"driver": driver, "attributes": by_domain, "capacity": {}})
}

fn cel_selects(expr: &str, device: &Value) -> bool {
    let program =
        cel_interpreter::Program::compile(expr).unwrap_or_else(|e| panic!("{expr}: {e:?}"));
    let mut ctx = cel_interpreter::Context::default();
    ctx.add_variable("device", device).unwrap();
    match program.execute(&ctx) {
        Ok(cel_interpreter::Value::Bool(b)) => b,
        other => panic!("{expr} gave {other:?}, not a bool (the allocator aborts on that)"),
    }
}

#[test]
fn device_classes_select_exactly_the_gpus_or_the_nics() {
    let docs = read_yaml_docs(&manifests().join("deviceclasses.yaml"));
    let class = |name: &str| -> String {
        let d = docs.iter().find(|d| d["metadata"]["name"] == name).unwrap();
        d["spec"]["selectors"][0]["cel"]["expression"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (gpu, nic) = (class("vp2p-gpu"), class("vp2p-nic"));
    let sel = GpuSelector::Nvidia;
    let topo = switches(2);
    let mut pubs = vec![publish(&topo, &sel, None)];
    let t = &TREES[0];
    let s = selector(t.class);
    pubs.push(publish(&load(&tree_dir(t.name), &s), &s, None));
    let mut seen = (0, 0);
    for p in &pubs {
        for d in p.devices() {
            let kind = d.attributes[&p.attribute_name("kind")].as_str().unwrap();
            let input = cel_device(&p.driver, d);
            assert_eq!(
                cel_selects(&gpu, &input),
                kind == "gpu",
                "{} by vp2p-gpu",
                d.name
            );
            assert_eq!(
                cel_selects(&nic, &input),
                kind == "nic",
                "{} by vp2p-nic",
                d.name
            );
            if kind == "gpu" {
                seen.0 += 1
            } else {
                seen.1 += 1
            }
        }
    }
    assert_eq!(seen, (4 + 7, 4), "GPUs and NICs were both tried");
    // Another driver's device with the same attributes is selected by neither.
    let p = &pubs[0];
    let d = p.devices().next().unwrap();
    let mut other = cel_device(&p.driver, d);
    other["driver"] = json!("gpu.nvidia.com");
    assert!(!cel_selects(&gpu, &other) && !cel_selects(&nic, &other));
}

#[test]
fn the_claim_template_gets_four_gpus_and_the_nic_of_one_switch() {
    let docs = read_yaml_docs(&manifests().join("claim-template.yaml"));
    let spec = &docs[0]["spec"]["spec"]["devices"];
    let requests = spec["requests"].as_sequence().unwrap();
    let class_of = |r: &serde_yaml::Value| {
        r["exactly"]["deviceClassName"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let gpus = requests
        .iter()
        .filter(|r| class_of(r) == "vp2p-gpu")
        .count();
    let nics = requests
        .iter()
        .filter(|r| class_of(r) == "vp2p-nic")
        .count();
    assert_eq!((gpus, nics), (4, 1));
    assert!(
        requests.iter().all(|r| r["exactly"]["count"] == 1),
        "one device per request (KubeVirt)"
    );
    let constraints = spec["constraints"].as_sequence().unwrap();
    assert_eq!(constraints.len(), 1);
    assert!(
        constraints[0].get("requests").is_none(),
        "the constraint spans every request"
    );
    let attr = constraints[0]["matchAttribute"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(attr, format!("{DEFAULT_DRIVER}/cliquePix"));
    // On two switches of two GPUs: no allocation (four GPUs never share a
    // switch); on a node whose switches hold four GPUs and a NIC, each
    // allocation is one switch's four GPUs and its NIC.
    let sel = GpuSelector::Nvidia;
    let p = publish(&switches(2), &sel, None);
    let devs: Vec<&Device> = p.devices().collect();
    let claim = Claim {
        gpus,
        nics,
        match_attribute: attr.clone(),
    };
    assert!(allocations(&p.driver, &devs, &claim).is_empty());
    let claim2 = Claim {
        gpus: 2,
        nics: 1,
        match_attribute: attr.clone(),
    };
    let got = allocations(&p.driver, &devs, &claim2);
    // Per switch: its 2 GPUs with either of its 2 NICs.
    assert_eq!(got.len(), 2 * 2);
    for set in &got {
        let pix: BTreeSet<&DeviceAttribute> = set
            .iter()
            .map(|n| {
                devs.iter()
                    .find(|d| &d.name == n)
                    .unwrap()
                    .attributes
                    .get(&attr)
                    .unwrap()
            })
            .collect();
        assert_eq!(pix.len(), 1, "{set:?}");
    }
}

#[test]
fn shipped_manifests_validate_against_kubernetes_1_34_and_1_37() {
    let dir = manifests();
    assert_valid(
        &dir.join("deviceclasses.yaml"),
        &["deviceclass/vp2p-gpu", "deviceclass/vp2p-nic"],
    );
    assert_valid(
        &dir.join("claim-template.yaml"),
        &["resourceclaimtemplate/four-peer-gpus-and-nic"],
    );
    assert_valid(
        &dir.join("driver.yaml"),
        &[
            "serviceaccount/vp2p-dra-driver",
            "clusterrole/vp2p-dra-driver",
            "clusterrolebinding/vp2p-dra-driver",
            "validatingadmissionpolicy/vp2p-dra-driver-own-node",
            "validatingadmissionpolicybinding/vp2p-dra-driver-own-node",
            "daemonset/vp2p-dra-driver",
        ],
    );
    // RBAC: the verbs of the driver's calls (host/kube/src/kubelet_plugin/
    // api_server/); kube_dra_upgrade.rs shows each one needed against the
    // real API server.
    let docs = read_yaml_docs(&dir.join("driver.yaml"));
    let role = docs.iter().find(|d| d["kind"] == "ClusterRole").unwrap();
    let mut rules: Vec<(String, String)> = Vec::new();
    for r in role["rules"].as_sequence().unwrap() {
        for res in r["resources"].as_sequence().unwrap() {
            let verbs: Vec<&str> = r["verbs"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            rules.push((res.as_str().unwrap().to_string(), verbs.join(",")));
        }
    }
    assert_eq!(
        rules,
        [
            (
                "resourceslices".to_string(),
                "list,watch,create,get,update,delete".to_string()
            ),
            ("resourceclaims".to_string(), "get".to_string()),
            ("nodes".to_string(), "get".to_string()),
            ("events".to_string(), "create".to_string()),
        ]
    );
    let ds = docs.iter().find(|d| d["kind"] == "DaemonSet").unwrap();
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "vp2p-dra-driver");
    let args: Vec<&str> = pod["containers"][0]["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let i = args.iter().position(|a| *a == "--driver-name").unwrap();
    assert_eq!(
        args[i + 1],
        DEFAULT_DRIVER,
        "the DeviceClasses select this driver"
    );
    let mounts: Vec<&str> = pod["containers"][0]["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap())
        .collect();
    for m in [
        "/var/lib/kubelet/plugins_registry",
        "/var/lib/kubelet/plugins",
        "/var/run/cdi",
    ] {
        assert!(mounts.contains(&m), "{m} not mounted: {mounts:?}");
    }
}

/// The VirtualMachine is a KubeVirt CRD: Kubernetes' schemas do not hold it
/// and KubeVirt's OpenAPI is not in the repository, so the schema check can
/// only say it has no schema; what is checked is its shape against the field
/// names of KubeVirt 1.9.0 (kubevirt/api tag v1.9.0, commit
/// 83a8fc3b8240742e8705c2110db7218f1f6b7cb7: core/v1 types.go
/// `VirtualMachineInstanceResourceClaim` {name, resourceClaimName,
/// resourceClaimTemplateName}; schema.go `GPU` and `HostDevice` {name,
/// deviceName, claimName, requestName, tag}) and its references to the claim
/// template.
#[test]
fn the_virtual_machine_asks_for_every_request_of_the_claim_template() {
    let dir = manifests();
    let vm_path = dir.join("virtualmachine.yaml");
    for v in p2p_tests::kubernetes_validate::VERSIONS {
        let verdict = p2p_tests::kubernetes_validate::validate(&vm_path, v);
        assert!(
            verdict.lines.iter().any(|l| l.contains(
                "Couldn't find schema for kind VirtualMachine with api version kubevirt.io/v1"
            )),
            "{:#?}",
            verdict.lines
        );
    }
    let vm = &read_yaml_docs(&vm_path)[0];
    assert_eq!(
        (vm["apiVersion"].as_str(), vm["kind"].as_str()),
        (Some("kubevirt.io/v1"), Some("VirtualMachine"))
    );
    let spec = &vm["spec"]["template"]["spec"];
    let claims = spec["resourceClaims"].as_sequence().unwrap();
    assert_eq!(claims.len(), 1);
    let keys = |v: &serde_yaml::Value| -> BTreeSet<String> {
        v.as_mapping()
            .unwrap()
            .keys()
            .map(|k| k.as_str().unwrap().to_string())
            .collect()
    };
    let allowed_claim: BTreeSet<String> =
        ["name", "resourceClaimName", "resourceClaimTemplateName"]
            .map(String::from)
            .into();
    assert!(keys(&claims[0]).is_subset(&allowed_claim));
    let claim_name = claims[0]["name"].as_str().unwrap();
    let template = claims[0]["resourceClaimTemplateName"].as_str().unwrap();
    let tmpl = &read_yaml_docs(&dir.join("claim-template.yaml"))[0];
    assert_eq!(tmpl["metadata"]["name"], template);
    assert_eq!(tmpl["metadata"]["namespace"], vm["metadata"]["namespace"]);
    let requests: BTreeMap<String, String> = tmpl["spec"]["spec"]["devices"]["requests"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["exactly"]["deviceClassName"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    let allowed_dev: BTreeSet<String> = ["name", "deviceName", "claimName", "requestName", "tag"]
        .map(String::from)
        .into();
    let mut asked = BTreeMap::new();
    for (list, class) in [("gpus", "vp2p-gpu"), ("hostDevices", "vp2p-nic")] {
        for d in spec["domain"]["devices"][list].as_sequence().unwrap() {
            assert!(keys(d).is_subset(&allowed_dev), "{d:?}");
            assert_eq!(d["claimName"], claim_name);
            let r = d["requestName"].as_str().unwrap().to_string();
            assert_eq!(
                requests.get(&r).map(String::as_str),
                Some(class),
                "{list} {r}"
            );
            assert!(asked.insert(r, list).is_none(), "one device per request");
        }
    }
    assert_eq!(
        asked.len(),
        requests.len(),
        "every request of the claim is a device of the VM"
    );
}

#[test]
fn bad_input_is_refused_with_a_clear_error() {
    let dir = tree_dir(TREES[0].name);
    let root = dir.to_str().unwrap();
    let out = run(
        "p2p-host",
        &[
            "dra",
            "slices",
            "--node-name",
            "Node_1",
            "--sysfs-root",
            root,
        ],
    );
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr
            .contains("node name 'Node_1' is not a DNS subdomain"),
        "{}",
        out.stderr
    );
    let out = run(
        "p2p-host",
        &[
            "dra",
            "slices",
            "--node-name",
            "n1",
            "--driver-name",
            "gpu_vp2p",
            "--sysfs-root",
            root,
        ],
    );
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr
            .contains("driver name 'gpu_vp2p' is not a DNS subdomain"),
        "{}",
        out.stderr
    );
    let tmp = tempfile::tempdir().unwrap();
    let bad = write(
        tmp.path(),
        "fmpm.json",
        r#"{"partitionInfo": [{"partitionId": 4, "numGpus": 1, "gpuInfo": [{"pciBusId": "zz"}]}]}"#,
    );
    let out = run(
        "p2p-host",
        &[
            "dra",
            "slices",
            "--node-name",
            "n1",
            "--sysfs-root",
            root,
            "--fm-partitions",
            bad.to_str().unwrap(),
        ],
    );
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("fmpm.json") && out.stderr.contains("partition 4: pciBusId 'zz'"),
        "{}",
        out.stderr
    );
}
