//! The fleet on the real control plane: Node objects with what a kubelet
//! would report, each node's ResourceSlices, the DeviceClasses and claim
//! templates, and a watch of the VM pods, which come and go in `vm.rs`.
//! Nothing here chooses a node or a device.

mod vm;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate, ResourceSlice};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::Client;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::sync::{mpsc, Semaphore};
use tokio_stream::StreamExt;

pub use vm::{split_devices, Outcome, PodResult, POD_LIMIT, POLICY_LABEL};

/// What a node offers (a VM pod asks per GPU what `vm.rs` says): eight GPUs' worth fit.
const NODE_CPU: u32 = 120;
const NODE_MEMORY_GI: u32 = 1000;

/// A connection to the control plane, in one namespace.
pub struct Cluster {
    client: Client,
    ns: String,
    events: mpsc::UnboundedReceiver<Pod>,
}

impl Cluster {
    /// Connects with `kubeconfig` and starts watching pods of `ns` (made if missing).
    pub async fn connect(kubeconfig: &std::path::Path, ns: &str) -> Result<Self, String> {
        let kc = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| e.to_string())?;
        let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .map_err(|e| e.to_string())?;
        config.read_timeout = Some(Duration::from_secs(300));
        let client = Client::try_from(config).map_err(|e| e.to_string())?;
        let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        let nsobj =
            from(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))?;
        if let Err(e) = nss.create(&PostParams::default(), &nsobj).await {
            if !e.to_string().contains("AlreadyExists") && !e.to_string().contains("already exists")
            {
                return Err(format!("namespace {ns}: {e}"));
            }
        }
        let (tx, events) = mpsc::unbounded_channel();
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        tokio::spawn(async move {
            let mut rv = "0".to_string();
            loop {
                let Ok(stream) = pods.watch(&WatchParams::default().timeout(290), &rv).await else {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                };
                let mut stream = Box::pin(stream);
                while let Some(ev) = stream.next().await {
                    match ev {
                        Ok(WatchEvent::Added(p)) | Ok(WatchEvent::Modified(p)) => {
                            if let Some(v) = &p.metadata.resource_version {
                                rv = v.clone();
                            }
                            if tx.send(p).is_err() {
                                return;
                            }
                        }
                        Ok(WatchEvent::Bookmark(b)) => rv = b.metadata.resource_version,
                        Ok(WatchEvent::Error(_)) => {
                            rv = "0".into();
                            break;
                        }
                        _ => {}
                    }
                }
            }
        });
        Ok(Self {
            client,
            ns: ns.to_string(),
            events,
        })
    }

    /// Creates Node `name` as a kubelet would report it (Ready, room for
    /// pods, no not-ready taint), and `slices` for it.
    pub async fn add_node(&self, name: &str, slices: &[Value]) -> Result<(), String> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let node = from(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"fleet.vp2p.io/node": "true"}}}))?;
        nodes
            .create(&PostParams::default(), &node)
            .await
            .map_err(|e| format!("node {name}: {e}"))?;
        let cap = json!({"cpu": NODE_CPU.to_string(), "memory": format!("{NODE_MEMORY_GI}Gi"), "pods": "110"});
        let status = json!({"status": {"capacity": cap, "allocatable": cap,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "a Node object of the fleet benchmark (no kubelet runs)"}]}});
        nodes
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(|e| format!("node {name} status: {e}"))?;
        // Admission taints a new node not-ready until the node lifecycle
        // controller hears from its kubelet; neither runs here.
        nodes
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"taints": null}})),
            )
            .await
            .map_err(|e| format!("node {name} taints: {e}"))?;
        let api: Api<ResourceSlice> = Api::all(self.client.clone());
        for s in slices {
            api.create(&PostParams::default(), &from(s.clone())?)
                .await
                .map_err(|e| format!("slice of {name}: {e}"))?;
        }
        Ok(())
    }

    /// Creates `nodes` (name, slices) with `parallel` requests in flight.
    pub async fn add_nodes(
        self: &Arc<Self>,
        nodes: Vec<(String, Vec<Value>)>,
        parallel: usize,
    ) -> Result<(), String> {
        let gate = Arc::new(Semaphore::new(parallel));
        let mut set = tokio::task::JoinSet::new();
        for (name, slices) in nodes {
            let me = self.clone();
            let gate = gate.clone();
            set.spawn(async move {
                let _p = gate.acquire().await;
                me.add_node(&name, &slices).await
            });
        }
        while let Some(r) = set.join_next().await {
            r.map_err(|e| e.to_string())??;
        }
        Ok(())
    }

    /// Creates DeviceClasses (cluster-wide) and claim templates (in the namespace).
    pub async fn apply_classes_and_templates(
        &self,
        classes: &[Value],
        templates: &[Value],
    ) -> Result<(), String> {
        create_missing::<DeviceClass>(Api::all(self.client.clone()), classes).await?;
        create_missing::<ResourceClaimTemplate>(
            Api::namespaced(self.client.clone(), &self.ns),
            templates,
        )
        .await
    }
    /// Deletes every fleet Node and every ResourceSlice, and waits until they are gone.
    pub async fn delete_fleet_nodes(&self) -> Result<(), String> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let slices: Api<ResourceSlice> = Api::all(self.client.clone());
        let lp = ListParams::default().labels("fleet.vp2p.io/node=true");
        nodes
            .delete_collection(&DeleteParams::default(), &lp)
            .await
            .map_err(|e| format!("deleting nodes: {e}"))?;
        slices
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
            .map_err(|e| format!("deleting slices: {e}"))?;
        let start = Instant::now();
        loop {
            let n = nodes
                .list(&lp)
                .await
                .map_err(|e| e.to_string())?
                .items
                .len();
            let s = slices
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .len();
            if n == 0 && s == 0 {
                return Ok(());
            }
            if start.elapsed() > Duration::from_secs(120) {
                return Err(format!(
                    "{n} node(s) and {s} slice(s) still there after 2 minutes"
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// Creates each of `objects` that `api` does not have yet (by name).
async fn create_missing<K>(api: Api<K>, objects: &[Value]) -> Result<(), String>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    for v in objects {
        let obj: K = from(v.clone())?;
        let name = obj.meta().name.clone().unwrap_or_default();
        if api
            .get_opt(&name)
            .await
            .map_err(|e| e.to_string())?
            .is_none()
        {
            api.create(&PostParams::default(), &obj)
                .await
                .map_err(|e| format!("{} {name}: {e}", K::kind(&())))?;
        }
    }
    Ok(())
}

/// A typed object from JSON.
fn from<T: DeserializeOwned>(v: Value) -> Result<T, String> {
    serde_json::from_value(v).map_err(|e| e.to_string())
}
