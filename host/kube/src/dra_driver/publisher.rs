//! The node's ResourceSlices kept published: read from sysfs and published
//! as a new pool generation when the devices change (a timer and kernel
//! uevents), published again when the API server's copy differs (the slices'
//! watch), and adopted from an earlier run at start.

use std::sync::Arc;
use std::time::Duration;

use super::{api_server, build, Settings};

/// How long the publisher waits after a uevent before reading sysfs: a
/// bind is an unbind, a `driver_override` write and a probe in a row.
const SETTLE: Duration = Duration::from_millis(200);

/// Publishes the node's slices whenever its devices differ from those last
/// published (a GPU bound, unbound, appeared or gone: a new pool
/// generation) or the API server no longer holds them as published (deleted,
/// edited, or not owned by the Node), checking the devices every `resync`
/// and at once when `devices` is notified (a kernel uevent of a PCI
/// function), and the API server's copy at once when `api` is notified (an
/// event of the slices' watch: that check reads no sysfs), until `stop`; an
/// API server that fails is retried at the next check. The first
/// publication adopts the slices of an earlier run: the same names, the next
/// pool generation.
pub async fn publish_loop(
    api: api_server::ApiServer,
    settings: Settings,
    resync: Duration,
    devices_changed: Arc<tokio::sync::Notify>,
    api_changed: Arc<tokio::sync::Notify>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let (node, driver, log) = (
        settings.node_name.clone(),
        settings.driver_name.clone(),
        settings.log,
    );
    let mut generation = match api.generation(&node, &driver).await {
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
    let mut owner = None;
    // The devices and slices last published.
    let mut last: Option<(
        Vec<p2p_allocation::dra::Device>,
        Vec<p2p_allocation::dra::ResourceSlice>,
    )> = None;
    let mut api_only = false;
    loop {
        if owner.is_none() {
            match api.node_owner(&node).await {
                Ok(o) => owner = Some(o),
                Err(e) => log(&format!("the slices' owner: {e} (retried in {resync:?})")),
            }
        }
        let next = generation + 1;
        // What to publish, if anything: the devices read now, or (on an API
        // event) the last publication again.
        let candidate = if api_only {
            last.clone()
        } else {
            let s = settings.clone();
            match tokio::task::spawn_blocking(move || build(&s, next)).await {
                Ok(Ok((_, publication))) => {
                    Some((publication.devices().cloned().collect(), publication.slices))
                }
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
        if let Some((devices, mut slices)) = candidate {
            let changed = last.as_ref().map(|(d, _)| d) != Some(&devices);
            // Unchanged devices, but gone from the API server (the kubelet's
            // DRA manager deletes a node's slices when it starts) or edited
            // there: published again.
            let lost = !changed
                && match api.holds(&node, &driver, &slices, owner.as_ref()).await {
                    Ok(held) => !held,
                    Err(e) => {
                        log(&format!("reading the published slices: {e}"));
                        false
                    }
                };
            if lost {
                log("the API server no longer holds the published slices: publishing again");
            }
            if changed || lost {
                for s in &mut slices {
                    s.spec.pool.generation = next;
                }
                // The generation advances only once published: a retry after
                // a failure publishes the same one.
                match api.publish(&node, &driver, &slices, owner.as_ref()).await {
                    Ok(()) => {
                        generation = next;
                        log(&format!(
                            "published {} device(s) in {} slice(s), pool generation {generation}",
                            devices.len(),
                            slices.len()
                        ));
                        last = Some((devices, slices));
                    }
                    Err(e) => log(&format!("publishing: {e} (retried in {resync:?})")),
                }
            }
        }
        let woken = tokio::select! {
            _ = tokio::time::sleep(resync) => Woken::Timer,
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

/// What woke the publisher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Woken {
    Timer,
    Devices,
    Api,
}
