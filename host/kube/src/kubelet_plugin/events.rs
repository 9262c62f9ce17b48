//! What `kubectl describe` shows an operator when a claim fails on the
//! node: an Event (`events.k8s.io/v1`, type Warning) regarding the
//! ResourceClaim, and one regarding each pod the claim is reserved for,
//! each with the reason the driver logged. Events are best effort: one that
//! cannot be written is logged, and the kubelet's answer never waits for it.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use serde_json::Value;

use super::api_server::ApiServer;
use super::claims::ClaimRef;

/// The most an Event's note holds (the API server refuses more than 1 kB).
const NOTE_MAX: usize = 1024;

/// A failed call on a claim, as its Event names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// NodePrepareResources failed.
    Prepare,
    /// NodeUnprepareResources failed.
    Unprepare,
}

impl Failure {
    /// The Event's `action` and `reason`.
    pub fn action_reason(self) -> (&'static str, &'static str) {
        match self {
            Failure::Prepare => ("PrepareResources", "PrepareFailed"),
            Failure::Unprepare => ("UnprepareResources", "UnprepareFailed"),
        }
    }
}

/// Writes the Events of one node's plugin.
#[derive(Clone)]
pub struct ClaimEvents {
    api: ApiServer,
    /// `reportingController`: the driver's name.
    controller: String,
    /// `reportingInstance`: the driver on this node.
    instance: String,
    log: fn(&str),
}

impl std::fmt::Debug for ClaimEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimEvents")
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

/// `text` cut to at most `max` bytes on a character boundary.
fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max - 3;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

impl ClaimEvents {
    /// Events of driver `driver` on node `node`, written through `api`.
    pub fn new(api: ApiServer, driver: &str, node: &str, log: fn(&str)) -> Self {
        Self {
            api,
            controller: bounded(driver, 128),
            instance: bounded(&format!("{driver}/{node}"), 128),
            log,
        }
    }

    /// Tells `failure` of `claim` with `note` (the driver's message): an
    /// Event regarding the claim, and one regarding each pod its status
    /// reserves it for (read now; none when the claim cannot be read).
    pub async fn failed(&self, claim: &ClaimRef, failure: Failure, note: &str) {
        let regarding = ObjectReference {
            api_version: Some("resource.k8s.io/v1".into()),
            kind: Some("ResourceClaim".into()),
            namespace: Some(claim.namespace.clone()),
            name: Some(claim.name.clone()),
            uid: Some(claim.uid.clone()),
            ..Default::default()
        };
        let mut events = vec![self.event(claim, failure, note, regarding.clone(), None, 0)];
        match self.api.claim_object(&claim.namespace, &claim.name).await {
            Ok(object) if object.metadata.uid.as_deref() == Some(claim.uid.as_str()) => {
                for (name, uid) in reserved_pods(&object.data) {
                    let pod = ObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("Pod".into()),
                        namespace: Some(claim.namespace.clone()),
                        name: Some(name),
                        uid: Some(uid),
                        ..Default::default()
                    };
                    let n = events.len();
                    events.push(self.event(claim, failure, note, pod, Some(regarding.clone()), n));
                }
            }
            Ok(_) => {}
            Err(e) => (self.log)(&format!("{claim}: the pods to tell of its failure: {e}")),
        }
        let api: Api<Event> = Api::namespaced(self.api.client(), &claim.namespace);
        for e in events {
            let what = e
                .regarding
                .as_ref()
                .and_then(|r| r.kind.clone())
                .unwrap_or_default();
            let made =
                tokio::time::timeout(self.api.timeout(), api.create(&PostParams::default(), &e))
                    .await;
            match made {
                Ok(Ok(_)) => {}
                Ok(Err(err)) => (self.log)(&format!("{claim}: an Event on its {what}: {err}")),
                Err(_) => (self.log)(&format!(
                    "{claim}: an Event on its {what}: no answer from the API server within {:?}",
                    self.api.timeout()
                )),
            }
        }
    }

    fn event(
        &self,
        claim: &ClaimRef,
        failure: Failure,
        note: &str,
        regarding: ObjectReference,
        related: Option<ObjectReference>,
        n: usize,
    ) -> Event {
        let (action, reason) = failure.action_reason();
        let now = k8s_openapi::chrono::Utc::now();
        // Named as client-go's recorders name theirs: the object's name and
        // the time in hex (here plus the event's index: a claim and its pod
        // often share a name and are told at once).
        let nanos = now.timestamp_nanos_opt().unwrap_or_default() as u64 + n as u64;
        Event {
            metadata: ObjectMeta {
                name: Some(format!(
                    "{}.{nanos:x}",
                    regarding.name.as_deref().unwrap_or(&claim.name)
                )),
                namespace: Some(claim.namespace.clone()),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            action: Some(action.into()),
            reason: Some(reason.into()),
            type_: Some("Warning".into()),
            note: Some(bounded(note, NOTE_MAX)),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            regarding: Some(regarding),
            related,
            ..Default::default()
        }
    }
}

/// The pods a claim's `status.reservedFor` names: (name, uid).
fn reserved_pods(data: &Value) -> Vec<(String, String)> {
    data["status"]["reservedFor"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["resource"] == "pods" && r["apiGroup"].as_str().unwrap_or("").is_empty())
        .filter_map(|r| {
            Some((
                r["name"].as_str()?.to_string(),
                r["uid"].as_str()?.to_string(),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_cut_to_the_api_servers_limit_on_a_character() {
        assert_eq!(bounded("short", 1024), "short");
        let long = "é".repeat(600); // 1200 bytes
        let b = bounded(&long, NOTE_MAX);
        assert!(b.len() <= NOTE_MAX && b.ends_with("..."), "{}", b.len());
    }

    #[test]
    fn the_reserved_pods_are_read_from_the_claims_status() {
        let data = serde_json::json!({"status": {"reservedFor": [
            {"resource": "pods", "name": "vm-a", "uid": "p1"},
            {"apiGroup": "example.com", "resource": "pods", "name": "x", "uid": "p2"},
            {"resource": "pods", "name": "vm-b", "uid": "p3"}]}});
        assert_eq!(
            reserved_pods(&data),
            [
                ("vm-a".to_string(), "p1".to_string()),
                ("vm-b".into(), "p3".into())
            ]
        );
    }
}
