//! host/kubevirt's manifests on the real kube-apiserver (v1.37.2,
//! `kube-peers`): the device plugin's DaemonSet accepted, and the plugin
//! hook's MutatingAdmissionPolicy run by the API server itself on pods: a
//! virt-launcher pod that asks for vp2p and mounts KubeVirt's plugin sockets
//! gets the `vp2p-plugin-hook` container as the manifest writes it; a pod
//! missing any of the three conditions is left alone. (The `Plugin` object
//! is KubeVirt's CRD; its condition runs under KubeVirt's own evaluator in
//! tests/tests/kubernetes/kubevirt_hook_client.rs.)

use std::sync::OnceLock;

use p2p_tests::kube::ControlPlane;
use p2p_tests::repo_root;
use serde_json::{json, Value};

const NS: &str = "vp2p-kubevirt";

/// The API server with plugin-hook.yaml's admission policy and binding.
fn cluster() -> &'static ControlPlane {
    static C: OnceLock<&'static ControlPlane> = OnceLock::new();
    C.get_or_init(|| {
        let cp = ControlPlane::shared(module_path!());
        let text = std::fs::read_to_string(repo_root().join("host/kubevirt/plugin-hook.yaml"))
            .expect("plugin-hook.yaml");
        let docs: Vec<Value> = p2p_tests::yaml_documents(&text)
            .into_iter()
            .map(|d| serde_json::to_value(d).unwrap())
            .filter(|d: &Value| !d.is_null() && d["kind"] != "Plugin")
            .collect();
        let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"],
            "plugin-hook.yaml's Kubernetes objects"
        );
        let list = json!({"apiVersion": "v1", "kind": "List", "items": docs});
        cp.apply(&list.to_string())
            .expect("the API server accepts the admission policy and its binding");
        cp.kubectl(&["create", "namespace", NS]);
        // A policy is compiled and picked up asynchronously: wait until the
        // positive pod is mutated once.
        cp.wait_for(
            "the admission policy in effect",
            std::time::Duration::from_secs(30),
            || (containers(cp, &launcher(true, true, true)).len() == 2).then_some(()),
        );
        cp
    })
}

/// A pod as virt-controller makes a virt-launcher pod, with or without the
/// label, a `vp2p.io/` annotation and the plugin-socket volume.
fn launcher(label: bool, annotation: bool, volume: bool) -> Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "virt-launcher-vm-abcde", "namespace": NS,
            "labels": {}, "annotations": {}},
        "spec": {"containers": [{"name": "compute", "image": "registry.example/virt-launcher"}],
            "volumes": [{"name": "private", "emptyDir": {}}]}});
    if label {
        pod["metadata"]["labels"]["kubevirt.io"] = json!("virt-launcher");
    }
    if annotation {
        pod["metadata"]["annotations"]["vp2p.io/guest-topology"] = json!("mirror");
    }
    if volume {
        pod["spec"]["volumes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "kubevirt-plugin-sockets", "emptyDir": {}}));
    }
    pod
}

/// The containers of `pod` as the API server would store it (server-side
/// dry run: admission runs, nothing is stored).
fn containers(cp: &ControlPlane, pod: &Value) -> Vec<Value> {
    let out = cp
        .try_kubectl_as(
            &cp.kubeconfig(),
            &["create", "--dry-run=server", "-o", "json", "-f", "-"],
            Some(&pod.to_string()),
        )
        .unwrap_or_else(|e| panic!("the API server refused the pod: {e}"));
    let stored: Value = serde_json::from_str(&out).expect("kubectl printed the pod");
    stored["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn the_api_server_injects_the_hook_into_exactly_the_virt_launcher_pods_that_ask() {
    let cp = cluster();
    let got = containers(cp, &launcher(true, true, true));
    assert_eq!(got.len(), 2, "{got:#?}");
    let hook = &got[1];
    // What the manifest's mutation writes, by hand.
    assert_eq!(hook["name"], "vp2p-plugin-hook");
    assert_eq!(hook["command"], json!(["p2p-host"]));
    assert_eq!(
        hook["args"],
        json!([
            "kubevirt",
            "plugin-hook",
            "--socket",
            "/var/run/kubevirt-plugin/vp2p/hook.sock"
        ])
    );
    // The plugin sockets as the manifest mounts them (the ServiceAccount
    // admission plugin, after it, adds the token's mount to every container).
    let mounts = hook["volumeMounts"].as_array().expect("volume mounts");
    assert!(
        mounts.contains(&json!({"name": "kubevirt-plugin-sockets",
            "mountPath": "/var/run/kubevirt-plugin/vp2p/", "subPath": "vp2p"})),
        "{mounts:#?}"
    );
    assert_eq!(hook["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        hook["securityContext"]["capabilities"]["drop"],
        json!(["ALL"])
    );
    assert_eq!(
        hook["resources"]["limits"],
        json!({"cpu": "100m", "memory": "64Mi"})
    );
    // Each condition missing: left alone.
    for (label, annotation, volume) in [
        (false, true, true),
        (true, false, true),
        (true, true, false),
    ] {
        let got = containers(cp, &launcher(label, annotation, volume));
        assert_eq!(
            got.len(),
            1,
            "label {label}, annotation {annotation}, volume {volume}: {got:#?}"
        );
    }
}

#[test]
fn the_api_server_accepts_the_device_plugin_daemonset() {
    let cp = cluster();
    let yaml = std::fs::read_to_string(repo_root().join("host/kubevirt/device-plugin.yaml"))
        .expect("device-plugin.yaml");
    let out = cp
        .try_kubectl_as(
            &cp.kubeconfig(),
            &["apply", "--dry-run=server", "-f", "-"],
            Some(&yaml),
        )
        .unwrap_or_else(|e| panic!("device-plugin.yaml: {e}"));
    assert!(out.contains("daemonset.apps/vp2p-device-plugin"), "{out}");
}
