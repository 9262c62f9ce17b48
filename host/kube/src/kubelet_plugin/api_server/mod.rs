//! The plugin's API side, through the Kubernetes API server (kube-rs): the
//! node's ResourceSlices published (created, replaced, the ones no longer
//! built deleted), owned by the node's Node object, published again with a
//! new pool generation when the node's devices change, watched so that a
//! slice edited or deleted from outside is put back, left in place when the
//! driver stops (its next start adopts them) and removed only on request
//! (uninstall); and the ResourceClaims read at prepare. In a cluster the
//! service account's credentials are used, else a kubeconfig.
//!
//! The objects are vp2p's own `resource.k8s.io/v1` types, sent and read
//! through kube's dynamic API ([`objects`] says why and maps them).
//!
//! Every request is bounded by the connection's timeout (`--api-timeout-ms`):
//! an API server that stops answering fails the request instead of holding
//! a prepare or the publisher.
//!
//! Each call here is one verb of the shipped ClusterRole
//! (host/kubernetes/dra/driver.yaml): slices list, watch, create, get,
//! update, delete; claims get; nodes get; and events create
//! ([`super::events`]).

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client};
use p2p_allocation::dra::ResourceSlice;
use tokio_stream::StreamExt;

mod reads;

pub use reads::ApiClaims;

use super::objects;

/// Why the API server could not be reached or answered an error.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No configuration: not in a cluster, no kubeconfig.
    #[error("API server configuration: {0}")]
    Config(String),
    /// A request failed (connection, or an error status).
    #[error("{what}: {source}")]
    Request {
        /// What was asked.
        what: String,
        /// The cause (boxed: kube's error is large).
        source: Box<kube::Error>,
    },
    /// A request got no answer in time.
    #[error("{what}: no answer from the API server within {after:?}")]
    Timeout {
        /// What was asked.
        what: String,
        /// How long it was given.
        after: Duration,
    },
    /// A watch broke, or the server ended it with an error (410: its
    /// version compacted away).
    #[error("the watch ended: {0}")]
    Watch(String),
    /// An object did not read as, or write from, vp2p's types.
    #[error("{what}: {source}")]
    Convert {
        /// Which object.
        what: String,
        /// The cause.
        source: serde_json::Error,
    },
}

impl ApiError {
    /// Whether the API server answered 404 Not Found.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ApiError::Request { source, .. } if status(source) == Some(404))
    }
}

/// A connection to the API server.
#[derive(Clone)]
pub struct ApiServer {
    client: Client,
    timeout: Duration,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer").finish_non_exhaustive()
    }
}

fn request(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ApiError {
    let what = what.into();
    move |source| ApiError::Request {
        what,
        source: Box::new(source),
    }
}

fn converting(what: &str) -> impl FnOnce(serde_json::Error) -> ApiError + '_ {
    move |source| ApiError::Convert {
        what: what.to_string(),
        source,
    }
}

/// The HTTP status of an error answer, if the API server gave one.
fn status(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

impl ApiServer {
    /// Connects with `kubeconfig`, or as the cluster's pod (or the default
    /// kubeconfig) when none is given; each request may take `timeout`.
    pub async fn connect(kubeconfig: Option<&Path>, timeout: Duration) -> Result<Self, ApiError> {
        let client = match kubeconfig {
            None => Client::try_default()
                .await
                .map_err(|e| ApiError::Config(e.to_string()))?,
            Some(path) => {
                let kc = kube::config::Kubeconfig::read_from(path)
                    .map_err(|e| ApiError::Config(format!("{}: {e}", path.display())))?;
                let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
                    .await
                    .map_err(|e| ApiError::Config(format!("{}: {e}", path.display())))?;
                Client::try_from(config).map_err(|e| ApiError::Config(e.to_string()))?
            }
        };
        Ok(Self { client, timeout })
    }

    /// `fut`'s output, or a timeout error naming `what` after `limit`.
    async fn within<F: std::future::Future>(
        what: &str,
        limit: Duration,
        fut: F,
    ) -> Result<F::Output, ApiError> {
        tokio::time::timeout(limit, fut)
            .await
            .map_err(|_| ApiError::Timeout {
                what: what.to_string(),
                after: limit,
            })
    }

    /// `fut`, a request, bounded by the connection's timeout; its error
    /// named `what`.
    async fn call<T>(
        &self,
        what: String,
        fut: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, ApiError> {
        Self::within(&what, self.timeout, fut)
            .await?
            .map_err(request(what))
    }

    fn slices(&self) -> Api<DynamicObject> {
        Api::all_with(self.client.clone(), &objects::slices())
    }

    /// The driver's slices of `node` now on the API server, as it sent them.
    pub async fn published(
        &self,
        node: &str,
        driver: &str,
    ) -> Result<Vec<DynamicObject>, ApiError> {
        let lp =
            ListParams::default().fields(&format!("spec.nodeName={node},spec.driver={driver}"));
        let list = self
            .call(
                format!("listing the ResourceSlices of node {node}"),
                self.slices().list(&lp),
            )
            .await?;
        // The field selector is the server's to apply; a server that ignores
        // it must not make us delete another driver's slices.
        Ok(list
            .items
            .into_iter()
            .filter(|s| objects::is_of(s, node, driver))
            .collect())
    }

    /// The owner reference the slices of `node` carry: its Node object, so
    /// that the garbage collector deletes them with the Node.
    pub async fn node_owner(&self, node: &str) -> Result<OwnerReference, ApiError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let n = self
            .call(format!("reading Node {node}"), api.get(node))
            .await?;
        Ok(OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: node.to_string(),
            uid: n.metadata.uid.unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: None,
        })
    }

    /// Whether the API server holds exactly `slices` for the driver on
    /// `node` (the same names, each with the same spec but its pool
    /// generation, and owned by `owner` when given): false when one was
    /// deleted (as the kubelet's DRA manager does with a node's slices when it
    /// starts) or edited from outside.
    pub async fn holds(
        &self,
        node: &str,
        driver: &str,
        slices: &[ResourceSlice],
        owner: Option<&OwnerReference>,
    ) -> Result<bool, ApiError> {
        let published = self.published(node, driver).await?;
        if published.len() != slices.len() {
            return Ok(false);
        }
        for ours in slices {
            let name = &ours.metadata.name;
            let Some(theirs) = published
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(name.as_str()))
            else {
                return Ok(false);
            };
            let same = objects::same_spec(ours, theirs)
                .map_err(converting(&format!("ResourceSlice {name}")))?;
            if !same {
                return Ok(false);
            }
            if let Some(owner) = owner {
                let owned = theirs
                    .metadata
                    .owner_references
                    .as_ref()
                    .is_some_and(|o| o.iter().any(|r| r.uid == owner.uid));
                if !owned {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// The highest pool generation of the driver's slices of `node` (0: none).
    pub async fn generation(&self, node: &str, driver: &str) -> Result<i64, ApiError> {
        Ok(self
            .published(node, driver)
            .await?
            .iter()
            .filter_map(objects::generation)
            .max()
            .unwrap_or(0))
    }

    /// Publishes `slices` (all of one pool), owned by `owner` when given:
    /// each created, or replaced when it exists (a slice of an earlier run is
    /// adopted so); the driver's other slices of the node deleted after.
    pub async fn publish(
        &self,
        node: &str,
        driver: &str,
        slices: &[ResourceSlice],
        owner: Option<&OwnerReference>,
    ) -> Result<(), ApiError> {
        let api = self.slices();
        let pp = PostParams::default();
        for s in slices {
            let name = s.metadata.name.clone();
            let mut obj = objects::slice_object(s, owner)
                .map_err(converting(&format!("ResourceSlice {name}")))?;
            let creating = format!("creating ResourceSlice {name}");
            match Self::within(&creating, self.timeout, api.create(&pp, &obj)).await? {
                Ok(_) => continue,
                Err(e) if status(&e) == Some(409) => {}
                Err(e) => return Err(request(creating)(e)),
            }
            // It exists: replace it at the version read now.
            let current = self
                .call(format!("reading ResourceSlice {name}"), api.get(&name))
                .await?;
            obj.metadata.resource_version = current.metadata.resource_version;
            self.call(
                format!("replacing ResourceSlice {name}"),
                api.replace(&name, &pp, &obj),
            )
            .await?;
        }
        let keep: Vec<&str> = slices.iter().map(|s| s.metadata.name.as_str()).collect();
        for old in self.published(node, driver).await? {
            let Some(name) = old.metadata.name else {
                continue;
            };
            if !keep.contains(&name.as_str()) {
                self.delete(&name).await?;
            }
        }
        Ok(())
    }

    async fn delete(&self, name: &str) -> Result<(), ApiError> {
        let what = format!("deleting ResourceSlice {name}");
        let api = self.slices();
        match Self::within(
            &what,
            self.timeout,
            api.delete(name, &DeleteParams::default()),
        )
        .await?
        {
            Ok(_) => Ok(()),
            Err(e) if status(&e) == Some(404) => Ok(()),
            Err(e) => Err(request(what)(e)),
        }
    }

    /// Calls `changed` at every event of the driver's slices of `node` (its
    /// own writes too: the caller only compares the API server's copy with
    /// what it published), until `stop` is set. The watch asks for
    /// bookmarks and, when the server ends it (every 290 s) or it breaks,
    /// is taken up again from the last resourceVersion seen: no list, no
    /// replay of the slices. Only at start and after 410 Gone (the version
    /// compacted away) is it started anew, and then `changed` is called so
    /// the caller checks the API server's copy once.
    pub async fn watch_slices(
        &self,
        node: &str,
        driver: &str,
        changed: impl Fn(),
        mut stop: tokio::sync::watch::Receiver<bool>,
        log: fn(&str),
    ) {
        let wp = WatchParams::default()
            .fields(&format!("spec.nodeName={node},spec.driver={driver}"))
            .timeout(290);
        // "0": the server's cache, the slices there sent as ADDED first.
        let mut version = "0".to_string();
        loop {
            // Bounded until the answer starts; the events then come as they come.
            let started = Self::within("watching the ResourceSlices", self.timeout, async {
                self.slices().watch(&wp, &version).await
            })
            .await;
            // Whether the watch ended as the server ends it (taken up again
            // at once) or broke (taken up after a second).
            let ended_cleanly = match started {
                Ok(Ok(events)) => {
                    let mut events = std::pin::pin!(events);
                    loop {
                        let event = tokio::select! {
                            e = events.next() => e,
                            _ = stop.wait_for(|s| *s) => return,
                        };
                        match event {
                            Some(Ok(WatchEvent::Bookmark(b))) => {
                                version = b.metadata.resource_version;
                            }
                            Some(Ok(
                                WatchEvent::Added(o)
                                | WatchEvent::Modified(o)
                                | WatchEvent::Deleted(o),
                            )) => {
                                if let Some(v) = o.metadata.resource_version {
                                    version = v;
                                }
                                changed();
                            }
                            Some(Ok(WatchEvent::Error(e))) => {
                                if e.code == 410 {
                                    // Compacted away: anew, and the caller looks.
                                    version = "0".into();
                                    changed();
                                } else {
                                    log(&format!("watching the ResourceSlices: {e}"));
                                }
                                break false;
                            }
                            Some(Err(e)) => {
                                log(&format!("watching the ResourceSlices: {e}"));
                                break false;
                            }
                            // The server's timeout.
                            None => break true,
                        }
                    }
                }
                Ok(Err(e)) => {
                    if status(&e) == Some(410) {
                        version = "0".into();
                        changed();
                    }
                    log(&format!("watching the ResourceSlices: {e}"));
                    false
                }
                Err(e) => {
                    log(&e.to_string());
                    false
                }
            };
            if ended_cleanly {
                continue;
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }

    /// Deletes every slice of the driver on `node` (`dra driver
    /// --remove-slices`, at uninstall).
    pub async fn remove(&self, node: &str, driver: &str) -> Result<usize, ApiError> {
        let old = self.published(node, driver).await?;
        let mut n = 0;
        for s in old {
            if let Some(name) = s.metadata.name {
                self.delete(&name).await?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// The client, for requests the plugin makes elsewhere (its Events).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// How long one request may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}
