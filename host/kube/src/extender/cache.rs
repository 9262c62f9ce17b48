//! The extender's view of one resource kept current by a watch: listed
//! once, then every change applied as the API server streams it, so a
//! prioritize call reads memory instead of listing every claim and slice.
//! Each object is kept as a projection made once when it arrives (what
//! scoring reads of it), behind an `Arc`, so a call neither parses nor
//! copies the objects.
//! A watch that ends is taken up from the last version seen; one the server
//! refuses (410: the version compacted away) or that breaks starts over with
//! a list. Until the first list lands, [`WatchCache::objects`] waits for it.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use kube::api::{ApiResource, DynamicObject, WatchEvent};
use serde_json::Value;
use tokio_stream::StreamExt;

use crate::kubelet_plugin::api_server::{ApiError, ApiServer};

/// `namespace/name` -> the object's projection.
type Objects<T> = BTreeMap<String, Arc<T>>;

/// One resource's objects, as the last list and the watch after it say.
#[derive(Debug)]
pub struct WatchCache<T> {
    objects: Arc<RwLock<Objects<T>>>,
    synced: tokio::sync::watch::Receiver<bool>,
}

impl<T> Clone for WatchCache<T> {
    fn clone(&self) -> Self {
        WatchCache {
            objects: self.objects.clone(),
            synced: self.synced.clone(),
        }
    }
}

fn key(o: &DynamicObject) -> String {
    format!(
        "{}/{}",
        o.metadata.namespace.as_deref().unwrap_or_default(),
        o.metadata.name.as_deref().unwrap_or_default()
    )
}

impl<T: Send + Sync + 'static> WatchCache<T> {
    /// Starts keeping `resource` (`fields` a field selector) on the current
    /// runtime, each object as `project` makes it of its JSON; `log` hears
    /// why a list or watch failed (retried after a second).
    pub fn start(
        api: ApiServer,
        resource: ApiResource,
        fields: Option<String>,
        project: fn(&Value) -> T,
        log: fn(&str),
    ) -> Self {
        let objects = Arc::new(RwLock::new(Objects::new()));
        let (tx, synced) = tokio::sync::watch::channel(false);
        let kept = objects.clone();
        tokio::spawn(async move {
            loop {
                let watched = Watched {
                    api: &api,
                    resource: &resource,
                    fields: fields.as_deref(),
                    project,
                };
                if let Err(e) = watched.follow(&kept, &tx).await {
                    log(&format!("keeping {}: {e}", resource.plural));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        });
        WatchCache { objects, synced }
    }

    /// Every object's projection now, once the first list has landed.
    pub async fn objects(&self) -> Vec<Arc<T>> {
        let mut synced = self.synced.clone();
        let _ = synced.wait_for(|s| *s).await;
        let objects = self.objects.read().unwrap_or_else(|p| p.into_inner());
        objects.values().cloned().collect()
    }
}

/// What one cache follows, and how it keeps each object.
struct Watched<'a, T> {
    api: &'a ApiServer,
    resource: &'a ApiResource,
    fields: Option<&'a str>,
    project: fn(&Value) -> T,
}

impl<T> Watched<'_, T> {
    fn kept(&self, o: &DynamicObject) -> Arc<T> {
        Arc::new((self.project)(
            &serde_json::to_value(o).unwrap_or(Value::Null),
        ))
    }

    /// One list, then watches from its version until one is refused or breaks.
    async fn follow(
        &self,
        kept: &RwLock<Objects<T>>,
        synced: &tokio::sync::watch::Sender<bool>,
    ) -> Result<(), ApiError> {
        let (items, mut version) = self.api.list_versioned(self.resource, self.fields).await?;
        {
            let mut objects = kept.write().unwrap_or_else(|p| p.into_inner());
            objects.clear();
            for o in &items {
                objects.insert(key(o), self.kept(o));
            }
        }
        let _ = synced.send(true);
        loop {
            let events = self
                .api
                .watch_from(self.resource, self.fields, &version)
                .await?;
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.next().await {
                let event = event.map_err(|e| ApiError::Watch(e.to_string()))?;
                let mut objects = kept.write().unwrap_or_else(|p| p.into_inner());
                match event {
                    WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                        version = o.metadata.resource_version.clone().unwrap_or(version);
                        objects.insert(key(&o), self.kept(&o));
                    }
                    WatchEvent::Deleted(o) => {
                        version = o.metadata.resource_version.clone().unwrap_or(version);
                        objects.remove(&key(&o));
                    }
                    WatchEvent::Bookmark(b) => version = b.metadata.resource_version,
                    // 410 and the rest: list again.
                    WatchEvent::Error(e) => return Err(ApiError::Watch(e.to_string())),
                }
            }
        }
    }
}
