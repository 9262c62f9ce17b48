//! The DRA driver as an operator upgrades, restarts and scopes it, against
//! the real kube-apiserver, scheduler and garbage collector (v1.37.2,
//! `kube-peers`), as the shipped ServiceAccount with tokens bound to each
//! Node: a stopped driver leaves its slices, so the scheduler keeps placing
//! pods on the node while it restarts, and the next start adopts them (same
//! objects, the next pool generation); a slice deleted or edited by hand is
//! put back within seconds by the slices' watch, not the timer; the slices
//! are owned by their Node and go with it; `--remove-slices` removes them
//! at uninstall; the shipped ValidatingAdmissionPolicy lets each node's
//! driver write only its own node's slices; and every verb of the shipped
//! ClusterRole is one the driver needs.

use std::process::Command;
use std::time::{Duration, Instant};

use p2p_tests::kube::ControlPlane;
use p2p_tests::kube_claims::{delete_pod, kubelet_call, one_gpu_pod, scheduled, SliceEvents};
use p2p_tests::kube_node::{dra_manifests, SimNode, DRIVER};
use p2p_tests::{binary, repo_root};
use serde_json::{json, Value};

const NESTED: &str = "qemu-11.1-nested-switch-iommu-on";
const NS: &str = "upgrade";
/// The driver's timer in the tests where only the watch may put a slice
/// back: an hour.
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

/// The node's one slice, once it is at pool generation `g`.
fn at_generation(cp: &ControlPlane, node: &SimNode, g: i64, within: Duration) -> Value {
    cp.wait_for(
        &format!("{}'s slice at generation {g}", node.name),
        within,
        || {
            let s = node.slices(cp);
            (s.len() == 1 && s[0]["spec"]["pool"]["generation"] == json!(g)).then(|| s[0].clone())
        },
    )
}

/// Ten rolling restarts (SIGTERM, then start again, as a DaemonSet's
/// update does) with a claim prepared across all of them: the slice stays
/// published across each (the API server sends no DELETED event), a pod
/// created while the driver is down is scheduled on the node and prepared
/// by the restarted driver, each start adopts the slice (the same object,
/// the next pool generation, owned by the node's Node), and the claim
/// prepared before the first restart is neither lost nor prepared twice:
/// the kubelet's prepare after each restart answers the same CDI ids from
/// the checkpoint, its CDI spec is the same file, never written again.
#[test]
fn ten_rolling_restarts_never_withdraw_the_nodes_devices() {
    let cp = setup();
    let mut node = SimNode::start(cp, "upgrade-a", NESTED, &[]);
    let first = at_generation(cp, &node, 1, Duration::from_secs(30));
    let uid = first["metadata"]["uid"].clone();
    let node_uid = cp.get_json(&["get", "node", "upgrade-a"])["metadata"]["uid"].clone();
    // A VM's pod running across the restarts: its claim prepared once.
    cp.apply(&one_gpu_pod(NS, "held", "upgrade-a").to_string())
        .expect("the pod and its claim");
    scheduled(cp, NS, "held", "upgrade-a");
    let (held_uid, held) = kubelet_call(cp, &node, NS, "held", false);
    let held = held.expect("the held claim is prepared");
    let spec = node.cdi.join(format!("{DRIVER}-{held_uid}.json"));
    let spec_written = std::fs::metadata(&spec).unwrap().modified().unwrap();
    let events = SliceEvents::start(cp, "upgrade-a");
    for round in 1..=10i64 {
        assert_eq!(node.terminate(), Some(0), "round {round}: a clean stop");
        let held_slices = node.slices(cp);
        assert_eq!(
            held_slices.len(),
            1,
            "round {round}: the slice is still there"
        );
        assert!(
            node.driver_log().contains("stay published"),
            "{}",
            node.driver_log()
        );
        // While the driver is down, the scheduler still sees the devices.
        let pod = format!("during-restart-{round}");
        cp.apply(&one_gpu_pod(NS, &pod, "upgrade-a").to_string())
            .expect("the pod and its claim");
        scheduled(cp, NS, &pod, "upgrade-a");
        node.start_driver(&[]);
        let adopted = at_generation(cp, &node, round + 1, Duration::from_secs(30));
        assert_eq!(adopted["metadata"]["uid"], uid, "round {round}: adopted");
        assert_eq!(
            adopted["metadata"]["ownerReferences"],
            json!([{"apiVersion": "v1", "kind": "Node", "name": "upgrade-a",
                    "uid": node_uid, "controller": true}]),
            "round {round}"
        );
        assert!(node.driver_log().contains("adopting the published slices"));
        // The held claim: the same answer, from the checkpoint.
        let (_, again) = kubelet_call(cp, &node, NS, "held", false);
        assert_eq!(again.as_ref(), Ok(&held), "round {round}: the held claim");
        assert_eq!(
            std::fs::metadata(&spec).unwrap().modified().unwrap(),
            spec_written,
            "round {round}: the held claim's CDI spec is not written again"
        );
        // The new pod's claim: prepared by the restarted driver, then given back.
        let (new_uid, new) = kubelet_call(cp, &node, NS, &pod, false);
        assert!(new.is_ok(), "round {round}: {new:?}");
        let claims = node.recorded_claims();
        assert_eq!(claims.len(), 2, "round {round}: {claims:?}");
        assert_eq!(claims[&held_uid]["state"], "prepared");
        assert_eq!(claims[&new_uid]["state"], "prepared");
        let (_, gone) = kubelet_call(cp, &node, NS, &pod, true);
        assert_eq!(gone, Ok(Vec::new()), "round {round}");
        delete_pod(cp, NS, &pod);
    }
    let types = events.types();
    assert!(
        !types.iter().any(|t| t == "DELETED"),
        "the API server deleted the slice during the restarts: {types:?}"
    );
    assert!(
        types.iter().filter(|t| *t == "MODIFIED").count() >= 10,
        "one adoption per restart at least: {types:?}"
    );
    let (_, gone) = kubelet_call(cp, &node, NS, "held", true);
    assert_eq!(gone, Ok(Vec::new()));
    assert!(node.recorded_claims().is_empty(), "nothing left recorded");
    assert!(!spec.exists(), "the held claim's spec removed at unprepare");
    delete_pod(cp, NS, "held");
    assert_eq!(node.terminate(), Some(0));
}

/// With the driver's timer at an hour, a slice deleted by hand, then one
/// edited by hand, is put back by the slices' watch within seconds.
#[test]
fn a_slice_deleted_or_edited_by_hand_is_back_within_seconds() {
    let cp = setup();
    let mut node = SimNode::start_with(cp, "upgrade-b", NESTED, &[], &NO_RESYNC);
    let s = at_generation(cp, &node, 1, Duration::from_secs(30));
    let name = s["metadata"]["name"].as_str().unwrap().to_string();
    let want = s["spec"]["devices"].clone();
    let t = Instant::now();
    cp.kubectl(&["delete", "resourceslice", &name]);
    let back = at_generation(cp, &node, 2, Duration::from_secs(10));
    eprintln!("deleted slice back in {:.1} s", t.elapsed().as_secs_f64());
    assert_eq!(back["spec"]["devices"], want);
    let t = Instant::now();
    drop_first_device(cp, &name);
    let back = at_generation(cp, &node, 3, Duration::from_secs(10));
    eprintln!("edited slice back in {:.1} s", t.elapsed().as_secs_f64());
    assert_eq!(back["spec"]["devices"], want);
    assert_eq!(node.terminate(), Some(0));
}

/// The slices are owned by their Node: with the driver stopped (its
/// slices left), deleting the Node has the garbage collector delete them.
/// `--remove-slices` deletes a node's slices at uninstall.
#[test]
fn the_slices_go_with_their_node_or_on_request() {
    let cp = setup();
    let mut node = SimNode::start(cp, "upgrade-c", NESTED, &[]);
    at_generation(cp, &node, 1, Duration::from_secs(30));
    assert_eq!(node.terminate(), Some(0));
    assert_eq!(node.slices(cp).len(), 1);
    cp.kubectl(&["delete", "node", "upgrade-c"]);
    cp.wait_for(
        "the garbage collector deleting upgrade-c's slices",
        Duration::from_secs(60),
        || node.slices(cp).is_empty().then_some(()),
    );

    let mut node = SimNode::start(cp, "upgrade-d", NESTED, &[]);
    at_generation(cp, &node, 1, Duration::from_secs(30));
    assert_eq!(node.terminate(), Some(0));
    assert_eq!(node.slices(cp).len(), 1, "left by the stop");
    let out = remove_slices(&node);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("removed 1 ResourceSlice(s) of {DRIVER} on node upgrade-d\n")
    );
    assert!(node.slices(cp).is_empty());
}

/// Edits slice `name` by hand: its first device removed.
fn drop_first_device(cp: &ControlPlane, name: &str) {
    cp.kubectl(&[
        "patch",
        "resourceslice",
        name,
        "--type=json",
        "-p",
        r#"[{"op": "remove", "path": "/spec/devices/0"}]"#,
    ]);
}

/// `p2p-host dra driver --remove-slices` for `node`, with its driver's
/// credentials.
fn remove_slices(node: &SimNode) -> std::process::Output {
    Command::new(binary("p2p-host"))
        .args([
            "dra",
            "driver",
            "--node-name",
            &node.name,
            "--remove-slices",
        ])
        .arg("--kubeconfig")
        .arg(&node.kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("p2p-host runs")
}

/// A ResourceSlice of `node` as the driver writes one.
fn slice_of(node: &str, name: &str) -> String {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": DRIVER, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": "gpu-0000-01-00-0"}]}})
    .to_string()
}

/// The driver's identity with a token bound to Node `node` (None: a token
/// bound to nothing), as a kubeconfig.
fn driver_kubeconfig(
    cp: &ControlPlane,
    dir: &std::path::Path,
    node: Option<&str>,
) -> std::path::PathBuf {
    let kc = dir.join(format!("{}.kubeconfig", node.unwrap_or("unbound")));
    cp.token_kubeconfig(&cp.token("kube-system", "vp2p-dra-driver", node), &kc);
    kc
}

/// The shipped ValidatingAdmissionPolicy, run by the real API server: the
/// driver of node A may not create, update or delete node B's slice; B's
/// driver may; a token that names no node may write none; B's driver may not
/// write another driver's slice on its own node, nor a pool not its node's.
#[test]
fn each_nodes_driver_may_write_only_its_own_nodes_slices() {
    let cp = setup();
    for n in ["scope-a", "scope-b"] {
        cp.add_node(n, &[("vp2p.io/gpu-passthrough", "true")]);
    }
    let tmp = tempfile::tempdir().unwrap();
    let a = driver_kubeconfig(cp, tmp.path(), Some("scope-a"));
    let b = driver_kubeconfig(cp, tmp.path(), Some("scope-b"));
    let none = driver_kubeconfig(cp, tmp.path(), None);
    let slice_b = slice_of("scope-b", "scope-b-gpu.vp2p.io-0");
    let refused = cp
        .try_kubectl_as(&a, &["create", "-f", "-"], Some(&slice_b))
        .expect_err("node A's driver creating node B's slice");
    assert!(
        refused.contains("vp2p-dra-driver-own-node")
            && refused.contains(
                "the vp2p DRA driver of node scope-a may write only that node's \
                 ResourceSlices, not node scope-b's"
            ),
        "{refused}"
    );
    let refused = cp
        .try_kubectl_as(&none, &["create", "-f", "-"], Some(&slice_b))
        .expect_err("a token bound to no node");
    assert!(refused.contains("token names no node"), "{refused}");
    cp.try_kubectl_as(&b, &["create", "-f", "-"], Some(&slice_b))
        .expect("node B's driver creates its own slice");
    // Update and delete of B's slice by A are refused too; B may.
    let mut updated = cp.get_json(&["get", "resourceslice", "scope-b-gpu.vp2p.io-0"]);
    updated["spec"]["pool"]["generation"] = json!(2);
    let refused = cp
        .try_kubectl_as(&a, &["replace", "-f", "-"], Some(&updated.to_string()))
        .expect_err("A updating B's slice");
    assert!(refused.contains("not node scope-b's"), "{refused}");
    let refused = cp
        .try_kubectl_as(
            &a,
            &["delete", "resourceslice", "scope-b-gpu.vp2p.io-0"],
            None,
        )
        .expect_err("A deleting B's slice");
    assert!(refused.contains("not node scope-b's"), "{refused}");
    cp.try_kubectl_as(&b, &["replace", "-f", "-"], Some(&updated.to_string()))
        .expect("B updates its own slice");
    cp.try_kubectl_as(
        &b,
        &["delete", "resourceslice", "scope-b-gpu.vp2p.io-0"],
        None,
    )
    .expect("B deletes its own slice");
    // Another driver's slice on B's own node: B may not create, update or
    // delete it (the admin creates it, as NVIDIA's driver would have).
    let mut nvidia: Value =
        serde_json::from_str(&slice_of("scope-b", "scope-b-gpu.nvidia.com-0")).unwrap();
    nvidia["spec"]["driver"] = json!("gpu.nvidia.com");
    let refused = cp
        .try_kubectl_as(&b, &["create", "-f", "-"], Some(&nvidia.to_string()))
        .expect_err("B creating gpu.nvidia.com's slice on its own node");
    assert!(
        refused.contains("may write only gpu.vp2p.io's ResourceSlices, not gpu.nvidia.com's"),
        "{refused}"
    );
    cp.create(&nvidia.to_string())
        .expect("the admin creates it");
    let mut theirs = cp.get_json(&["get", "resourceslice", "scope-b-gpu.nvidia.com-0"]);
    theirs["spec"]["pool"]["generation"] = json!(2);
    let refused = cp
        .try_kubectl_as(&b, &["replace", "-f", "-"], Some(&theirs.to_string()))
        .expect_err("B updating gpu.nvidia.com's slice");
    assert!(refused.contains("not gpu.nvidia.com's"), "{refused}");
    let refused = cp
        .try_kubectl_as(
            &b,
            &["delete", "resourceslice", "scope-b-gpu.nvidia.com-0"],
            None,
        )
        .expect_err("B deleting gpu.nvidia.com's slice");
    assert!(refused.contains("not gpu.nvidia.com's"), "{refused}");
    // vp2p's driver, its own node, another pool name: refused too.
    let mut pool: Value =
        serde_json::from_str(&slice_of("scope-b", "scope-b-gpu.vp2p.io-9")).unwrap();
    pool["spec"]["pool"]["name"] = json!("scope-a");
    let refused = cp
        .try_kubectl_as(&b, &["create", "-f", "-"], Some(&pool.to_string()))
        .expect_err("B writing a pool not its node's");
    assert!(
        refused.contains("may write only pool scope-b, not scope-a"),
        "{refused}"
    );
}

/// The shipped ClusterRole (host/kubernetes/dra/driver.yaml).
fn shipped_role() -> Value {
    let text =
        std::fs::read_to_string(repo_root().join("host/kubernetes/dra/driver.yaml")).unwrap();
    let role = p2p_tests::yaml_documents(&text)
        .into_iter()
        .find(|d| d["kind"] == "ClusterRole")
        .expect("the ClusterRole");
    serde_json::to_value(role).unwrap()
}

/// The shipped ClusterRole's rules as (resource, verb) pairs.
fn shipped_rules() -> Vec<(String, String)> {
    let role = shipped_role();
    let mut pairs = Vec::new();
    for rule in role["rules"].as_array().unwrap() {
        for r in rule["resources"].as_array().unwrap() {
            for v in rule["verbs"].as_array().unwrap() {
                pairs.push((r.as_str().unwrap().into(), v.as_str().unwrap().into()));
            }
        }
    }
    pairs
}

/// The ClusterRole without `verb` on `resource`, named `name`.
fn role_without(name: &str, resource: &str, verb: &str) -> Value {
    let mut role = shipped_role();
    role["metadata"]["name"] = json!(name);
    let rules = role["rules"].as_array_mut().unwrap();
    for rule in rules.iter_mut() {
        if rule["resources"]
            .as_array()
            .unwrap()
            .contains(&json!(resource))
        {
            rule["verbs"].as_array_mut().unwrap().retain(|v| v != verb);
        }
    }
    // A rule with no verb left is no rule (the API server refuses it).
    rules.retain(|r| !r["verbs"].as_array().unwrap().is_empty());
    role
}

/// What the driver does with the API server, start to uninstall, as
/// ServiceAccount `kube-system/<account>` on a new node `node`, each step
/// waited for at most `limit`: publish (slices list and create, its Node
/// read for the owner reference), put back a slice deleted by hand (the
/// watch: the timer is an hour), put back one edited by hand (get and
/// update), prepare a claim the scheduler allocated (the claim read), tell
/// a failed prepare as an Event (events create), and remove the slices at
/// uninstall (delete). The first step that did not
/// happen, or None.
fn lifecycle(cp: &ControlPlane, node: &str, account: &str, limit: Duration) -> Option<String> {
    let mut sim = SimNode::start_as(cp, node, NESTED, &[], account, &NO_RESYNC);
    let owned = |s: &Value| s["metadata"]["ownerReferences"][0]["kind"] == "Node";
    let within = |f: &mut dyn FnMut() -> bool| {
        let t = Instant::now();
        while t.elapsed() < limit {
            if f() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    };
    let one = |sim: &SimNode| {
        let s = sim.slices(cp);
        (s.len() == 1).then(|| s[0].clone())
    };
    if !within(&mut || one(&sim).is_some_and(|s| owned(&s))) {
        return Some("publish, owned by the Node".into());
    }
    let name = one(&sim).unwrap()["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    cp.kubectl(&["delete", "resourceslice", &name]);
    if !within(&mut || one(&sim).is_some()) {
        return Some("put back a deleted slice".into());
    }
    drop_first_device(cp, &name);
    if !within(&mut || {
        one(&sim).is_some_and(|s| s["spec"]["devices"].as_array().unwrap().len() == 3)
    }) {
        return Some("put back an edited slice".into());
    }
    let pod = format!("{node}-vm");
    cp.apply(&one_gpu_pod(NS, &pod, node).to_string()).unwrap();
    scheduled(cp, NS, &pod, node);
    let uid = cp.get_json(&["get", "resourceclaim", &pod, "-n", NS])["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let socket = sim.kubelet.join(format!("plugins/{DRIVER}/dra.sock"));
    let answer = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let mut dra = p2p_tests::dra_kubelet::Dra::v1(&socket).await;
            dra.prepare(&[(NS, pod.as_str(), uid.as_str())]).await
        })
        .expect("NodePrepareResources answers");
    delete_pod(cp, NS, &pod);
    if !answer[&uid].error.is_empty() {
        return Some(format!("prepare: {}", answer[&uid].error));
    }
    // A claim the API server does not have: the prepare fails, and the
    // failure is an Event regarding the claim.
    let missing = format!("{node}-missing");
    let failed = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let mut dra = p2p_tests::dra_kubelet::Dra::v1(&socket).await;
            dra.prepare(&[(NS, missing.as_str(), "0a0a0a0a-0000-4000-8000-000000000000")])
                .await
        })
        .expect("NodePrepareResources answers");
    assert!(!failed["0a0a0a0a-0000-4000-8000-000000000000"]
        .error
        .is_empty());
    if !within(&mut || {
        cp.get_json(&["get", "events.events.k8s.io", "-n", NS])["items"]
            .as_array()
            .is_some_and(|e| {
                e.iter().any(|e| {
                    e["regarding"]["name"] == missing.as_str() && e["reason"] == "PrepareFailed"
                })
            })
    }) {
        return Some("an Event on a claim that failed".into());
    }
    assert_eq!(sim.terminate(), Some(0));
    let out = remove_slices(&sim);
    if !out.status.success() || !sim.slices(cp).is_empty() {
        return Some(format!(
            "remove the slices: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    None
}

/// The whole lifecycle passes under the shipped ClusterRole, and fails
/// with any one of its verbs removed: no verb is unused.
#[test]
fn every_verb_of_the_shipped_cluster_role_is_one_the_driver_needs() {
    let cp = setup();
    assert_eq!(
        lifecycle(cp, "verbs-all", "vp2p-dra-driver", Duration::from_secs(30)),
        None,
        "under the shipped role"
    );
    let rules = shipped_rules();
    let failed: Vec<(String, String, Option<String>)> = std::thread::scope(|s| {
        let runs: Vec<_> = rules
            .iter()
            .map(|(resource, verb)| {
                s.spawn(move || {
                    let name = format!("vp2p-minus-{}-{verb}", &resource[..resource.len() - 1]);
                    let role = role_without(&name, resource, verb);
                    let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
                        role,
                        {"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": {"name": name, "namespace": "kube-system"}},
                        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                         "metadata": {"name": name},
                         "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                     "kind": "ClusterRole", "name": name},
                         "subjects": [{"kind": "ServiceAccount", "name": name,
                                       "namespace": "kube-system"}]}]});
                    cp.apply(&objects.to_string()).expect("the reduced role");
                    let node = name.replace("vp2p-minus-", "minus-");
                    let step = lifecycle(cp, &node, &name, Duration::from_secs(15));
                    (resource.clone(), verb.clone(), step)
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    for (resource, verb, step) in &failed {
        eprintln!("without {verb} on {resource}: {step:?}");
    }
    let unused: Vec<String> = failed
        .iter()
        .filter(|(_, _, step)| step.is_none())
        .map(|(r, v, _)| format!("{v} on {r}"))
        .collect();
    assert!(
        unused.is_empty(),
        "verbs the driver does not need: {unused:?}"
    );
    assert_eq!(rules.len(), 9, "{rules:?}");
}
