//! The node's ResourceSlices kept published: asked of the driver and
//! published as a new pool generation when they change (a timer, and the
//! driver's own wake-up, kernel uevents for vp2p), published again when the
//! API server's copy differs (the slices' watch), and adopted from an
//! earlier run at start.

use std::sync::Arc;
use std::time::Duration;

use p2p_allocation::dra::ResourceSlice;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::api_server::ApiError;
use super::driver::DraDriver;
use super::{api_server, PluginSettings};

/// How long the publisher waits after a device wake-up before asking the
/// driver: a bind is an unbind, a `driver_override` write and a probe in a
/// row.
const SETTLE: Duration = Duration::from_millis(200);

/// Whether `a` and `b` are the same slices but for their pool generation.
fn same_slices(a: &[ResourceSlice], b: &[ResourceSlice]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            let mut y = y.clone();
            y.spec.pool.generation = x.spec.pool.generation;
            *x == y
        })
}

/// Publishes the node's slices whenever the driver's differ from those last
/// published (a device bound, unbound, appeared or gone: a new pool
/// generation) or the API server no longer holds them as published (deleted,
/// edited, or not owned by the Node), asking the driver every
/// `cadence.resync` and at once when `devices_changed` is notified, and
/// checking the API server's copy (a LIST) at once when `api_changed` is
/// notified (an event of the slices' watch: that check asks the driver
/// nothing), and otherwise only every `cadence.verify`, until `stop`: a
/// quiet node sends the API server nothing but its watch. An API server
/// that fails is retried sooner ([`Retry`]). The first publication
/// adopts the slices of an earlier run: the same names, the next pool
/// generation.
pub async fn publish_loop<D: DraDriver>(
    api: api_server::ApiServer,
    driver: Arc<D>,
    told: Told,
    settings: PluginSettings,
    cadence: Cadence,
    wakers: Wakers,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let Wakers {
        devices_changed,
        api_changed,
    } = wakers;
    let Told { health, metrics } = told;
    let (node, driver_name, log) = (
        settings.node_name.clone(),
        settings.driver_name.clone(),
        settings.log,
    );
    let mut generation = match api.generation(&node, &driver_name).await {
        Ok(g) => g,
        Err(e) => {
            log(&format!("reading the published generation: {e}"));
            0
        }
    };
    if generation > 0 {
        log(&format!(
            "adopting the published slices of pool generation {generation}"
        ));
    }
    // The Node that owns the slices, read again before each publication:
    // a Node deleted and created again has a new uid, and slices owned by
    // the old one are the garbage collector's to delete.
    let mut owner: Option<OwnerReference> = None;
    // The slices last published.
    let mut last: Option<Vec<ResourceSlice>> = None;
    let mut api_only = false;
    let Cadence { resync, verify } = cadence;
    let mut retry = Retry::new(resync);
    // When the API server's copy was last compared with ours (a LIST): on a
    // watch event, and otherwise only every `verify`.
    let mut verified: Option<tokio::time::Instant> = None;
    loop {
        let next = generation + 1;
        // What to publish, if anything: the driver's slices now, or (on an
        // API event) the last publication again.
        let candidate = if api_only {
            last.clone()
        } else {
            let d = driver.clone();
            match tokio::task::spawn_blocking(move || d.publication(next)).await {
                Ok(Ok(slices)) => Some(slices),
                Ok(Err(e)) => {
                    log(&format!("building the slices: {e}"));
                    None
                }
                Err(e) => {
                    log(&format!("building the slices: {e}"));
                    None
                }
            }
        };
        if let Some(mut slices) = candidate {
            let changed = !last.as_deref().is_some_and(|l| same_slices(l, &slices));
            // Unchanged slices, but gone from the API server (the kubelet's
            // DRA manager deletes a node's slices when it starts) or edited
            // there: published again.
            // A failed publication is looked at again at its retry.
            let verify_now =
                api_only || retry.failing() || verified.is_none_or(|t| t.elapsed() >= verify);
            let lost = !changed
                && verify_now
                && match api
                    .holds(&node, &driver_name, &slices, owner.as_ref())
                    .await
                {
                    Ok(held) => {
                        verified = Some(tokio::time::Instant::now());
                        !held
                    }
                    Err(e) => {
                        log(&format!("reading the published slices: {e}"));
                        false
                    }
                };
            if lost {
                log("the API server no longer holds the published slices: publishing again");
            }
            if changed || lost {
                match publish_owned(&api, &node, &driver_name, &mut owner, &mut slices, next).await
                {
                    Ok(()) => {
                        generation = next;
                        health.set_published();
                        let devices: usize = slices.iter().map(|s| s.spec.devices.len()).sum();
                        metrics.publication(Some(devices));
                        log(&format!(
                            "published {devices} device(s) in {} slice(s), pool generation {generation}, owned by Node {node} (uid {})",
                            slices.len(),
                            owner.as_ref().map(|o| o.uid.as_str()).unwrap_or_default()
                        ));
                        last = Some(slices);
                        verified = Some(tokio::time::Instant::now());
                        retry.succeeded();
                    }
                    Err(e) => {
                        metrics.publication(None);
                        retry.failed();
                        log(&format!("publishing: {e} (retried in {:?})", retry.after()));
                    }
                }
            }
        }
        let woken = tokio::select! {
            _ = tokio::time::sleep(retry.after()) => Woken::Timer,
            _ = devices_changed.notified() => Woken::Devices,
            _ = api_changed.notified() => Woken::Api,
            _ = stop.wait_for(|s| *s) => break,
        };
        if woken == Woken::Devices {
            tokio::time::sleep(SETTLE).await;
        }
        api_only = woken == Woken::Api;
    }
}

/// Why a publication was not made.
#[derive(Debug, thiserror::Error)]
enum NotPublished {
    /// The Node is not there (deleted; perhaps created again soon): slices
    /// without an owner would outlive it, so none are written.
    #[error("Node {0} not found: its slices are published once it exists again")]
    NoNode(String),
    /// The API server failed.
    #[error(transparent)]
    Api(#[from] ApiError),
}

/// Publishes `slices` at pool generation `next`, owned by the Node `node`
/// as the API server holds it now (`owner` updated; a failure to read it
/// keeps the uid read before).
async fn publish_owned(
    api: &api_server::ApiServer,
    node: &str,
    driver: &str,
    owner: &mut Option<OwnerReference>,
    slices: &mut [ResourceSlice],
    next: i64,
) -> Result<(), NotPublished> {
    match api.node_owner(node).await {
        Ok(o) => *owner = Some(o),
        Err(e) if e.is_not_found() => {
            *owner = None;
            return Err(NotPublished::NoNode(node.to_string()));
        }
        Err(e) if owner.is_none() => return Err(e.into()),
        Err(_) => {}
    }
    for s in slices.iter_mut() {
        s.spec.pool.generation = next;
    }
    // The generation advances only once published: a retry after a failure
    // publishes the same one.
    api.publish(node, driver, slices, owner.as_ref()).await?;
    Ok(())
}

/// When the publisher looks again: every `resync`, and after a failure
/// sooner, from one second doubling up to half a minute (or `resync`).
#[derive(Debug, Clone, Copy)]
struct Retry {
    resync: Duration,
    failed: Option<Duration>,
}

impl Retry {
    const FIRST: Duration = Duration::from_secs(1);
    const MOST: Duration = Duration::from_secs(30);

    fn new(resync: Duration) -> Self {
        Self {
            resync,
            failed: None,
        }
    }

    fn after(&self) -> Duration {
        self.failed.unwrap_or(self.resync).min(self.resync)
    }

    fn failed(&mut self) {
        self.failed = Some(match self.failed {
            None => Self::FIRST,
            Some(d) => (d * 2).min(Self::MOST),
        });
    }

    fn failing(&self) -> bool {
        self.failed.is_some()
    }

    fn succeeded(&mut self) {
        self.failed = None;
    }
}

/// How often the publisher looks without being woken.
#[derive(Debug, Clone, Copy)]
pub struct Cadence {
    /// The driver's devices asked for (a local read: sysfs for vp2p).
    pub resync: Duration,
    /// The API server's copy compared with what was published (a LIST),
    /// when no watch event asked for it sooner.
    pub verify: Duration,
}

/// Who is told of each publication: the readiness probe (the first one)
/// and the metrics.
#[derive(Debug, Clone)]
pub struct Told {
    /// Ready once the slices are published.
    pub health: Arc<super::health::Health>,
    /// Counts publications and the devices published.
    pub metrics: Arc<super::metrics::Metrics>,
}

/// What wakes the publisher besides its timer.
#[derive(Debug, Clone)]
pub struct Wakers {
    /// The driver's devices changed (vp2p: a kernel uevent of a PCI function).
    pub devices_changed: Arc<tokio::sync::Notify>,
    /// An event of the slices' watch: the API server's copy may differ.
    pub api_changed: Arc<tokio::sync::Notify>,
}

/// What woke the publisher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Woken {
    Timer,
    Devices,
    Api,
}
