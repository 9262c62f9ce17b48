//! Bad input at the real boundary, against kube-apiserver v1.37.2
//! (`kube-peers`): the limits p2p-allocation checks before it publishes
//! (shared/allocation/src/dra/names.rs) are the API server's, limit by limit, on both
//! sides of each; and the API server stopped and started again while a
//! node's devices change (etcd kept): the driver republishes, no slice
//! doubled or lost.

use std::time::Duration;

use p2p_allocation::dra::names::{is_c_identifier, is_dns_label, is_qualified_name};
use p2p_allocation::dra::{MAX_ATTRIBUTES_PER_DEVICE, MAX_DEVICE_NAME, MAX_VALUE};
use p2p_tests::kube::ControlPlane;
use p2p_tests::kube_node::{relink, SimNode};
use serde_json::{json, Map, Value};

/// A one-device slice of node `n0` with `attributes`, named `name`.
fn slice(name: &str, device: &str, attributes: Map<String, Value>) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": "gpu.vp2p.io", "nodeName": "n0",
            "pool": {"name": "n0", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": device, "attributes": attributes}]}})
}

fn attrs(pairs: &[(String, Value)]) -> Map<String, Value> {
    pairs.iter().cloned().collect()
}

/// Whether the real API server accepts `obj` (server-side dry run).
fn accepted(cp: &ControlPlane, obj: &Value) -> Result<(), String> {
    cp.try_kubectl_as(
        &cp.kubeconfig(),
        &["create", "--dry-run=server", "-f", "-"],
        Some(&obj.to_string()),
    )
    .map(|_| ())
}

#[test]
fn the_limits_vp2p_checks_are_the_api_servers_on_both_sides_of_each() {
    let cp = ControlPlane::shared(module_path!());
    let ok_attr = || attrs(&[("gpu.vp2p.io/kind".into(), json!({"string": "gpu"}))]);
    // Device names: a DNS label of at most 63 characters.
    for (name, why) in [
        ("a".repeat(MAX_DEVICE_NAME), "63 characters"),
        ("a".repeat(MAX_DEVICE_NAME + 1), "64 characters"),
        ("Gpu-0".into(), "an upper-case letter"),
        ("gpu-0-".into(), "a trailing dash"),
        ("gpu-0000-41-00-0".into(), "vp2p's own form"),
    ] {
        let server = accepted(cp, &slice("limits", &name, ok_attr()));
        assert_eq!(
            server.is_ok(),
            is_dns_label(&name, MAX_DEVICE_NAME),
            "device name with {why}: the API server said {server:?}"
        );
    }
    // Attribute names: a C identifier of at most 32 after a DNS subdomain of at most 63.
    for (name, why) in [
        (format!("gpu.vp2p.io/{}", "a".repeat(32)), "an id of 32"),
        (format!("gpu.vp2p.io/{}", "a".repeat(33)), "an id of 33"),
        (format!("{}/kind", "a".repeat(63)), "a domain of 63"),
        (format!("{}.io/kind", "a".repeat(61)), "a domain of 64"),
        ("gpu.vp2p.io/1kind".into(), "an id starting with a digit"),
        ("gpu.vp2p.io/cliquePix".into(), "vp2p's own form"),
    ] {
        let a = attrs(&[(name.clone(), json!({"string": "x"}))]);
        let server = accepted(cp, &slice("limits", "gpu-0", a));
        let ours = is_qualified_name(&name)
            && name
                .split_once('/')
                .is_none_or(|(_, id)| is_c_identifier(id));
        assert_eq!(
            server.is_ok(),
            ours,
            "attribute name with {why}: {server:?}"
        );
    }
    // String values: at most 64 characters.
    for len in [MAX_VALUE, MAX_VALUE + 1] {
        let a = attrs(&[(
            "gpu.vp2p.io/kind".into(),
            json!({"string": "x".repeat(len)}),
        )]);
        let server = accepted(cp, &slice("limits", "gpu-0", a));
        assert_eq!(
            server.is_ok(),
            len <= MAX_VALUE,
            "a value of {len}: {server:?}"
        );
    }
    // At most 32 attributes on a device.
    for n in [MAX_ATTRIBUTES_PER_DEVICE, MAX_ATTRIBUTES_PER_DEVICE + 1] {
        let a: Vec<(String, Value)> = (0..n)
            .map(|i| (format!("gpu.vp2p.io/a{i}"), json!({"int": i})))
            .collect();
        let server = accepted(cp, &slice("limits", "gpu-0", attrs(&a)));
        assert_eq!(
            server.is_ok(),
            n <= MAX_ATTRIBUTES_PER_DEVICE,
            "{n} attributes: {server:?}"
        );
    }
}

/// The API server is stopped (etcd keeps running), the node's devices
/// change while it is down and again while it starts, three times over:
/// once it is back, the driver's slices are exactly what `dra slices`
/// prints for the tree as it is then, in one slice of one pool generation
/// above the first, none doubled, none lost.
#[test]
fn the_api_server_restarted_while_devices_change_leaves_one_pool_of_the_final_devices() {
    let cp = ControlPlane::start();
    let dra = p2p_tests::repo_root().join("host/kubernetes/dra");
    cp.apply(&std::fs::read_to_string(dra.join("driver.yaml")).unwrap())
        .expect("driver.yaml");
    let node = SimNode::start(&cp, "node-r", "qemu-11.1-two-socket-iommu-on", &[]);
    let first = node.slices(&cp);
    let gen0 = first[0]["spec"]["pool"]["generation"].as_i64().unwrap();
    let gpu =
        |bdf: &str| std::fs::canonicalize(node.tree.join("bus/pci/devices").join(bdf)).unwrap();
    let toggles = ["0000:41:00.0", "0000:83:00.0", "0000:01:00.0"];
    let t0 = std::time::Instant::now();
    for (round, bdf) in toggles.iter().enumerate() {
        // Once gracefully, then as crashes.
        cp.stop_component("apiserver", round > 0);
        eprintln!(
            "round {round}: API server stopped at {:.1} s",
            t0.elapsed().as_secs_f64()
        );
        // Off vfio-pci while the API server is down: the driver's next
        // publication fails and is retried.
        relink(&node.tree, &gpu(bdf), "nvme");
        std::thread::sleep(Duration::from_millis(1500));
        cp.start_component("apiserver");
        eprintln!(
            "round {round}: API server up again at {:.1} s",
            t0.elapsed().as_secs_f64()
        );
        if round % 2 == 0 {
            // Back on vfio-pci as the API server comes up: a second change
            // racing the retry.
            relink(&node.tree, &gpu(bdf), "vfio-pci");
        }
    }
    // Off for good: 83:00.0 (round 1). On again: 41:00.0 and 01:00.0.
    let want = node.expected_slices();
    let want_devices = want["items"][0]["spec"]["devices"].clone();
    let got = cp.wait_for(
        "the driver's slices equal dra slices' for the final tree",
        Duration::from_secs(60),
        || {
            let s = node.slices(&cp);
            (s.len() == 1 && s[0]["spec"]["devices"] == want_devices).then_some(s)
        },
    );
    eprintln!("converged at {:.1} s", t0.elapsed().as_secs_f64());
    let names: Vec<&str> = got[0]["spec"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "gpu-0000-01-00-0",
            "gpu-0000-23-00-0",
            "gpu-0000-24-00-0",
            "gpu-0000-26-00-0",
            "gpu-0000-41-00-0",
            "gpu-0000-84-00-0"
        ],
        "by hand: the tree's seven GPUs but 83:00.0"
    );
    let gen = got[0]["spec"]["pool"]["generation"].as_i64().unwrap();
    assert!(gen > gen0, "pool generation {gen} after {gen0}");
    assert_eq!(got[0]["spec"]["pool"]["resourceSliceCount"], json!(1));
    // Stays so: nothing doubled later by a retry that was still queued.
    std::thread::sleep(Duration::from_secs(3));
    let again = node.slices(&cp);
    assert_eq!(again.len(), 1, "{again:#?}");
    assert_eq!(again[0]["spec"]["devices"], want_devices);
}
