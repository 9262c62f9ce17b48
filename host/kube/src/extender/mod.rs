//! `p2p-host dra extender`: a kube-scheduler extender (the `extenders`
//! list of KubeSchedulerConfiguration, prioritize verb) that scores each node
//! the scheduler found feasible for a VM pod by how well vp2p's published
//! devices there can serve the pod's claims: the nearest level its GPUs (and
//! NIC) fit at, and whether the devices the allocator will take there cost
//! the node a larger VM (`--keep`) it could take before
//! (p2p_allocation::dra::score). It keeps the claims and its driver's slices
//! current with a watch each ([`cache`]), so a call reads memory.
//!
//! The scheduler's own DRA scoring ranks a node by the alternative of the
//! prioritized list each claim got there; this adds what it does not see: a
//! claim with no prioritized list (KubeVirt's one-device requests), and the
//! room a placement spoils.

pub mod cache;
pub mod view;
pub mod wire;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use p2p_allocation::dra::score::Ask;
use serde_json::Value;

use crate::kubelet_plugin::api_server::{ApiError, ApiServer};
use crate::kubelet_plugin::objects;
use view::{DriverView, HeldClaim, NodeDevices};
use wire::{ExtenderArgs, HostPriority};

/// How the extender runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where it listens (the scheduler's `urlPrefix` points here).
    pub listen: SocketAddr,
    /// The kubeconfig; None: in cluster, or the default one.
    pub kubeconfig: Option<PathBuf>,
    /// vp2p's driver name (the slices and allocations it reads).
    pub driver: String,
    /// The DeviceClass of vp2p's GPUs, as claims name it.
    pub gpu_class: String,
    /// The DeviceClass of vp2p's NICs.
    pub nic_class: String,
    /// Each request to the API server may take this long.
    pub timeout: Duration,
    /// Score only pods carrying one of these labels (key, value); every pod
    /// when empty. The others get 0 on every node, so the extender leaves
    /// them to the scheduler's own scores.
    pub pod_labels: Vec<(String, String)>,
    /// The larger VMs a placement should leave room for: a node where the
    /// pod's devices would cost one of these loses a point.
    pub keep: Vec<Ask>,
}

/// Why the extender could not start or answer.
#[derive(Debug, thiserror::Error)]
pub enum ExtenderError {
    /// The API server.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The listening socket or the runtime.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// The scheduler sent what is not ExtenderArgs.
    #[error("the request is not ExtenderArgs: {0}")]
    Request(String),
    /// Scoring one pod failed.
    #[error("pod {pod}: {source}")]
    Pod {
        /// `namespace/name`.
        pod: String,
        /// Why.
        source: Box<ExtenderError>,
    },
}

/// What a pod's claims ask of vp2p's devices, from their specs: GPUs of the
/// GPU class (an `exactly` request's count, or the first alternative's of a
/// prioritized list; every such request summed, so KubeVirt's one-device
/// requests count too) and whether any request asks a NIC of the NIC class.
pub fn ask_of(claim_specs: &[Value], gpu_class: &str, nic_class: &str) -> Ask {
    let mut ask = Ask {
        gpus: 0,
        nic: false,
    };
    for spec in claim_specs {
        for r in spec["devices"]["requests"].as_array().into_iter().flatten() {
            let one = if r["exactly"].is_object() {
                &r["exactly"]
            } else {
                &r["firstAvailable"][0]
            };
            let count = one["count"].as_u64().unwrap_or(1) as usize;
            match one["deviceClassName"].as_str() {
                Some(c) if c == gpu_class => ask.gpus += count,
                Some(c) if c == nic_class => ask.nic = true,
                _ => {}
            }
        }
    }
    ask
}

/// Every node of `nodes` scored 0: the extender leaves the pod to the
/// scheduler's own scores.
fn neutral(nodes: Vec<String>) -> Vec<HostPriority> {
    nodes
        .into_iter()
        .map(|host| HostPriority { host, score: 0 })
        .collect()
}

/// The claims and the driver's slices, each kept by a watch.
#[derive(Debug, Clone)]
pub struct Caches {
    /// Every ResourceClaim.
    pub claims: cache::WatchCache<HeldClaim>,
    /// The driver's ResourceSlices (None: one that is not a node's).
    pub slices: cache::WatchCache<Option<NodeDevices>>,
}

impl Caches {
    /// Starts both watches on the current runtime.
    pub fn start(api: &ApiServer, driver: &str) -> Self {
        let log: fn(&str) = |m| eprintln!("p2p-host: extender: {m}");
        Caches {
            claims: cache::WatchCache::start(
                api.clone(),
                objects::claims(),
                None,
                HeldClaim::from_object,
                log,
            ),
            slices: cache::WatchCache::start(
                api.clone(),
                objects::slices(),
                Some(format!("spec.driver={driver}")),
                NodeDevices::from_object,
                log,
            ),
        }
    }
}

/// Answers one prioritize call: the claims as the watch keeps them (the
/// pod's among them, read alone only when the cache does not hold it yet),
/// the slices likewise, every candidate node scored.
pub async fn prioritize(
    api: &ApiServer,
    caches: &Caches,
    settings: &Settings,
    args: &ExtenderArgs,
) -> Result<Vec<HostPriority>, ExtenderError> {
    let nodes = args.node_names();
    let labelled = settings.pod_labels.is_empty()
        || settings
            .pod_labels
            .iter()
            .any(|(k, v)| args.pod["metadata"]["labels"][k] == v.as_str());
    if !labelled {
        return Ok(neutral(nodes));
    }
    let namespace = args.pod["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default");
    let claims = caches.claims.objects().await;
    let mut specs = Vec::new();
    for name in args.claim_names() {
        let listed = claims
            .iter()
            .find(|c| c.namespace == namespace && c.name == name);
        match listed {
            Some(c) => specs.push(c.spec.clone()),
            None => {
                let claim = api.claim_object(namespace, &name).await?;
                specs.push(objects::spec(&claim).clone());
            }
        }
    }
    let ask = ask_of(&specs, &settings.gpu_class, &settings.nic_class);
    if ask.gpus == 0 {
        return Ok(neutral(nodes));
    }
    let slices = caches.slices.objects().await;
    let view = DriverView::new(
        &settings.driver,
        slices.iter().filter_map(|s| s.as_ref().as_ref()),
        claims.iter().map(|c| &**c),
    );
    Ok(view.scores(&settings.driver, &nodes, ask, &settings.keep))
}

/// Runs the extender until the process is stopped: `POST /prioritize`.
pub fn run(settings: Settings) -> Result<(), ExtenderError> {
    // One thread: the scheduler asks one pod at a time.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| ExtenderError::Io {
            what: "starting the runtime".into(),
            source,
        })?;
    rt.block_on(async move {
        let api = ApiServer::connect(settings.kubeconfig.as_deref(), settings.timeout).await?;
        let listener = tokio::net::TcpListener::bind(settings.listen)
            .await
            .map_err(|source| ExtenderError::Io {
                what: format!("listening on {}", settings.listen),
                source,
            })?;
        eprintln!(
            "p2p-host: scheduler extender on http://{}/prioritize",
            settings.listen
        );
        let caches = Caches::start(&api, &settings.driver);
        let state = Arc::new((api, settings, std::sync::atomic::AtomicU64::new(0), caches));
        let app = axum::Router::new().route(
            "/prioritize",
            axum::routing::post(move |body: axum::body::Bytes| {
                let state = state.clone();
                async move {
                    let call = state.2.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                    answer(&state.0, &state.3, &state.1, &body, call).await
                }
            }),
        );
        axum::serve(listener, app)
            .await
            .map_err(|source| ExtenderError::Io {
                what: "serving".into(),
                source,
            })
    })
}

/// The HTTP answer to prioritize call number `call`: the scores, or 500
/// with why (kube-scheduler logs a prioritize error and goes on without the
/// extender's scores). The first call and every 1000th are logged.
async fn answer(
    api: &ApiServer,
    caches: &Caches,
    settings: &Settings,
    body: &[u8],
    call: u64,
) -> (axum::http::StatusCode, String) {
    let started = std::time::Instant::now();
    let result = match serde_json::from_slice::<ExtenderArgs>(body) {
        Err(e) => Err(ExtenderError::Request(e.to_string())),
        Ok(args) => {
            let scored =
                prioritize(api, caches, settings, &args)
                    .await
                    .map_err(|e| ExtenderError::Pod {
                        pod: args.pod_name(),
                        source: Box::new(e),
                    });
            if let (Ok(s), true) = (&scored, call == 1 || call % 1000 == 0) {
                eprintln!(
                    "p2p-host: extender: call {call}: pod {}, {} node(s), best score {} in {} ms",
                    args.pod_name(),
                    s.len(),
                    s.iter().map(|h| h.score).max().unwrap_or(0),
                    started.elapsed().as_millis()
                );
            }
            scored
        }
    };
    match result
        .and_then(|s| serde_json::to_string(&s).map_err(|e| ExtenderError::Request(e.to_string())))
    {
        Ok(json) => (axum::http::StatusCode::OK, json),
        Err(e) => {
            eprintln!("p2p-host: extender: {e}");
            (axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_claim_s_gpus_and_nic_are_read_from_exactly_and_prioritized_requests() {
        let tiered = json!({"devices": {"requests": [
            {"name": "gpus", "firstAvailable": [
                {"name": "switch", "deviceClassName": "vp2p-gpu", "count": 4},
                {"name": "anywhere", "deviceClassName": "vp2p-gpu", "count": 4}]},
            {"name": "nic", "firstAvailable": [{"name": "switch", "deviceClassName": "vp2p-nic", "count": 1}]}]}});
        assert_eq!(
            ask_of(&[tiered], "vp2p-gpu", "vp2p-nic"),
            Ask { gpus: 4, nic: true }
        );
        let kubevirt = json!({"devices": {"requests": [
            {"name": "gpu-0", "exactly": {"deviceClassName": "vp2p-gpu", "count": 1}},
            {"name": "gpu-1", "exactly": {"deviceClassName": "vp2p-gpu", "count": 1}}]}});
        assert_eq!(
            ask_of(&[kubevirt], "vp2p-gpu", "vp2p-nic"),
            Ask {
                gpus: 2,
                nic: false
            }
        );
    }

    #[test]
    fn the_view_marks_allocated_devices_taken_and_scores_the_nearest_free_pair() {
        let dev = |name: &str, sw: &str| {
            json!({"name": name, "attributes": {
                "gpu.vp2p.io/kind": {"string": "gpu"},
                "gpu.vp2p.io/cliquePix": {"string": sw},
                "gpu.vp2p.io/cliqueNode": {"string": "node0"}}})
        };
        let slice = |node: &str| {
            json!({"spec": {"driver": "gpu.vp2p.io", "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [dev("g0", "sw0"), dev("g1", "sw0"), dev("g2", "sw1"), dev("g3", "sw1")]}})
        };
        // n1: g0 and g2 taken, so no switch holds a free pair (NUMA node
        // only); n2: all free, a switch pair, but it costs the node the four
        // kept for (a point off).
        let claim = json!({"status": {"allocation": {"devices": {"results": [
            {"request": "gpus", "driver": "gpu.vp2p.io", "pool": "n1", "device": "g0"},
            {"request": "gpus", "driver": "gpu.vp2p.io", "pool": "n1", "device": "g2"}]}}}});
        let slices: Vec<NodeDevices> = [slice("n1"), slice("n2")]
            .iter()
            .filter_map(NodeDevices::from_object)
            .collect();
        let claims = [HeldClaim::from_object(&claim)];
        let view = DriverView::new("gpu.vp2p.io", &slices, &claims);
        let got = view.scores(
            "gpu.vp2p.io",
            &["n1".into(), "n2".into(), "n3".into()],
            Ask {
                gpus: 2,
                nic: false,
            },
            &[Ask {
                gpus: 4,
                nic: false,
            }],
        );
        let scores: Vec<(&str, i64)> = got.iter().map(|h| (h.host.as_str(), h.score)).collect();
        assert_eq!(scores, [("n1", 2), ("n2", 7), ("n3", 0)]);
    }
}
