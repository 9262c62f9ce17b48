//! The scheduler extender's watch cache (host/kube/src/extender/cache.rs)
//! against the real kube-apiserver (v1.37.2, `kube-peers`): what was there
//! before it started comes from its list, what is created or deleted after
//! from its watch, so a prioritize call reads claims as the server has them.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use p2p_host_kube::extender::cache::WatchCache;
use p2p_host_kube::kubelet_plugin::api_server::ApiServer;
use p2p_host_kube::kubelet_plugin::objects;
use p2p_tests::kube::ControlPlane;
use serde_json::Value;

fn claim(name: &str) -> String {
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  devices:\n    requests:\n    - name: gpu\n      exactly:\n        deviceClassName: vp2p-gpu\n        count: 1\n"
    )
}

/// The names the cache holds, polled until `done` says yes (at most 30 s).
async fn until(cache: &WatchCache<Value>, what: &str, done: impl Fn(&BTreeSet<String>) -> bool) {
    let start = Instant::now();
    loop {
        let names: BTreeSet<String> = cache
            .objects()
            .await
            .iter()
            .filter_map(|o| o["metadata"]["name"].as_str().map(String::from))
            .collect();
        if done(&names) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{what}: the cache holds {names:?} after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn the_extenders_cache_lists_then_follows_claims_as_they_come_and_go() {
    let cp = ControlPlane::shared(module_path!());
    cp.apply(&claim("before")).expect("the first claim");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let api = ApiServer::connect(Some(&cp.kubeconfig()), Duration::from_secs(10))
            .await
            .expect("connected");
        let cache = WatchCache::start(api, objects::claims(), None, Value::clone, |m| {
            eprintln!("{m}")
        });
        until(&cache, "listed", |n| n.contains("before")).await;
        cp.apply(&claim("after")).expect("the second claim");
        until(&cache, "created after the list", |n| n.contains("after")).await;
        cp.kubectl(&["delete", "resourceclaim", "before", "-n", "default"]);
        until(&cache, "deleted", |n| {
            !n.contains("before") && n.contains("after")
        })
        .await;
    });
}
