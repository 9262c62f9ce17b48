//! What an operator meets on day two, against the real kube-apiserver,
//! garbage collector and scheduler (v1.37.2, `kube-peers`), the driver run
//! as the DaemonSet's pod would (a token bound to a Pod on its node): a Node
//! deleted and created again under a running driver.

use std::time::Duration;

use p2p_tests::kube::ControlPlane;
use p2p_tests::kube_node::{dra_manifests, SimNode, SliceEvents};
use serde_json::Value;

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
/// (host/kube/src/kubelet_plugin/api_server.rs), nothing else. Claims and
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
