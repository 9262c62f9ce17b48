//! What one node's driver asks of the API server while nothing changes,
//! counted by the real kube-apiserver itself (its `apiserver_request_total`
//! of ResourceSlices, read from its /metrics with Prometheus' own parser),
//! on a control plane of its own so no other driver adds to the count: a
//! quiet node sends no LIST and starts no new watch, however often it looks
//! at its devices (every second here); a slice deleted by hand is still put
//! back at once, by its watch.

use std::time::{Duration, Instant};

use p2p_tests::kube::{metrics_parse, ControlPlane};
use p2p_tests::kube_node::{dra_manifests, SimNode};

const NESTED: &str = "qemu-11.1-nested-switch-iommu-on";

/// The API server's count of ResourceSlice requests by verb, from its
/// /metrics read by `kube-peers metrics-parse` (expfmt's parser).
fn slice_requests(cp: &ControlPlane, verb: &str) -> f64 {
    let families = metrics_parse(&cp.kubectl(&["get", "--raw", "/metrics"]));
    families["apiserver_request_total"]["samples"]
        .as_array()
        .expect("apiserver_request_total")
        .iter()
        .filter(|s| s["labels"]["resource"] == "resourceslices" && s["labels"]["verb"] == verb)
        .map(|s| s["value"].as_f64().unwrap())
        .sum()
}

#[test]
fn a_quiet_node_sends_no_list_and_no_new_watch() {
    let cp = ControlPlane::shared(module_path!());
    dra_manifests(cp);
    let mut node = SimNode::start_in_pod(cp, "quiet-a", NESTED, &[]);
    // Past the start (one LIST to adopt, one to compare at the watch's
    // first events).
    std::thread::sleep(Duration::from_secs(5));
    let (lists, watches) = (slice_requests(cp, "LIST"), slice_requests(cp, "WATCH"));
    let window = Duration::from_secs(30);
    std::thread::sleep(window);
    let (lists_after, watches_after) = (slice_requests(cp, "LIST"), slice_requests(cp, "WATCH"));
    eprintln!(
        "in {window:?} with the devices looked at every second: {} LIST, {} new WATCH of ResourceSlices",
        lists_after - lists,
        watches_after - watches
    );
    assert_eq!(lists_after - lists, 0.0, "LISTs while nothing changed");
    assert_eq!(
        watches_after - watches,
        0.0,
        "new watches while nothing changed"
    );
    // The watch still acts at once.
    let s = node.slices(cp);
    let name = s[0]["metadata"]["name"].as_str().unwrap().to_string();
    let t = Instant::now();
    cp.kubectl(&["delete", "resourceslice", &name]);
    cp.wait_for("the slice put back", Duration::from_secs(10), || {
        (!node.slices(cp).is_empty()).then_some(())
    });
    eprintln!("deleted slice back in {:.1} s", t.elapsed().as_secs_f64());
    assert_eq!(node.terminate(), Some(0));
}
