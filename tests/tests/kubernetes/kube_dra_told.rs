//! What the DRA driver tells an operator, against the real kube-apiserver
//! and scheduler (v1.37.2, `kube-peers`), the driver run as the DaemonSet's
//! pod would: a failed prepare as Warning Events on the claim and its pod,
//! and its `/metrics` read by Prometheus' own parser.

use std::time::Duration;

use p2p_tests::kube::ControlPlane;
use p2p_tests::kube_claims::{delete_pod, kubelet_call, one_gpu_pod, prepared, scheduled};
use p2p_tests::kube_node::{dra_manifests, SimNode};
use serde_json::{json, Value};

const NESTED: &str = "qemu-11.1-nested-switch-iommu-on";
const NS: &str = "told";

fn setup() -> &'static ControlPlane {
    static DONE: std::sync::OnceLock<&'static ControlPlane> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        let cp = ControlPlane::shared(module_path!());
        dra_manifests(cp);
        cp.kubectl(&["create", "namespace", NS]);
        cp
    })
}

/// `GET /metrics` on `port`, read by Prometheus' own text parser
/// (`kube-peers metrics-parse`, expfmt's TextParser): the families by name.
fn scrape(port: u16) -> Value {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("the metrics port");
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    p2p_tests::kube::metrics_parse(body)
}

/// The sample of `family` whose labels are `labels`.
fn sample<'a>(families: &'a Value, family: &str, labels: Value) -> &'a Value {
    families[family]["samples"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["labels"] == labels))
        .unwrap_or_else(|| panic!("{family} {labels} in {families:#}"))
}

/// A prepare that fails (the allocated GPU's function taken by a host
/// driver, and the driver started without --bind): `kubectl describe` of
/// the claim and of its pod shows a Warning `PrepareFailed` from the driver
/// with the reason the kubelet was answered; the driver's /metrics, read by
/// Prometheus' own parser, counts the prepare that succeeded, the one that
/// failed and an unprepare, and says how many devices the slices publish.
#[test]
fn a_failed_prepare_is_an_event_on_its_claim_and_pod_and_is_counted() {
    let cp = setup();
    let port = p2p_tests::free_port();
    let node = SimNode::start_in_pod(cp, "told-a", NESTED, &["--metrics-port", &port.to_string()]);
    let (_, spec) = prepared(cp, &node, NS, "told-a-ok");
    let (_, gone) = kubelet_call(cp, &node, NS, "told-a-ok", true);
    gone.expect("unprepared");
    assert!(!spec.exists());
    cp.apply(&one_gpu_pod(NS, "told-a-vm", "told-a").to_string())
        .expect("the pod and its claim");
    scheduled(cp, NS, "told-a-vm", "told-a");
    let claim = cp.get_json(&["get", "resourceclaim", "told-a-vm", "-n", NS]);
    let device = claim["status"]["allocation"]["devices"]["results"][0]["device"]
        .as_str()
        .unwrap()
        .to_string();
    let d: Vec<&str> = device.trim_start_matches("gpu-").split('-').collect();
    let bdf = format!("{}:{}:{}.{}", d[0], d[1], d[2], d[3]);
    let dev = std::fs::canonicalize(node.tree.join("bus/pci/devices").join(&bdf)).unwrap();
    p2p_tests::kube_node::relink(&node.tree, &dev, "nvidia");
    let (_, answer) = kubelet_call(cp, &node, NS, "told-a-vm", false);
    let reason = answer.expect_err("the prepare fails");
    for kind in ["resourceclaim", "pod"] {
        let described = cp.wait_for(
            &format!("a PrepareFailed Event on the {kind}"),
            Duration::from_secs(30),
            || {
                let d = cp.kubectl(&["describe", kind, "told-a-vm", "-n", NS]);
                d.contains("Warning  PrepareFailed").then_some(d)
            },
        );
        // From the driver (its reportingController), with its reason.
        let line = described
            .lines()
            .find(|l| l.contains("Warning  PrepareFailed"))
            .unwrap();
        let from = line.split_whitespace().nth(3);
        assert_eq!(from, Some("gpu.vp2p.io"), "{line}");
        assert!(line.ends_with(&format!(" {reason}")), "{reason}\n{line}");
    }
    let events = cp.get_json(&["get", "events.events.k8s.io", "-n", NS]);
    let on_pod = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| {
            e["regarding"]["kind"] == "Pod"
                && e["regarding"]["name"] == "told-a-vm"
                && e["reason"] == "PrepareFailed"
        })
        .expect("the pod's Event");
    assert_eq!(on_pod["note"], json!(reason));
    assert_eq!(on_pod["related"]["kind"], "ResourceClaim");
    assert_eq!(on_pod["type"], "Warning");
    assert_eq!(on_pod["reportingInstance"], "gpu.vp2p.io/told-a");

    let calls = |f: &Value, call: &str, result: &str| {
        sample(
            f,
            "vp2p_dra_claim_calls_total",
            json!({"call": call, "result": result}),
        )["value"]
            .as_f64()
            .unwrap()
    };
    let families = cp.wait_for("the failure counted", Duration::from_secs(10), || {
        let f = scrape(port);
        (calls(&f, "prepare", "failure") == 1.0).then_some(f)
    });
    assert_eq!(families["vp2p_dra_claim_calls_total"]["type"], "COUNTER");
    assert_eq!(calls(&families, "prepare", "success"), 1.0);
    assert_eq!(calls(&families, "unprepare", "success"), 1.0);
    assert_eq!(calls(&families, "unprepare", "failure"), 0.0);
    let latency = sample(
        &families,
        "vp2p_dra_claim_call_duration_seconds",
        json!({"call": "prepare", "result": "success"}),
    );
    assert_eq!(
        families["vp2p_dra_claim_call_duration_seconds"]["type"],
        "HISTOGRAM"
    );
    assert_eq!(latency["count"], json!(1));
    assert_eq!(latency["buckets"]["+Inf"], json!(1));
    // The gauge follows the slices: the device taken by a host driver is
    // published no more (the driver re-reads sysfs every second here).
    cp.wait_for(
        "the gauge equal to the devices published",
        Duration::from_secs(30),
        || {
            let published: usize = node
                .slices(cp)
                .iter()
                .map(|s| s["spec"]["devices"].as_array().map_or(0, Vec::len))
                .sum();
            let gauge = sample(&scrape(port), "vp2p_dra_published_devices", json!({}))["value"]
                .as_f64()
                .unwrap();
            (published == 2 && gauge == 2.0).then_some(())
        },
    );
    delete_pod(cp, NS, "told-a-vm");
    delete_pod(cp, NS, "told-a-ok");
}
