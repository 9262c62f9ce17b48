//! A VM pod's life on the fleet: created for the real kube-scheduler to
//! place, its claim's devices read back, and deleted when the VM leaves.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use super::{from, Cluster};

/// CPUs and memory a VM pod asks for per GPU (a KubeVirt VM's launcher asks
/// for its VM's).
const CPU_PER_GPU: u32 = 14;
const MEMORY_GI_PER_GPU: u32 = 120;
/// The label a VM pod carries with its policy's name (the scheduler
/// extender, when the run has one, scores only vp2p's and kubevirt's).
pub const POLICY_LABEL: &str = "fleet.vp2p.io/policy";

/// How long one pod may take before it counts as rejected.
pub const POD_LIMIT: Duration = Duration::from_secs(120);

/// What became of one VM pod.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Bound to a node; the claim's results as (request, device name, driver).
    Bound {
        /// The node.
        node: String,
        /// Its ResourceClaim (made from the template).
        claim: String,
        /// (request, device, driver) of each allocated device.
        devices: Vec<(String, String, String)>,
        /// From creating the pod to seeing it bound.
        took: Duration,
    },
    /// The scheduler found no node.
    Rejected {
        /// Its last message.
        why: String,
        /// From creating the pod to seeing it refused.
        took: Duration,
    },
}

/// One VM pod's result and the scheduler errors it met on the way.
#[derive(Debug, Clone)]
pub struct PodResult {
    /// Bound or rejected.
    pub outcome: Outcome,
    /// Scheduling attempts that ended in the DRA filter's timeout.
    pub filter_timeouts: u32,
}
impl Cluster {
    /// Creates a VM pod of `gpus` GPUs whose claim comes from `template`,
    /// and waits until the scheduler bound it or found no node for it.
    pub async fn place(
        &mut self,
        name: &str,
        gpus: u8,
        template: &str,
        policy: &str,
    ) -> Result<PodResult, String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        let n = u32::from(gpus);
        let pod = from(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"fleet.vp2p.io/vm": "true", POLICY_LABEL: policy}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "compute", "image": "registry.invalid/vm:1",
                "resources": {
                    "requests": {"cpu": (n * CPU_PER_GPU).to_string(),
                                 "memory": format!("{}Gi", n * MEMORY_GI_PER_GPU)},
                    "claims": [{"name": "devices"}]}}],
            "resourceClaims": [{"name": "devices", "resourceClaimTemplateName": template}],
        }}))?;
        let start = Instant::now();
        pods.create(&PostParams::default(), &pod)
            .await
            .map_err(|e| format!("pod {name}: {e}"))?;
        let mut filter_timeouts = 0;
        let mut seen_errors = std::collections::BTreeSet::new();
        loop {
            let left = POD_LIMIT.saturating_sub(start.elapsed());
            let ev = match tokio::time::timeout(left, self.events.recv()).await {
                Ok(Some(p)) => p,
                Ok(None) => return Err("the pod watch ended".into()),
                Err(_) => {
                    return Ok(PodResult {
                        outcome: Outcome::Rejected {
                            why: format!("not placed within {} s", POD_LIMIT.as_secs()),
                            took: start.elapsed(),
                        },
                        filter_timeouts,
                    })
                }
            };
            if ev.metadata.name.as_deref() != Some(name) {
                continue;
            }
            if let Some(node) = ev.spec.as_ref().and_then(|s| s.node_name.clone()) {
                let took = start.elapsed();
                let (claim, devices) = self.allocated(&ev).await?;
                return Ok(PodResult {
                    outcome: Outcome::Bound {
                        node,
                        claim,
                        devices,
                        took,
                    },
                    filter_timeouts,
                });
            }
            let cond = ev
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| {
                    c.iter()
                        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                });
            if let Some(c) = cond {
                let msg = c.message.clone().unwrap_or_default();
                if msg.contains("timed out trying to allocate devices")
                    && seen_errors.insert(msg.clone())
                {
                    filter_timeouts += 1;
                }
                if c.reason.as_deref() == Some("Unschedulable") {
                    return Ok(PodResult {
                        outcome: Outcome::Rejected {
                            why: msg,
                            took: start.elapsed(),
                        },
                        filter_timeouts,
                    });
                }
            }
        }
    }

    /// `pod`'s claim and its devices: (request, device, driver).
    #[allow(clippy::type_complexity)]
    async fn allocated(
        &self,
        pod: &Pod,
    ) -> Result<(String, Vec<(String, String, String)>), String> {
        let claim = pod
            .status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.as_ref())
            .and_then(|c| c.first())
            .and_then(|c| c.resource_claim_name.clone())
            .ok_or_else(|| format!("pod {:?} is bound without a claim", pod.metadata.name))?;
        let api: Api<ResourceClaim> = Api::namespaced(self.client.clone(), &self.ns);
        let c = api
            .get(&claim)
            .await
            .map_err(|e| format!("claim {claim}: {e}"))?;
        let results = c
            .status
            .and_then(|s| s.allocation)
            .map(|a| a.devices.and_then(|d| d.results).unwrap_or_default())
            .ok_or_else(|| format!("claim {claim} of a bound pod is not allocated"))?;
        Ok((
            claim,
            results
                .into_iter()
                .map(|r| (r.request, r.device, r.driver))
                .collect(),
        ))
    }

    /// Deletes VM pod `name` and waits until its claim `claim` is gone (the
    /// ResourceClaim controller deletes a claim made for a pod with the
    /// pod), so that the next arrival finds its devices free, as it would
    /// after the VM left.
    pub async fn leave(&self, name: &str, claim: &str) -> Result<(), String> {
        self.remove(name).await?;
        let claims: Api<ResourceClaim> = Api::namespaced(self.client.clone(), &self.ns);
        let start = Instant::now();
        loop {
            match claims.get_opt(claim).await {
                Ok(None) => return Ok(()),
                Ok(Some(_)) => {}
                Err(e) => return Err(format!("claim {claim}: {e}")),
            }
            if start.elapsed() > Duration::from_secs(60) {
                return Err(format!(
                    "claim {claim} of the VM that left ({name}) still there after 60 s"
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Deletes VM pod `name` at once (no kubelet would confirm it), which gives its claim back.
    pub async fn remove(&self, name: &str) -> Result<(), String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        match pods
            .delete(
                name,
                &DeleteParams {
                    grace_period_seconds: Some(0),
                    ..Default::default()
                },
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.to_string().contains("NotFound") || e.to_string().contains("not found") => {
                Ok(())
            }
            Err(e) => Err(format!("deleting pod {name}: {e}")),
        }
    }

    /// Deletes every VM pod and waits until no claim of the namespace is
    /// left, so the next policy starts on an empty fleet.
    pub async fn clear(&self) -> Result<(), String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        // A collection of hundreds of pods, on a busy machine: the call may
        // fail on the wire while the server goes on; it is safe to repeat.
        let mut tries = 0;
        while let Err(e) = pods.delete_collection(&dp, &ListParams::default()).await {
            tries += 1;
            if tries == 5 {
                return Err(format!("deleting pods (5 tries): {e}"));
            }
            eprintln!("fleet: deleting pods: {e}; again in 2 s");
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let claims: Api<ResourceClaim> = Api::namespaced(self.client.clone(), &self.ns);
        let start = Instant::now();
        loop {
            let left = claims
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let pods_left = pods
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            if left.items.is_empty() && pods_left.items.is_empty() {
                return Ok(());
            }
            if start.elapsed() > Duration::from_secs(300) {
                return Err(format!(
                    "{} claim(s) and {} pod(s) still there after 5 minutes",
                    left.items.len(),
                    pods_left.items.len()
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    /// Drops pod events already received (those of pods now gone).
    pub fn drain_events(&mut self) {
        while self.events.try_recv().is_ok() {}
    }
}

/// Devices of one bound VM by kind: GPU names, NIC name, and the alternative
/// of the prioritized list each request got (request "gpus/switch" -> "switch").
pub fn split_devices(
    devices: &[(String, String, String)],
) -> (Vec<String>, Option<String>, BTreeMap<String, String>) {
    let (mut gpus, mut nic, mut tiers) = (Vec::new(), None, BTreeMap::new());
    for (req, dev, _) in devices {
        let (base, tier) = req.split_once('/').unwrap_or((req.as_str(), "-"));
        tiers.insert(base.to_string(), tier.to_string());
        if base == "nic" {
            nic = Some(dev.clone());
        } else {
            gpus.push(dev.clone());
        }
    }
    (gpus, nic, tiers)
}
