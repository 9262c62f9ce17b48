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
use super::metrics::Call;

/// The Event's `action` and `reason` for a failed `call`.
fn action_reason(call: Call) -> (&'static str, &'static str) {
    match call {
        Call::Prepare => ("PrepareResources", "PrepareFailed"),
        Call::Unprepare => ("UnprepareResources", "UnprepareFailed"),
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

impl ClaimEvents {
    /// Events of driver `driver` on node `node`, written through `api`.
    pub fn new(api: ApiServer, driver: &str, node: &str, log: fn(&str)) -> Self {
        Self {
            api,
            // The API server takes at most 128 bytes of each.
            controller: crate::grpc::head(driver, 128).to_string(),
            instance: crate::grpc::head(&format!("{driver}/{node}"), 128).to_string(),
            log,
        }
    }

    /// Tells the failed `call` on `claim` with `note` (the driver's message): an
    /// Event regarding the claim, and one regarding each pod its status
    /// reserves it for (read now; none when the claim cannot be read).
    pub async fn failed(&self, claim: &ClaimRef, call: Call, note: &str) {
        let regarding = ObjectReference {
            api_version: Some("resource.k8s.io/v1".into()),
            kind: Some("ResourceClaim".into()),
            namespace: Some(claim.namespace.clone()),
            name: Some(claim.name.clone()),
            uid: Some(claim.uid.clone()),
            ..Default::default()
        };
        let mut events = vec![self.event(claim, call, note, regarding.clone(), None, 0)];
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
                    events.push(self.event(claim, call, note, pod, Some(regarding.clone()), n));
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
        call: Call,
        note: &str,
        regarding: ObjectReference,
        related: Option<ObjectReference>,
        n: usize,
    ) -> Event {
        let (action, reason) = action_reason(call);
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
            // The API server takes at most 1 kB of a note, a gRPC message's
            // bound too.
            note: Some(crate::grpc::bounded(note)),
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
