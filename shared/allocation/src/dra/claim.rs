//! The part of Kubernetes' `resource.k8s.io/v1` ResourceClaim the DRA driver
//! reads at prepare: who the claim is and which devices the scheduler
//! allocated to it. Field names and JSON shape from k8s.io/api resource/v1
//! types.go (kubernetes/api commit 426b1b9979354bee48c10e727c46eb9b5a7bbc95:
//! `ResourceClaimStatus.Allocation`, `AllocationResult.Devices`,
//! `DeviceAllocationResult.Results`, `DeviceRequestAllocationResult`). Fields
//! the driver does not use are ignored, so a full object from the API server
//! reads.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The annotation the ResourceClaim controller puts on a claim it made from
/// a pod's ResourceClaimTemplate: the pod's name for the claim
/// (`pod.spec.resourceClaims[].name`); the device metadata path uses it
/// (k8s.io/api resource/v1 `PodResourceClaimAnnotation`).
pub const POD_CLAIM_NAME_ANNOTATION: &str = "resource.kubernetes.io/pod-claim-name";

/// A ResourceClaim as the driver reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceClaim {
    /// Name, namespace, uid, annotations.
    pub metadata: ClaimMeta,
    /// The allocation, once the scheduler made one.
    #[serde(default)]
    pub status: ClaimStatus,
}

/// The claim's metadata the driver reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimMeta {
    /// The claim's name.
    pub name: String,
    /// Its namespace.
    #[serde(default)]
    pub namespace: String,
    /// Its uid (what the kubelet names it by).
    #[serde(default)]
    pub uid: String,
    /// Its annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// `ResourceClaimStatus`, the allocation only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimStatus {
    /// Absent until the claim is allocated.
    #[serde(default)]
    pub allocation: Option<Allocation>,
}

/// `AllocationResult`, the devices only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// The allocated devices.
    #[serde(default)]
    pub devices: DeviceAllocation,
}

/// `DeviceAllocationResult`, the results only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceAllocation {
    /// One entry per allocated device.
    #[serde(default)]
    pub results: Vec<AllocatedDevice>,
}

/// `DeviceRequestAllocationResult`: one device given to one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocatedDevice {
    /// The request (`<request>` or `<request>/<subrequest>`).
    pub request: String,
    /// The driver whose device it is.
    pub driver: String,
    /// The pool it is in (vp2p: the node's name).
    pub pool: String,
    /// Its name in the pool.
    pub device: String,
    /// Allocated for administrative access (`adminAccess`: monitoring or
    /// management that ignores other claims' access to the device).
    #[serde(
        default,
        rename = "adminAccess",
        skip_serializing_if = "Option::is_none"
    )]
    pub admin_access: Option<bool>,
}

impl AllocatedDevice {
    /// Whether the device was allocated for administrative access.
    pub fn is_admin(&self) -> bool {
        self.admin_access == Some(true)
    }
}

impl ResourceClaim {
    /// `namespace/name`, how messages name the claim.
    pub fn display_name(&self) -> String {
        format!("{}/{}", self.metadata.namespace, self.metadata.name)
    }

    /// The devices allocated to the claim (none when it is not allocated).
    pub fn results(&self) -> &[AllocatedDevice] {
        self.status
            .allocation
            .as_ref()
            .map_or(&[], |a| a.devices.results.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_claim_object_reads_and_its_results_are_the_allocation() {
        // Shaped as the API server answers (fields the driver does not read included).
        let text = r#"{
          "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
          "metadata": {"name": "vm-gpus", "namespace": "vms", "uid": "7d2f",
                       "annotations": {"resource.kubernetes.io/pod-claim-name": "gpus"},
                       "resourceVersion": "12"},
          "spec": {"devices": {"requests": []}},
          "status": {"allocation": {"devices": {"results": [
             {"request": "gpu0", "driver": "gpu.vp2p.io", "pool": "node-a",
              "device": "gpu-0000-23-00-0", "adminAccess": null}]},
             "nodeSelector": {}}}
        }"#;
        let c: ResourceClaim = serde_json::from_str(text).unwrap();
        assert_eq!(c.display_name(), "vms/vm-gpus");
        assert_eq!(c.metadata.annotations[POD_CLAIM_NAME_ANNOTATION], "gpus");
        assert_eq!(c.results().len(), 1);
        assert_eq!(c.results()[0].device, "gpu-0000-23-00-0");
        let unallocated: ResourceClaim =
            serde_json::from_str(r#"{"metadata": {"name": "x"}, "status": {}}"#).unwrap();
        assert!(unallocated.results().is_empty());
    }
}
