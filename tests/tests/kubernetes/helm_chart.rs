//! The Helm chart (host/kubernetes/helm/vp2p) with Helm's own CLI (helm.sh/helm/v3,
//! built from its module in tests/kube): `helm lint` passes; `helm template` with
//! the chart's defaults renders exactly the shipped manifests
//! (host/kubernetes/dra/driver.yaml and deviceclasses.yaml, compared object by
//! object); its values set the image, the node selector, the driver's flags,
//! the namespace and the DeviceClasses; and `helm install` on Kubernetes' own API
//! server creates those objects, `helm uninstall` deletes them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use p2p_tests::kube::{helm_command, ControlPlane};
use p2p_tests::{repo_root, yaml_documents};
use serde_yaml::Value;

fn chart() -> PathBuf {
    repo_root().join("host/kubernetes/helm/vp2p")
}

/// `helm ARGS`: its stdout; it must succeed.
fn run_helm(args: &[&str]) -> String {
    let out = helm_command(&std::env::temp_dir().join("vp2p-helm"))
        .args(args)
        .output()
        .expect("helm runs");
    assert!(
        out.status.success(),
        "helm {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The objects of a rendering, by (kind, name).
fn objects(text: &str) -> BTreeMap<(String, String), Value> {
    yaml_documents(text)
        .into_iter()
        .map(|d| {
            let kind = d["kind"].as_str().unwrap().to_string();
            let name = d["metadata"]["name"].as_str().unwrap().to_string();
            ((kind, name), d)
        })
        .collect()
}

fn template(extra: &[&str]) -> BTreeMap<(String, String), Value> {
    let chart = chart();
    let mut args = vec![
        "template",
        "vp2p",
        chart.to_str().unwrap(),
        "--kube-version",
        "1.37.2",
    ];
    args.extend_from_slice(extra);
    objects(&run_helm(&args))
}

fn daemonset(objs: &BTreeMap<(String, String), Value>) -> &Value {
    &objs[&("DaemonSet".to_string(), "vp2p-dra-driver".to_string())]
}

fn args(ds: &Value) -> Vec<String> {
    ds["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_chart_lints_and_renders_the_shipped_manifests() {
    let out = run_helm(&["lint", chart().to_str().unwrap()]);
    assert!(
        out.contains("1 chart(s) linted, 0 chart(s) failed"),
        "{out}"
    );
    let rendered = template(&["--namespace", "kube-system"]);
    let dra = repo_root().join("host/kubernetes/dra");
    let shipped = objects(
        &["driver.yaml", "deviceclasses.yaml"]
            .iter()
            .map(|f| std::fs::read_to_string(dra.join(f)).unwrap())
            .collect::<Vec<_>>()
            .join("\n---\n"),
    );
    assert_eq!(
        rendered.keys().collect::<Vec<_>>(),
        shipped.keys().collect::<Vec<_>>()
    );
    for (k, v) in &shipped {
        assert_eq!(&rendered[k], v, "{k:?} differs from the shipped manifest");
    }
}

#[test]
fn the_charts_values_set_the_image_nodes_flags_and_namespace() {
    let objs = template(&[
        "--namespace",
        "gpu-system",
        "--set",
        "image.repository=registry.example.com/vp2p/p2p-host,image.tag=9.9.9",
        "--set",
        "bind=false,iommufd=true,deviceClasses=false",
        "--set-json",
        r#"nodeSelector={"pool":"h200"}"#,
        "--set-json",
        r#"extraArgs=["--fm-partitions","/etc/vp2p/fmpm-l.json"]"#,
    ]);
    let ds = daemonset(&objs);
    let c = &ds["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "registry.example.com/vp2p/p2p-host:9.9.9");
    assert_eq!(
        ds["spec"]["template"]["spec"]["nodeSelector"]["pool"],
        "h200"
    );
    assert_eq!(ds["metadata"]["namespace"], "gpu-system");
    let a = args(ds);
    assert!(!a.contains(&"--bind".to_string()), "{a:?}");
    assert!(a.contains(&"--iommufd".to_string()), "{a:?}");
    assert!(a.ends_with(&[
        "--fm-partitions".to_string(),
        "/etc/vp2p/fmpm-l.json".to_string()
    ]));
    assert!(!objs.keys().any(|(k, _)| k == "DeviceClass"));
    let policy = &objs[&(
        "ValidatingAdmissionPolicy".to_string(),
        "vp2p-dra-driver-own-node".to_string(),
    )];
    assert!(policy["spec"]["matchConditions"][0]["expression"]
        .as_str()
        .unwrap()
        .contains("system:serviceaccount:gpu-system:vp2p-dra-driver"));
}

#[test]
fn helm_installs_and_uninstalls_the_chart_on_the_api_server() {
    let cp = ControlPlane::shared(module_path!());
    let kubeconfig = cp.kubeconfig();
    let kc = kubeconfig.to_str().unwrap();
    cp.kubectl(&["create", "namespace", "vp2p-helm"]);
    run_helm(&[
        "install",
        "vp2p",
        chart().to_str().unwrap(),
        "--namespace",
        "vp2p-helm",
        "--kubeconfig",
        kc,
    ]);
    let ds = cp.kubectl(&[
        "get",
        "daemonset",
        "-n",
        "vp2p-helm",
        "vp2p-dra-driver",
        "-o",
        "json",
    ]);
    let ds: serde_json::Value = serde_json::from_str(&ds).unwrap();
    assert_eq!(
        ds["spec"]["template"]["spec"]["containers"][0]["image"],
        format!("localhost/vp2p/p2p-host:{}", env!("CARGO_PKG_VERSION"))
    );
    cp.kubectl(&["get", "deviceclass", "vp2p-gpu", "vp2p-nic"]);
    let listed = run_helm(&["list", "--namespace", "vp2p-helm", "--kubeconfig", kc]);
    assert!(listed.contains("deployed"), "{listed}");
    run_helm(&[
        "uninstall",
        "vp2p",
        "--namespace",
        "vp2p-helm",
        "--kubeconfig",
        kc,
        "--wait",
    ]);
    let gone = cp.try_kubectl(&["get", "daemonset", "-n", "vp2p-helm", "vp2p-dra-driver"]);
    assert!(
        gone.is_err(),
        "the DaemonSet outlived helm uninstall: {gone:?}"
    );
    let gone = cp.try_kubectl(&["get", "deviceclass", "vp2p-gpu"]);
    assert!(
        gone.is_err(),
        "the DeviceClass outlived helm uninstall: {gone:?}"
    );
}
