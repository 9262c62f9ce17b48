//! The DRA driver under the kubelet's load, with its claims on the real
//! kube-apiserver (v1.37.2, `kube-peers`): 1,000 ResourceClaims, each
//! allocated (its status written as the scheduler writes it) to one of the
//! node's published devices, prepared through the driver's DRA socket with
//! 64 calls in flight, then unprepared the same way. Each claim is read from
//! the API server by the driver, answered once with the device it was
//! allocated, recorded once, and given back; the p50 and p99 of a call's
//! round trip are printed (docs/results/dev-2vcpu-2026-11-28-dra-load).
//!
//! The calls come from the kubelet stand-in (tests/src/dra_kubelet.rs), one
//! claim a call as the kubelet sends a pod's, each with the kubelet's 45 s
//! deadline. The node is the nested-switch tree relinked to vfio-pci, so no
//! bind is needed and the figures are the driver's own work: the claim's
//! read, the node's devices resolved, the files and the checkpoint written.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use p2p_tests::dra_kubelet::Dra;
use p2p_tests::kube::ControlPlane;
use p2p_tests::kube_node::{dra_manifests, SimNode, DRIVER};
use serde_json::{json, Value};

const NESTED: &str = "qemu-11.1-nested-switch-iommu-on";
const NS: &str = "load";
const NODE: &str = "node-load";
const CLAIMS: usize = 1000;
const IN_FLIGHT: usize = 64;

fn claim_name(i: usize) -> String {
    format!("c{i:04}")
}

/// The `p`th percentile of sorted `v` (nearest rank).
fn percentile(v: &[Duration], p: usize) -> Duration {
    let rank = (p * v.len()).div_ceil(100).max(1);
    v[rank - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Runs `call` for every claim index, `IN_FLIGHT` at once on as many
/// connections; each call's round trip, in claim order.
fn in_flight<F, Fut>(socket: &std::path::Path, call: F) -> Vec<Duration>
where
    F: Fn(Dra, usize) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Dra> + Send,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let next = Arc::new(AtomicUsize::new(0));
    let times = Arc::new(Mutex::new(vec![Duration::ZERO; CLAIMS]));
    rt.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..IN_FLIGHT {
            let mut dra = Dra::v1(socket).await;
            dra.timeout = Some(Duration::from_secs(45));
            let (next, times, call) = (next.clone(), times.clone(), call.clone());
            tasks.push(tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= CLAIMS {
                        break;
                    }
                    let t0 = Instant::now();
                    dra = call(dra, i).await;
                    times.lock().unwrap()[i] = t0.elapsed();
                    if (i + 1) % 250 == 0 {
                        eprintln!("  {} of {CLAIMS} calls answered", i + 1);
                    }
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    let v = times.lock().unwrap().clone();
    v
}

fn report(what: &str, mut times: Vec<Duration>, wall: Duration) {
    times.sort();
    eprintln!(
        "{what}: {CLAIMS} claims, {IN_FLIGHT} calls in flight: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {:.1} s in all ({:.0} claims/s)",
        ms(percentile(&times, 50)),
        ms(percentile(&times, 99)),
        ms(*times.last().unwrap()),
        wall.as_secs_f64(),
        CLAIMS as f64 / wall.as_secs_f64()
    );
}

#[test]
fn a_thousand_claims_64_in_flight_are_each_prepared_once_and_given_back() {
    let cp = ControlPlane::shared(module_path!());
    dra_manifests(cp);
    cp.kubectl(&["create", "namespace", NS]);
    let node = SimNode::start(cp, NODE, NESTED, &[]);
    let devices: Vec<String> = node.bus_ids(cp).into_keys().collect();
    assert!(devices.len() >= 3, "published: {devices:?}");
    // The claims, then their allocations as the scheduler writes them (the
    // status subresource), each to a device of the node in turn.
    let t0 = Instant::now();
    let claims: Vec<Value> = (0..CLAIMS)
        .map(|i| {
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                   "metadata": {"name": claim_name(i), "namespace": NS},
                   "spec": {"devices": {"requests": [
                       {"name": "gpu", "exactly": {"deviceClassName": "vp2p-gpu"}}]}}})
        })
        .collect();
    cp.create(&json!({"apiVersion": "v1", "kind": "List", "items": claims}).to_string())
        .expect("the claims are created");
    let created = cp.get_json(&["get", "resourceclaims", "-n", NS]);
    let uids: BTreeMap<String, String> = created["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["metadata"]["name"].as_str().unwrap().to_string(),
                c["metadata"]["uid"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(uids.len(), CLAIMS);
    let allocated: Vec<Value> = created["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let name = c["metadata"]["name"].as_str().unwrap();
            let i: usize = name[1..].parse().unwrap();
            let mut c = c.clone();
            c["status"] = json!({"allocation": {
                "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": NODE,
                                         "device": devices[i % devices.len()]}]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}}});
            c
        })
        .collect();
    cp.try_kubectl_as(
        &cp.kubeconfig(),
        &["replace", "--subresource=status", "-f", "-"],
        Some(&json!({"apiVersion": "v1", "kind": "List", "items": allocated}).to_string()),
    )
    .expect("the allocations are written");
    eprintln!(
        "{CLAIMS} claims created and allocated on the API server in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let socket = node.kubelet.join(format!("plugins/{DRIVER}/dra.sock"));
    let answers: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();

    // Prepare.
    let t0 = Instant::now();
    let got = answers.clone();
    let uids_p = Arc::new(uids.clone());
    let times = in_flight(&socket, move |mut dra, i| {
        let (got, uids) = (got.clone(), uids_p.clone());
        async move {
            let name = claim_name(i);
            let uid = uids[&name].clone();
            let a = dra.prepare(&[(NS, &name, &uid)]).await.expect("answered");
            let entry = &a[&uid];
            assert_eq!(entry.error, "", "{name}");
            assert_eq!(entry.devices.len(), 1, "{name}");
            let previous = got
                .lock()
                .unwrap()
                .insert(uid, entry.devices[0].name.clone());
            assert!(previous.is_none(), "{name} answered twice");
            dra
        }
    });
    report("prepare", times, t0.elapsed());
    let got = answers.lock().unwrap().clone();
    assert_eq!(got.len(), CLAIMS);
    for (i, name) in (0..CLAIMS).map(|i| (i, claim_name(i))) {
        assert_eq!(
            got[&uids[&name]],
            devices[i % devices.len()],
            "{name}'s device"
        );
    }
    let recorded = node.recorded_claims();
    assert_eq!(recorded.len(), CLAIMS, "each claim recorded once");
    assert!(recorded.values().all(|e| e["state"] == "prepared"));
    let specs = std::fs::read_dir(&node.cdi).unwrap().count();
    assert_eq!(specs, CLAIMS, "a CDI spec per claim");

    // Unprepare.
    let t0 = Instant::now();
    let uids_u = Arc::new(uids.clone());
    let times = in_flight(&socket, move |mut dra, i| {
        let uids = uids_u.clone();
        async move {
            let name = claim_name(i);
            let uid = uids[&name].clone();
            let u = dra.unprepare(&[(NS, &name, &uid)]).await.expect("answered");
            assert_eq!(u[&uid], "", "{name}");
            dra
        }
    });
    report("unprepare", times, t0.elapsed());
    assert!(node.recorded_claims().is_empty(), "every claim given back");
    assert_eq!(
        std::fs::read_dir(&node.cdi).unwrap().count(),
        0,
        "no spec left"
    );
}
