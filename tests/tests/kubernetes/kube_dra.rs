//! DRA end to end on the real control plane (`kube-peers`: kube-apiserver,
//! kube-controller-manager and kube-scheduler of Kubernetes v1.37.2): the
//! shipped manifests and the docs' DRA blocks created on the API server;
//! `p2p-host dra driver` once per simulated node, as the shipped
//! ServiceAccount with a token the API server issued, bound by the shipped
//! ClusterRole, its slices accepted; pods asking for 1, 2, 4 and 8 GPUs (and
//! a NIC) through claims from templates of the shipped form, allocated by the
//! real scheduler, each allocation read back from the claim's status and
//! checked on the node's tree with `p2p-host plan`; pods that cannot fit left
//! Pending with the scheduler's reason. No kubelet runs (nodes are API
//! objects); the kubelet's DRA side is tests/tests/kubernetes/kube_kubelet_dra.rs.
//!
//! The nodes: `node-2s`, the captured two-socket tree (GPUs 01, 23, 24, 26,
//! 41, 83, 84; 23 and 24 below the switch 21:00.0 with the NIC 25:00.0, made
//! an RDMA NIC here; 83 and 84 below 81:00.0; 23, 24, 26 and 41 on NUMA node
//! 0), and `node-ns`, the nested-switch tree (27 and 28 on root complex
//! pci0000:20, 81 alone; 25 and 26 share an IOMMU group and are left out).

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use p2p_tests::kube::{docs_dra_yaml_blocks, ControlPlane};
use p2p_tests::kube_node::SimNode;
use p2p_tests::{binary, repo_root, stdout_of};
use serde_json::{json, Value};

const NS: &str = "vp2p-e2e";

struct Cluster {
    cp: &'static ControlPlane,
    nodes: Vec<SimNode>,
}

/// The shipped driver manifests and DeviceClasses, then the two nodes and
/// their drivers; once for the test binary.
fn cluster() -> &'static Cluster {
    static C: OnceLock<Cluster> = OnceLock::new();
    C.get_or_init(|| {
        let cp = ControlPlane::shared(module_path!());
        let dra = repo_root().join("host/kubernetes/dra");
        for f in ["driver.yaml", "deviceclasses.yaml"] {
            let yaml = std::fs::read_to_string(dra.join(f)).unwrap();
            cp.apply(&yaml)
                .unwrap_or_else(|e| panic!("the API server refused {f}: {e}"));
        }
        cp.kubectl(&["create", "namespace", NS]);
        let nodes = vec![
            SimNode::start(
                cp,
                "node-2s",
                "qemu-11.1-two-socket-iommu-on",
                &["0000:25:00.0"],
            ),
            SimNode::start(cp, "node-ns", "qemu-11.1-nested-switch-iommu-on", &[]),
        ];
        Cluster { cp, nodes }
    })
}

#[test]
fn the_api_server_accepts_the_shipped_manifests_and_the_docs_dra_blocks() {
    let c = cluster();
    let dra = repo_root().join("host/kubernetes/dra");
    for f in ["driver.yaml", "deviceclasses.yaml", "claim-template.yaml"] {
        let yaml = std::fs::read_to_string(dra.join(f)).unwrap();
        let out =
            c.cp.try_kubectl_as(
                &c.cp.kubeconfig(),
                &["apply", "--dry-run=server", "-f", "-"],
                Some(&yaml),
            )
            .unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(out.contains("(server dry run)"), "{f}: {out}");
    }
    let blocks = docs_dra_yaml_blocks();
    assert!(blocks.len() >= 2, "the DRA section's yaml blocks");
    for (i, b) in blocks.iter().enumerate() {
        let out =
            c.cp.try_kubectl_as(
                &c.cp.kubeconfig(),
                &["create", "--dry-run=server", "-f", "-"],
                Some(b),
            )
            .or_else(|e| {
                // Created by the cluster's set-up already: still validated.
                if e.contains("AlreadyExists") {
                    Ok(e)
                } else {
                    Err(e)
                }
            })
            .unwrap_or_else(|e| panic!("docs block {i}: {e}\n{b}"));
        assert!(!out.is_empty(), "block {i}");
    }
    // The VirtualMachine's claim part as virt-controller turns it into the
    // virt-launcher pod: the VMI's resourceClaims, and each gpus[] /
    // hostDevices[] entry a claim of the container naming its request.
    let vm: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(dra.join("virtualmachine.yaml")).unwrap())
            .unwrap();
    let pod = launcher_pod(
        &serde_json::to_value(vm).unwrap(),
        "default",
        "launcher-dry-run",
    );
    c.cp.try_kubectl_as(
        &c.cp.kubeconfig(),
        &["create", "--dry-run=server", "-f", "-"],
        Some(&pod.to_string()),
    )
    .unwrap_or_else(|e| panic!("the VirtualMachine's claim part: {e}"));
    // The same server refuses a DeviceClass whose CEL does not compile: the
    // acceptance above is the server's judgement, not a pass-through.
    let bad = json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "vp2p-broken"},
        "spec": {"selectors": [{"cel": {"expression": "device.attributes[\"gpu.vp2p.io\"].kind =="}}]}});
    let err =
        c.cp.try_kubectl_as(
            &c.cp.kubeconfig(),
            &["create", "--dry-run=server", "-f", "-"],
            Some(&bad.to_string()),
        )
        .expect_err("a DeviceClass with broken CEL is refused");
    assert!(
        err.contains("compilation failed") || err.contains("Syntax error"),
        "{err}"
    );
}

/// The pod virt-controller makes for `vm`'s VMI template: its
/// `resourceClaims`, and a compute container claiming each request its
/// GPUs and host devices name.
fn launcher_pod(vm: &Value, ns: &str, name: &str) -> Value {
    let spec = &vm["spec"]["template"]["spec"];
    let claims: Vec<Value> = spec["domain"]["devices"]["gpus"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(
            spec["domain"]["devices"]["hostDevices"]
                .as_array()
                .into_iter()
                .flatten(),
        )
        .map(|d| json!({"name": d["claimName"], "request": d["requestName"]}))
        .collect();
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"resourceClaims": spec["resourceClaims"],
            "containers": [{"name": "compute", "image": "registry.example/virt-launcher",
                "resources": {"claims": claims}}]}})
}

#[test]
fn each_driver_publishes_through_the_shipped_rbac_what_dra_slices_prints() {
    let c = cluster();
    for node in &c.nodes {
        let published = node.slices(c.cp);
        let expected = node.expected_slices();
        let want: Vec<&Value> = expected["items"].as_array().unwrap().iter().collect();
        assert_eq!(published.len(), want.len(), "{}: slice count", node.name);
        for (got, want) in published.iter().zip(want) {
            assert_eq!(
                got["spec"]["devices"], want["spec"]["devices"],
                "{}",
                node.name
            );
            assert_eq!(got["spec"]["nodeName"], json!(node.name));
            assert_eq!(got["spec"]["pool"]["name"], json!(node.name));
        }
        let log = node.driver_log();
        assert!(
            !log.contains("403") && !log.contains("forbidden"),
            "{}: the shipped RBAC refused a call of the driver:\n{log}",
            node.name
        );
    }
    // By hand from the trees: 7 GPUs and the NIC on node-2s, 3 GPUs on node-ns.
    let names = |n: &SimNode| -> BTreeSet<String> { n.bus_ids(c.cp).into_values().collect() };
    assert_eq!(
        names(&c.nodes[0]),
        ["01", "23", "24", "25", "26", "41", "83", "84"]
            .iter()
            .map(|b| format!("0000:{b}:00.0"))
            .collect()
    );
    assert_eq!(
        names(&c.nodes[1]),
        ["27", "28", "81"]
            .iter()
            .map(|b| format!("0000:{b}:00.0"))
            .collect()
    );
}

/// A claim template of the shipped form: `gpus` one-device GPU requests
/// (and `nics` NIC requests) under one claim-level `matchAttribute`.
fn template(name: &str, gpus: usize, nics: usize, level: Option<&str>) -> Value {
    let req = |name: String, class: &str| {
        json!({"name": name, "exactly": {"deviceClassName": class,
            "allocationMode": "ExactCount", "count": 1}})
    };
    let mut requests: Vec<Value> = (0..gpus)
        .map(|i| req(format!("gpu-{i}"), "vp2p-gpu"))
        .collect();
    requests.extend((0..nics).map(|i| req(format!("nic-{i}"), "vp2p-nic")));
    let mut devices = json!({"requests": requests});
    if let Some(l) = level {
        devices["constraints"] = json!([{"matchAttribute": format!("gpu.vp2p.io/{l}")}]);
    }
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"spec": {"devices": devices}}})
}

fn pod(name: &str, template: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"resourceClaims": [{"name": "devices", "resourceClaimTemplateName": template}],
            "containers": [{"name": "compute", "image": "registry.example/virt-launcher",
                "resources": {"claims": [{"name": "devices"}]}}]}})
}

/// Where the scheduler put `pod`: its node and the allocated devices' bus
/// ids, read back from the claim's `status.allocation`.
fn placed(c: &Cluster, pod: &str) -> Option<(String, BTreeSet<String>)> {
    let nodes: Vec<&SimNode> = c.nodes.iter().collect();
    placed_on(c.cp, &nodes, pod)
}

/// [`placed`] among `nodes`.
fn placed_on(
    cp: &ControlPlane,
    nodes: &[&SimNode],
    pod: &str,
) -> Option<(String, BTreeSet<String>)> {
    let p = cp.get_json(&["get", "pod", pod, "-n", NS]);
    let node = p["spec"]["nodeName"].as_str()?.to_string();
    let claim = p["status"]["resourceClaimStatuses"][0]["resourceClaimName"].as_str()?;
    let claim = cp.get_json(&["get", "resourceclaim", claim, "-n", NS]);
    let results = claim["status"]["allocation"]["devices"]["results"].as_array()?;
    let sim = nodes.iter().find(|n| n.name == node)?;
    let ids = sim.bus_ids(cp);
    let mut bdfs = BTreeSet::new();
    for r in results {
        assert_eq!(r["driver"], json!("gpu.vp2p.io"));
        assert_eq!(r["pool"], json!(node), "a device of the pod's own node");
        bdfs.insert(ids[r["device"].as_str()?].clone());
    }
    Some((node, bdfs))
}

/// Waits until the pod is unschedulable; the scheduler's message.
fn unschedulable(c: &Cluster, pod: &str) -> String {
    c.cp.wait_for(
        &format!("pod {pod} marked unschedulable"),
        Duration::from_secs(60),
        || {
            let p = c.cp.get_json(&["get", "pod", pod, "-n", NS]);
            let cond = p["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "PodScheduled")?
                .clone();
            (cond["status"] == "False" && cond["reason"] == "Unschedulable")
                .then(|| cond["message"].as_str().unwrap_or_default().to_string())
        },
    )
}

/// Deletes the pod (forced: no kubelet confirms) and waits until its claim
/// is gone, so its devices are free again.
fn remove(c: &Cluster, pod: &str) {
    c.cp.kubectl(&[
        "delete",
        "pod",
        pod,
        "-n",
        NS,
        "--grace-period=0",
        "--force",
        "--wait=false",
    ]);
    c.cp.wait_for(
        &format!("the claim of {pod} deleted"),
        Duration::from_secs(60),
        || {
            let list = c.cp.get_json(&["get", "resourceclaims", "-n", NS]);
            let left = list["items"].as_array().map_or(0, |a| {
                a.iter()
                    .filter(|x| {
                        x["metadata"]["name"]
                            .as_str()
                            .is_some_and(|n| n.starts_with(pod))
                    })
                    .count()
            });
            (left == 0).then_some(())
        },
    );
}

/// The cliques `p2p-host plan` makes of `gpus` on `node`'s tree at `level`.
fn plan_cliques(node: &SimNode, gpus: &BTreeSet<String>, level: &str) -> Vec<Vec<String>> {
    let list: Vec<&str> = gpus.iter().map(String::as_str).collect();
    let out = stdout_of(
        Command::new(binary("p2p-host"))
            .args([
                "plan",
                "--gpu-class",
                "0108",
                "--json",
                "--max-level",
                level,
            ])
            .arg("--sysfs-root")
            .arg(&node.tree)
            .arg("--vm")
            .arg(format!("vm={}", list.join(","))),
    );
    let plan: Value = serde_json::from_str(&out).unwrap();
    serde_json::from_value(plan["vms"][0]["cliques"].clone()).unwrap()
}

fn bdfs(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|b| format!("0000:{b}:00.0")).collect()
}

#[test]
fn the_real_scheduler_places_1_2_4_and_8_gpus_as_one_clique_and_leaves_what_cannot_fit_pending() {
    let c = cluster();
    // (GPUs, NICs, matchAttribute, the level `plan` checks, where it can go:
    // the node and the exact set when only one fits, derived by hand).
    type Case = (
        usize,
        usize,
        &'static str,
        &'static str,
        Option<(&'static str, Vec<&'static str>)>,
    );
    let cases: Vec<Case> = vec![
        (1, 0, "cliquePhb", "phb", None),
        (2, 0, "cliquePix", "pix", None),
        (
            2,
            1,
            "cliquePix",
            "pix",
            Some(("node-2s", vec!["23", "24", "25"])),
        ),
        (2, 0, "cliquePhb", "phb", None),
        (
            4,
            0,
            "cliqueNode",
            "node",
            Some(("node-2s", vec!["23", "24", "26", "41"])),
        ),
    ];
    for (i, (gpus, nics, attr, level, exact)) in cases.into_iter().enumerate() {
        let name = format!("place-{i}-{gpus}g{nics}n-{}", attr.to_lowercase());
        c.cp.apply(&template(&name, gpus, nics, Some(attr)).to_string())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        c.cp.create(&pod(&name, &name).to_string())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let (node, got) = c.cp.wait_for(
            &format!("pod {name} placed"),
            Duration::from_secs(60),
            || placed(c, &name),
        );
        eprintln!("{name}: the scheduler placed it on {node}: {got:?}");
        assert_eq!(got.len(), gpus + nics, "{name}: one device per request");
        if let Some((want_node, want)) = &exact {
            assert_eq!(&node, want_node, "{name}");
            assert_eq!(got, bdfs(want), "{name}");
        }
        let sim = c.nodes.iter().find(|n| n.name == node).unwrap();
        let ids = sim.bus_ids(c.cp);
        let nic_ids: BTreeSet<String> = ["0000:25:00.0"].iter().map(|s| s.to_string()).collect();
        let gpu_set: BTreeSet<String> = got.difference(&nic_ids).cloned().collect();
        assert!(ids.values().any(|v| gpu_set.contains(v)));
        let cliques = plan_cliques(sim, &gpu_set, level);
        assert_eq!(
            cliques.len(),
            1,
            "{name}: the scheduler's GPUs {gpu_set:?} on {node} are one clique at {level} as plan says: {cliques:?}"
        );
        remove(c, &name);
    }
    // Pods that stay: the scheduler fills node-2s's two switch pairs, then has
    // no pair below one switch left anywhere (node-ns's 27 and 28 sit below
    // different ports), and finds the one free root-complex pair on node-ns.
    let mut held = Vec::new();
    for (name, attr) in [("hold-a", "cliquePix"), ("hold-b", "cliquePix")] {
        c.cp.apply(&template(name, 2, 0, Some(attr)).to_string())
            .unwrap();
        c.cp.create(&pod(name, name).to_string()).unwrap();
        let (node, got) =
            c.cp.wait_for(name, Duration::from_secs(60), || placed(c, name));
        eprintln!("{name}: the scheduler placed it on {node}: {got:?}");
        assert_eq!(node, "node-2s", "{name}");
        held.push(got);
    }
    let pairs: BTreeSet<BTreeSet<String>> = held.into_iter().collect();
    assert_eq!(
        pairs,
        [bdfs(&["23", "24"]), bdfs(&["83", "84"])]
            .into_iter()
            .collect()
    );
    c.cp.apply(&template("hold-c", 2, 0, Some("cliquePix")).to_string())
        .unwrap();
    c.cp.create(&pod("hold-c", "hold-c").to_string()).unwrap();
    let why = unschedulable(c, "hold-c");
    eprintln!("hold-c: Pending: {why}");
    assert!(why.contains("cannot allocate all claims"), "{why}");
    c.cp.apply(&template("hold-d", 2, 0, Some("cliquePhb")).to_string())
        .unwrap();
    c.cp.create(&pod("hold-d", "hold-d").to_string()).unwrap();
    let (node, got) =
        c.cp.wait_for("hold-d", Duration::from_secs(60), || placed(c, "hold-d"));
    eprintln!("hold-d: the scheduler placed it on {node}: {got:?}");
    assert_eq!((node.as_str(), got), ("node-ns", bdfs(&["27", "28"])));
    for p in ["hold-a", "hold-b", "hold-c", "hold-d"] {
        remove(c, p);
    }
    // The shipped template (four GPUs and the NIC below one switch), as the
    // VirtualMachine's pod asks for it: no node has four GPUs below a switch.
    let dra = repo_root().join("host/kubernetes/dra");
    let shipped = std::fs::read_to_string(dra.join("claim-template.yaml")).unwrap();
    let mut t: Value =
        serde_json::to_value(serde_yaml::from_str::<serde_yaml::Value>(&shipped).unwrap()).unwrap();
    t["metadata"]["namespace"] = json!(NS);
    c.cp.apply(&t.to_string()).unwrap();
    let vm: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(dra.join("virtualmachine.yaml")).unwrap())
            .unwrap();
    let launcher = launcher_pod(
        &serde_json::to_value(vm).unwrap(),
        NS,
        "virt-launcher-peers",
    );
    c.cp.create(&launcher.to_string()).unwrap();
    let why = unschedulable(c, "virt-launcher-peers");
    eprintln!("virt-launcher-peers (the shipped template): Pending: {why}");
    assert!(
        why.contains("0/2 nodes are available") && why.contains("cannot allocate all claims"),
        "the scheduler's reason: {why}"
    );
    // Eight GPUs on one root complex: the largest node has seven.
    c.cp.apply(&template("eight", 8, 0, Some("cliquePhb")).to_string())
        .unwrap();
    c.cp.create(&pod("eight", "eight").to_string()).unwrap();
    let why = unschedulable(c, "eight");
    eprintln!("eight GPUs: Pending: {why}");
    assert!(why.contains("cannot allocate all claims"), "{why}");
    remove(c, "virt-launcher-peers");
    // Then a node of eight joins (boot.sh's eight-gpu: four GPUs below each
    // of two switches of one root complex, captured from a QEMU guest): the
    // pending pod gets its eight there, one clique at PHB as plan says, and a
    // pod asking for four below one switch, once the eight are free again,
    // gets one switch's four.
    let eight = SimNode::start(c.cp, "node-8g", "qemu-11.1-eight-gpu-iommu-on", &[]);
    let nodes: Vec<&SimNode> = c.nodes.iter().chain([&eight]).collect();
    let (node, got) = c.cp.wait_for("eight placed", Duration::from_secs(60), || {
        placed_on(c.cp, &nodes, "eight")
    });
    eprintln!("eight: the scheduler placed it on {node}: {got:?}");
    let (sw0, sw1) = (
        bdfs(&["23", "24", "25", "26"]),
        bdfs(&["29", "2a", "2b", "2c"]),
    );
    assert_eq!(node, "node-8g");
    assert_eq!(got, sw0.union(&sw1).cloned().collect());
    assert_eq!(plan_cliques(&eight, &got, "phb").len(), 1);
    remove(c, "eight");
    c.cp.apply(&template("four", 4, 0, Some("cliquePix")).to_string())
        .unwrap();
    c.cp.create(&pod("four", "four").to_string()).unwrap();
    let (node, got) = c.cp.wait_for("four placed", Duration::from_secs(60), || {
        placed_on(c.cp, &nodes, "four")
    });
    eprintln!("four: the scheduler placed it on {node}: {got:?}");
    assert_eq!(node, "node-8g");
    assert!(got == sw0 || got == sw1, "one switch's four: {got:?}");
    assert_eq!(plan_cliques(&eight, &got, "pix").len(), 1);
    remove(c, "four");
}
