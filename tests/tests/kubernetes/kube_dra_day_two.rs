//! What an operator meets on day two, against the real kube-apiserver,
//! garbage collector and scheduler (v1.37.2, `kube-peers`), the driver run
//! as the DaemonSet's pod would (a token bound to a Pod on its node): a Node
//! deleted and created again under a running driver; what the driver's
//! token may read; a damaged or newer checkpoint and `--recover`; a claim
//! deleted while the driver was down; a claim for administrative access;
//! a Fabric Manager partition list changed under the driver. What the
//! driver tells an operator (Events, metrics) is kube_dra_told.rs.

use std::time::Duration;

use p2p_tests::kube::ControlPlane;
use p2p_tests::kube_claims::{delete_pod, kubelet_call, prepared, SliceEvents};
use p2p_tests::kube_node::{dra_manifests, SimNode, DRIVER};
use serde_json::{json, Value};

const NESTED: &str = "qemu-11.1-nested-switch-iommu-on";
const NS: &str = "day-two";
/// The driver's timer at an hour: only the slices' watch acts.
const NO_RESYNC: [&str; 2] = ["--resync-ms", "3600000"];

fn setup() -> &'static ControlPlane {
    static DONE: std::sync::OnceLock<&'static ControlPlane> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        let cp = ControlPlane::shared(module_path!());
        dra_manifests(cp);
        cp.kubectl(&["create", "namespace", NS]);
        cp
    })
}

/// The uid of the owner a slice names.
fn owner_uid(slice: &Value) -> &str {
    slice["metadata"]["ownerReferences"][0]["uid"]
        .as_str()
        .unwrap_or_default()
}

/// A Node deleted and created again with the same name (a node re-imaged,
/// or its object deleted by hand and the kubelet registering it again)
/// while the driver runs: the garbage collector deletes the slices owned by
/// the old Node once, the driver publishes them once owned by the new one,
/// and nothing happens after: one DELETED and one ADDED in 30 s.
#[test]
fn a_node_created_again_gets_its_slices_back_once_owned_by_the_new_node() {
    let cp = setup();
    let mut node = SimNode::start_in_pod(cp, "again-a", NESTED, &NO_RESYNC);
    let old = cp.get_json(&["get", "node", "again-a"])["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let slices = node.slices(cp);
    assert_eq!(slices.len(), 1);
    assert_eq!(owner_uid(&slices[0]), old);
    let events = SliceEvents::start(cp, "again-a");
    cp.kubectl(&["delete", "node", "again-a"]);
    cp.add_node("again-a", &[("vp2p.io/gpu-passthrough", "true")]);
    let new = cp.get_json(&["get", "node", "again-a"])["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(new, old);
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        let s = node.slices(cp);
        if s.len() == 1 && owner_uid(&s[0]) == new {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // A flapping driver puts the slice back owned by the old uid, which the
    // collector deletes again within seconds.
    std::thread::sleep(Duration::from_secs(30));
    let seen = events.events();
    let summary: Vec<String> = seen
        .iter()
        .map(|e| format!("{} owned by {}", e["type"], owner_uid(&e["object"])))
        .collect();
    eprintln!("old Node {old}, new Node {new}; slice events: {summary:#?}");
    let s = node.slices(cp);
    assert!(
        s.len() == 1 && owner_uid(&s[0]) == new,
        "again-a's slice not owned by the new Node after 90 s\nthe driver said:\n{}",
        node.driver_log()
    );
    let types = events.types();
    assert_eq!(
        types.iter().filter(|t| *t == "DELETED").count(),
        1,
        "{summary:#?}\nthe driver said:\n{}",
        node.driver_log()
    );
    assert_eq!(
        types.iter().filter(|t| *t == "ADDED").count(),
        1,
        "{summary:#?}"
    );
    assert_eq!(owner_uid(&seen.last().unwrap()["object"]), new);
    assert_eq!(node.terminate(), Some(0));
}

/// What the driver's token may do, as the real authorizer answers
/// `kubectl auth can-i` for it: exactly the reads and writes of its calls
/// (host/kube/src/kubelet_plugin/api_server/), nothing else. Claims and
/// Nodes are readable by name in every namespace (RBAC has no rule scoped
/// to "allocated on my node" or "my Node", see docs/kubevirt.md), but not
/// listable or watchable: a compromised driver cannot enumerate them.
#[test]
fn the_drivers_token_reads_no_more_than_it_needs() {
    let cp = setup();
    cp.add_node("scope-read", &[("vp2p.io/gpu-passthrough", "true")]);
    let tmp = tempfile::tempdir().unwrap();
    let kc = tmp.path().join("driver.kubeconfig");
    cp.token_kubeconfig(
        &cp.token("kube-system", "vp2p-dra-driver", Some("scope-read")),
        &kc,
    );
    let may = |verb: &str, resource: &str| {
        cp.try_kubectl_as(&kc, &["auth", "can-i", verb, resource, "-A"], None)
            .is_ok()
    };
    let allowed = [
        ("get", "resourceclaims.resource.k8s.io"),
        ("get", "nodes"),
        ("list", "resourceslices.resource.k8s.io"),
        ("watch", "resourceslices.resource.k8s.io"),
        ("get", "resourceslices.resource.k8s.io"),
        ("create", "resourceslices.resource.k8s.io"),
        ("update", "resourceslices.resource.k8s.io"),
        ("delete", "resourceslices.resource.k8s.io"),
        ("create", "events.events.k8s.io"),
    ];
    let refused = [
        ("list", "resourceclaims.resource.k8s.io"),
        ("watch", "resourceclaims.resource.k8s.io"),
        ("update", "resourceclaims.resource.k8s.io/status"),
        ("list", "nodes"),
        ("watch", "nodes"),
        ("patch", "nodes"),
        ("get", "pods"),
        ("list", "pods"),
        ("get", "secrets"),
        ("list", "deviceclasses.resource.k8s.io"),
        ("patch", "resourceslices.resource.k8s.io"),
        ("deletecollection", "resourceslices.resource.k8s.io"),
        ("list", "events.events.k8s.io"),
        ("create", "events"),
    ];
    let wrong: Vec<String> = allowed
        .iter()
        .filter(|(v, r)| !may(v, r))
        .map(|(v, r)| format!("refused {v} {r}"))
        .chain(
            refused
                .iter()
                .filter(|(v, r)| may(v, r))
                .map(|(v, r)| format!("allowed {v} {r}")),
        )
        .collect();
    assert!(wrong.is_empty(), "{wrong:?}");
}

/// Waits until the driver's log holds `text`.
fn logged(node: &SimNode, text: &str) {
    let start = std::time::Instant::now();
    while !node.driver_log().contains(text) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the driver did not say {text:?} within 30 s; it said:\n{}",
            node.driver_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The driver started again, which must exit with status 1: what it said.
fn refused_at_start(node: &mut SimNode) -> String {
    node.start_driver(&[]);
    assert_eq!(
        node.exited(Duration::from_secs(30)),
        Some(1),
        "{}",
        node.driver_log()
    );
    node.driver_log()
}

/// A truncated checkpoint and one of a newer version each stop the driver
/// at start with an error naming the file (the byte where reading stopped)
/// and `--recover`; `--recover` moves the file aside, releases the claim it
/// still records (its CDI spec and metadata removed), removes a CDI spec no
/// record names, and the driver serves with an empty checkpoint.
#[test]
fn a_damaged_or_newer_checkpoint_is_named_and_recover_starts_clean() {
    let cp = setup();
    let mut node = SimNode::start_in_pod(cp, "ckpt-a", NESTED, &[]);
    let (uid, spec) = prepared(cp, &node, NS, "ckpt-a-vm");
    node.stop_driver();
    let path = node.checkpoint();
    let text = std::fs::read_to_string(&path).unwrap();
    let half = text.len() / 2;
    std::fs::write(&path, &text[..half]).unwrap();
    let log = refused_at_start(&mut node);
    let named = format!(
        "the checkpoint {} is damaged at byte {half} (line ",
        path.display()
    );
    assert!(
        log.contains(&named) && log.contains("run the driver once with --recover"),
        "{log}"
    );

    let mut newer: Value = serde_json::from_str(&text).unwrap();
    newer["version"] = json!(2);
    std::fs::write(&path, newer.to_string()).unwrap();
    let log = refused_at_start(&mut node);
    assert!(
        log.contains(&format!(
            "the checkpoint {} is of version 2, written by a newer driver (this driver reads version 1): run that driver again",
            path.display()
        )),
        "{log}"
    );
    // A spec no record names (a record the file lost).
    let orphan = node.cdi.join(format!("{DRIVER}-0d0d0d0d-lost.json"));
    std::fs::copy(&spec, &orphan).unwrap();
    node.start_driver(&["--recover"]);
    logged(&node, "published 3 device(s)");
    let log = node.driver_log();
    assert!(
        log.contains(&format!(
            "--recover: released claim {NS}/ckpt-a-vm (uid {uid})"
        )),
        "{log}"
    );
    assert!(log.contains("(no claim records it)"), "{log}");
    assert!(!spec.exists() && !orphan.exists());
    assert!(!node.dir().join("metadata").join(&uid).exists());
    assert!(node.recorded_claims().is_empty());
    let aside: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("checkpoint.json.recovered-")
        })
        .collect();
    assert_eq!(aside.len(), 1);
    assert_eq!(
        std::fs::read_to_string(aside[0].path()).unwrap(),
        newer.to_string()
    );
    assert_eq!(node.terminate(), Some(0));
    delete_pod(cp, NS, "ckpt-a-vm");
}

/// A claim prepared, the driver stopped, the pod and claim deleted: the
/// next start finds the claim gone from the API server and releases it
/// before serving (its spec removed, the checkpoint empty).
#[test]
fn a_claim_deleted_while_the_driver_was_down_is_released_at_start() {
    let cp = setup();
    let mut node = SimNode::start_in_pod(cp, "reconcile-a", NESTED, &[]);
    let (uid, spec) = prepared(cp, &node, NS, "reconcile-a-vm");
    node.stop_driver();
    delete_pod(cp, NS, "reconcile-a-vm");
    cp.wait_for("the claim gone", Duration::from_secs(60), || {
        cp.try_kubectl(&["get", "resourceclaim", "reconcile-a-vm", "-n", NS])
            .is_err()
            .then_some(())
    });
    node.start_driver(&[]);
    let released = format!(
        "claim {NS}/reconcile-a-vm (uid {uid}): gone from the API server while the driver was away: releasing it"
    );
    logged(&node, &released);
    logged(&node, "published 3 device(s)");
    assert!(!spec.exists());
    assert!(node.recorded_claims().is_empty());
    assert_eq!(node.terminate(), Some(0));
}

/// A claim for administrative access (`adminAccess: true`, in a namespace
/// labelled for it, as Kubernetes requires) to every GPU of a node while a
/// VM's claim holds one: the scheduler allocates them all; prepare binds
/// nothing and opens nothing (no VFIO device node in its CDI spec: a group
/// is the VM's), gives the device metadata of all three, and the VM's claim
/// stays prepared.
#[test]
fn a_claim_for_admin_access_gets_metadata_and_no_vfio_group() {
    let cp = setup();
    let node = SimNode::start_in_pod(cp, "admin-a", NESTED, &[]);
    let (_, vm_spec) = prepared(cp, &node, NS, "admin-a-vm");
    let ns = "day-two-admin";
    cp.kubectl(&["create", "namespace", ns]);
    cp.kubectl(&[
        "label",
        "namespace",
        ns,
        "resource.kubernetes.io/admin-access=true",
    ]);
    let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
         "metadata": {"name": "monitor", "namespace": ns},
         "spec": {"devices": {"requests": [
             {"name": "gpus", "exactly": {"deviceClassName": "vp2p-gpu",
                                          "allocationMode": "All", "adminAccess": true}}]}}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "monitor", "namespace": ns},
         "spec": {
             "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                 "nodeSelectorTerms": [{"matchFields": [
                     {"key": "metadata.name", "operator": "In", "values": ["admin-a"]}]}]}}},
             "resourceClaims": [{"name": "gpus", "resourceClaimName": "monitor"}],
             "containers": [{"name": "monitor", "image": "registry.invalid/monitor:0",
                             "resources": {"claims": [{"name": "gpus"}]}}]}}]});
    cp.apply(&objects.to_string())
        .expect("the admin claim and its pod");
    let claim = cp.wait_for("the admin claim allocated", Duration::from_secs(60), || {
        let c = cp.get_json(&["get", "resourceclaim", "monitor", "-n", ns]);
        (c["status"]["allocation"]["devices"]["results"]
            .as_array()
            .is_some_and(|r| r.len() == 3))
        .then_some(c)
    });
    for r in claim["status"]["allocation"]["devices"]["results"]
        .as_array()
        .unwrap()
    {
        assert_eq!(r["adminAccess"], json!(true), "{r}");
    }
    let (uid, answer) = kubelet_call(cp, &node, ns, "monitor", false);
    let ids = answer.expect("the admin claim prepared");
    assert_eq!(ids, [format!("{DRIVER}/vfio={uid}-gpus-metadata")]);
    let spec: Value = serde_json::from_str(
        &std::fs::read_to_string(node.cdi.join(format!("{DRIVER}-{uid}.json"))).unwrap(),
    )
    .unwrap();
    assert!(!spec.to_string().contains("/dev/vfio"), "{spec:#}");
    let entry = &node.recorded_claims()[&uid];
    assert_eq!(entry["bound"], json!([]));
    let metadata: Value = serde_json::from_str(
        &std::fs::read_to_string(
            node.dir()
                .join("metadata")
                .join(&uid)
                .join("gpus")
                .join(format!("{DRIVER}-metadata.json")),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        metadata["requests"][0]["devices"].as_array().unwrap().len(),
        3
    );
    assert!(vm_spec.exists(), "the VM's claim stays prepared");
    let (_, gone) = kubelet_call(cp, &node, ns, "monitor", true);
    gone.expect("unprepared");
}

/// Fabric Manager's partition list (`fmpm -l` output) rewritten on the
/// host while the driver runs (a partition of 27:00.0 and 28:00.0 gets
/// another id): the slices carry the new id within seconds, as
/// `fmPartition2`, without a restart; a file that stops reading keeps it.
#[test]
fn a_changed_partition_list_reaches_the_slices_without_a_restart() {
    let cp = setup();
    let tmp = tempfile::tempdir().unwrap();
    let fmpm = tmp.path().join("fmpm-l.json");
    let list = |id: u32| {
        format!(
            r#"{{"maxNumPartitions": 1, "numPartitions": 1, "partitionInfo": [
  {{"gpuInfo": [{{"pciBusId": "00000000:27:00.0"}}, {{"pciBusId": "00000000:28:00.0"}}],
   "isActive": 0, "numGpus": 2, "partitionId": {id}}}], "version": 1}}"#
        )
    };
    std::fs::write(&fmpm, list(7)).unwrap();
    let more = ["--fm-partitions", fmpm.to_str().unwrap(), "--no-nvml"];
    let mut node = SimNode::start_in_pod(cp, "fm-a", NESTED, &more);
    let partition = |node: &SimNode| -> Option<Value> {
        node.slices(cp).first()?["spec"]["devices"]
            .as_array()?
            .iter()
            .find(|d| d["name"] == "gpu-0000-27-00-0")?["attributes"]
            .get("gpu.vp2p.io/fmPartition2")
            .cloned()
    };
    assert_eq!(partition(&node), Some(json!({"int": 7})));
    std::fs::write(&fmpm, list(11)).unwrap();
    let t = std::time::Instant::now();
    cp.wait_for(
        "fmPartition2 = 11 published",
        Duration::from_secs(30),
        || (partition(&node) == Some(json!({"int": 11}))).then_some(()),
    );
    eprintln!(
        "new partition id published {:.1} s after the file changed",
        t.elapsed().as_secs_f64()
    );
    std::fs::write(&fmpm, "{").unwrap();
    logged(&node, "the 1 partition(s) read before are kept");
    assert_eq!(partition(&node), Some(json!({"int": 11})));
    assert_eq!(node.terminate(), Some(0));
}
