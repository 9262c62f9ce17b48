//! What the DRA tests do on the control plane around a [`SimNode`]: pods
//! with a claim, waited for until scheduled, deleted; the kubelet's calls on
//! the node's DRA socket; and every event of the node's slices.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::kube::{kube_peers, ControlPlane};
use crate::kube_node::{SimNode, DRIVER};
use crate::process::{SpawnOwned, Spawned};

/// `kubectl get resourceslices --watch-only --output-watch-events` for
/// `node`'s slices, into a file: every event the API server sends.
pub struct SliceEvents {
    child: Spawned,
    file: std::path::PathBuf,
    _tmp: tempfile::TempDir,
}

impl SliceEvents {
    /// Starts watching `node`'s slices.
    pub fn start(cp: &ControlPlane, node: &str) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("events.json");
        let child = Command::new(kube_peers())
            .arg("kubectl")
            .arg("--kubeconfig")
            .arg(cp.kubeconfig())
            .args([
                "get",
                "resourceslices",
                "--watch-only",
                "--output-watch-events",
            ])
            .args(["-o", "json", "--field-selector"])
            .arg(format!("spec.nodeName={node}"))
            .stdout(std::fs::File::create(&file).unwrap())
            .stderr(Stdio::null())
            .spawn_owned()
            .expect("kubectl --watch starts");
        // The watch is open once kubectl has connected; give it that long.
        std::thread::sleep(Duration::from_secs(2));
        Self {
            child,
            file,
            _tmp: tmp,
        }
    }

    /// The events seen so far, in order (`type` and `object`).
    pub fn events(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.file).unwrap_or_default();
        serde_json::Deserializer::from_str(&text)
            .into_iter::<Value>()
            .map_while(Result::ok)
            .collect()
    }

    /// The event types seen so far, in order.
    pub fn types(&self) -> Vec<String> {
        self.events()
            .iter()
            .map(|e| e["type"].as_str().unwrap_or_default().to_string())
            .collect()
    }
}

impl Drop for SliceEvents {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A pod on `node` (by its name) in namespace `ns` asking for one GPU of
/// the driver through a claim of the same name.
pub fn one_gpu_pod(ns: &str, name: &str, node: &str) -> Value {
    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
         "metadata": {"name": name, "namespace": ns},
         "spec": {"devices": {"requests": [
             {"name": "gpu", "exactly": {"deviceClassName": "vp2p-gpu"}}]}}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
         "spec": {
             "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                 "nodeSelectorTerms": [{"matchFields": [
                     {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}},
             "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
             "containers": [{"name": "compute", "image": "registry.invalid/virt-launcher:0",
                             "resources": {"claims": [{"name": "gpu"}]}}]}}]})
}

/// Waits until the scheduler bound pod `name` to `node` with its claim
/// allocated from the node's pool; panics with the scheduler's reason.
pub fn scheduled(cp: &ControlPlane, ns: &str, name: &str, node: &str) {
    cp.wait_for(
        &format!("pod {name} scheduled on {node} with a GPU allocated"),
        Duration::from_secs(60),
        || {
            let pod = cp.get_json(&["get", "pod", name, "-n", ns]);
            let claim = cp.get_json(&["get", "resourceclaim", name, "-n", ns]);
            let pool = &claim["status"]["allocation"]["devices"]["results"][0]["pool"];
            (pod["spec"]["nodeName"] == node && pool == node).then_some(())
        },
    );
}

/// Deletes pod and claim `name` (forced: no kubelet confirms).
pub fn delete_pod(cp: &ControlPlane, ns: &str, name: &str) {
    for kind in ["pod", "resourceclaim"] {
        cp.kubectl(&[
            "delete",
            kind,
            name,
            "-n",
            ns,
            "--grace-period=0",
            "--force",
            "--wait=false",
        ]);
    }
}

/// The kubelet's NodePrepareResources (or, with `unprepare`, its
/// NodeUnprepareResources) for claim `name` through `node`'s DRA socket, as
/// the kubelet sends it after the driver registered again; the claim's uid
/// and its answer (the CDI ids, or the error).
pub fn kubelet_call(
    cp: &ControlPlane,
    node: &SimNode,
    ns: &str,
    name: &str,
    unprepare: bool,
) -> (String, Result<Vec<String>, String>) {
    let claim = cp.get_json(&["get", "resourceclaim", name, "-n", ns]);
    let uid = claim["metadata"]["uid"].as_str().unwrap().to_string();
    let socket = node.kubelet.join(format!("plugins/{DRIVER}/dra.sock"));
    // The socket is there once the restarted driver serves.
    cp.wait_for("the DRA socket", Duration::from_secs(30), || {
        socket.exists().then_some(())
    });
    let answer = crate::dra_node::rt().block_on(async {
        let mut dra = crate::dra_kubelet::Dra::v1(&socket).await;
        dra.timeout = Some(Duration::from_secs(45));
        if unprepare {
            let u = dra.unprepare(&[(ns, name, &uid)]).await.expect("answered");
            match u[&uid].as_str() {
                "" => Ok(Vec::new()),
                e => Err(e.to_string()),
            }
        } else {
            let a = dra.prepare(&[(ns, name, &uid)]).await.expect("answered");
            let entry = &a[&uid];
            if entry.error.is_empty() {
                Ok(entry
                    .devices
                    .iter()
                    .flat_map(|d| d.cdi_ids.clone())
                    .collect())
            } else {
                Err(entry.error.clone())
            }
        }
    });
    (uid, answer)
}

/// A pod `name` in namespace `ns` on `node` with a one-GPU claim of that
/// name, scheduled, and the claim prepared through the node's DRA socket:
/// the claim's uid and its CDI spec (which must exist).
pub fn prepared(
    cp: &ControlPlane,
    node: &SimNode,
    ns: &str,
    name: &str,
) -> (String, std::path::PathBuf) {
    cp.apply(&one_gpu_pod(ns, name, &node.name).to_string())
        .expect("the pod and its claim");
    scheduled(cp, ns, name, &node.name);
    let (uid, answer) = kubelet_call(cp, node, ns, name, false);
    answer.unwrap_or_else(|e| panic!("prepare {name}: {e}"));
    let spec = node.cdi.join(format!("{DRIVER}-{uid}.json"));
    assert!(spec.exists(), "{}", spec.display());
    (uid, spec)
}
