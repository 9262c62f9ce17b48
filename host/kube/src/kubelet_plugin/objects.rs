//! Where vp2p's `resource.k8s.io/v1` types meet the API server's JSON.
//!
//! The API has one model in vp2p: its own ([`ResourceSlice`],
//! [`ResourceClaim`] of p2p-allocation), the fields the driver writes and
//! reads, each cited to the published API. The pure crates build and read
//! these objects without a Kubernetes client (`p2p-host dra slices --json`,
//! the fuzzers, the property tests), and their JSON shape is tested against
//! the real API server (tests/tests/kubernetes/). So the plugin talks to the
//! API server through kube's dynamic API ([`DynamicObject`], group
//! `resource.k8s.io`, version `v1`) and maps to and from those types here:
//! the server's metadata (resource version, uid, owners, managed fields) is
//! read from the object's `metadata`, and only a slice's `spec` and a
//! claim's `status` go into vp2p's types. There is no second model of the
//! API (k8s-openapi's) and no conversion between two; the core types
//! (ObjectMeta, OwnerReference, Node) are k8s-openapi's.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ApiResource, DynamicObject};
use p2p_allocation::dra::claim::{ClaimMeta, ResourceClaim};
use p2p_allocation::dra::ResourceSlice;
use serde_json::Value;

/// The API group of ResourceSlices and ResourceClaims.
pub const GROUP: &str = "resource.k8s.io";

/// The group's version vp2p speaks (GA since Kubernetes 1.34).
pub const VERSION: &str = "v1";

/// `resource.k8s.io/v1` `kind`, whose resource is `plural`.
fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// ResourceSlices, as kube's dynamic API names them.
pub fn slices() -> ApiResource {
    resource("ResourceSlice", "resourceslices")
}

/// ResourceClaims, as kube's dynamic API names them.
pub fn claims() -> ApiResource {
    resource("ResourceClaim", "resourceclaims")
}

/// The object's `spec`, as the API server sent it (null when it has none).
pub fn spec(o: &DynamicObject) -> &Value {
    o.data.get("spec").unwrap_or(&Value::Null)
}

/// Whether the slice `o` is `driver`'s on `node`.
pub fn is_of(o: &DynamicObject, node: &str, driver: &str) -> bool {
    spec(o)["driver"] == driver && spec(o)["nodeName"] == node
}

/// The slice's pool generation, if it has one.
pub fn generation(o: &DynamicObject) -> Option<i64> {
    spec(o)["pool"]["generation"].as_i64()
}

/// A slice's `spec` as compared with another's: its pool generation left
/// out, and null fields left out (the API's JSON omits what is unset).
fn comparable(spec: &Value) -> Value {
    fn strip(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| (k.clone(), strip(v)))
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(strip).collect()),
            v => v.clone(),
        }
    }
    let mut spec = strip(spec);
    if let Some(pool) = spec.get_mut("pool").and_then(|p| p.as_object_mut()) {
        pool.remove("generation");
    }
    spec
}

/// Whether the API server's slice `theirs` has the spec of `ours`, the pool
/// generation aside (its metadata is not compared: the server adds to it).
pub fn same_spec(ours: &ResourceSlice, theirs: &DynamicObject) -> serde_json::Result<bool> {
    Ok(comparable(&serde_json::to_value(&ours.spec)?) == comparable(spec(theirs)))
}

/// `slice` as the API server takes it, owned by `owner` when given.
pub fn slice_object(
    slice: &ResourceSlice,
    owner: Option<&OwnerReference>,
) -> serde_json::Result<DynamicObject> {
    let mut obj = DynamicObject::new(&slice.metadata.name, &slices());
    obj.metadata.owner_references = owner.map(|o| vec![o.clone()]);
    obj.data = serde_json::json!({ "spec": serde_json::to_value(&slice.spec)? });
    Ok(obj)
}

/// The claim the API server sent: who it is from its metadata, its
/// allocation from its `status` (none yet without one).
pub fn claim(obj: DynamicObject) -> serde_json::Result<ResourceClaim> {
    let status = match obj.data.get("status") {
        None | Some(Value::Null) => Default::default(),
        Some(s) => serde_json::from_value(s.clone())?,
    };
    let m = obj.metadata;
    Ok(ResourceClaim {
        metadata: ClaimMeta {
            name: m.name.unwrap_or_default(),
            namespace: m.namespace.unwrap_or_default(),
            uid: m.uid.unwrap_or_default(),
            annotations: m.annotations.unwrap_or_default(),
        },
        status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// One slice as `p2p-host dra slices --json` prints it.
    fn ours() -> ResourceSlice {
        serde_json::from_value(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": "node-a-gpu.vp2p.io-0"},
            "spec": {"driver": "gpu.vp2p.io", "nodeName": "node-a",
                     "pool": {"name": "node-a", "generation": 3, "resourceSliceCount": 1},
                     "devices": [{"name": "gpu-0000-27-00-0", "attributes": {
                         "resource.kubernetes.io/pciBusID": {"string": "0000:27:00.0"},
                         "gpu.vp2p.io/iommuGroup": {"int": 10}}}]}
        }))
        .unwrap()
    }

    fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: "node-a".into(),
            uid: "6e1f".into(),
            controller: Some(true),
            block_owner_deletion: None,
        }
    }

    /// What is sent is the slice's own JSON, owned by the Node: the hand
    /// model is the wire's shape.
    #[test]
    fn a_slice_is_sent_as_its_own_json_with_its_owner() {
        let s = ours();
        let sent = serde_json::to_value(slice_object(&s, Some(&owner())).unwrap()).unwrap();
        let mut want = serde_json::to_value(&s).unwrap();
        want["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "6e1f",
                    "controller": true}]);
        assert_eq!(sent, want);
        let unowned = serde_json::to_value(slice_object(&s, None).unwrap()).unwrap();
        assert_eq!(unowned, serde_json::to_value(&s).unwrap());
    }

    /// The server's copy, with the metadata it adds, another pool
    /// generation and unset fields as null, holds the same spec; an edit of
    /// an attribute or a device gone does not.
    #[test]
    fn the_servers_copy_is_compared_by_spec_without_the_generation() {
        let s = ours();
        let mut theirs = serde_json::to_value(slice_object(&s, Some(&owner())).unwrap()).unwrap();
        theirs["metadata"]["resourceVersion"] = json!("4711");
        theirs["metadata"]["uid"] = json!("9a0c");
        theirs["metadata"]["managedFields"] = json!([{"manager": "p2p-host"}]);
        theirs["spec"]["pool"]["generation"] = json!(7);
        theirs["spec"]["nodeSelector"] = Value::Null;
        let read = |v: &Value| serde_json::from_value::<DynamicObject>(v.clone()).unwrap();
        assert!(same_spec(&s, &read(&theirs)).unwrap());
        assert_eq!(generation(&read(&theirs)), Some(7));
        assert!(is_of(&read(&theirs), "node-a", "gpu.vp2p.io"));
        assert!(!is_of(&read(&theirs), "node-b", "gpu.vp2p.io"));
        let mut edited = theirs.clone();
        edited["spec"]["devices"][0]["attributes"]["gpu.vp2p.io/iommuGroup"] = json!({"int": 11});
        assert!(!same_spec(&s, &read(&edited)).unwrap());
        let mut emptied = theirs;
        emptied["spec"]["devices"] = json!([]);
        assert!(!same_spec(&s, &read(&emptied)).unwrap());
    }

    /// A claim as the API server sends it reads as vp2p's: who it is from
    /// the metadata, its devices from the status; without a status, none.
    #[test]
    fn a_claim_reads_from_its_metadata_and_status() {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "vm-gpus", "namespace": "vms", "uid": "7d2f",
                         "resourceVersion": "12",
                         "annotations": {"resource.kubernetes.io/pod-claim-name": "gpus"}},
            "spec": {"devices": {"requests": [{"name": "gpu0"}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu0", "driver": "gpu.vp2p.io", "pool": "node-a",
                 "device": "gpu-0000-27-00-0"}]}}}
        }))
        .unwrap();
        let c = claim(obj).unwrap();
        assert_eq!(
            (c.display_name(), c.metadata.uid.as_str()),
            ("vms/vm-gpus".to_string(), "7d2f")
        );
        assert_eq!(c.metadata.annotations.len(), 1);
        assert_eq!(c.results()[0].device, "gpu-0000-27-00-0");
        let pending: DynamicObject = serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "vms", "uid": "u"}, "spec": {}
        }))
        .unwrap();
        assert!(claim(pending).unwrap().results().is_empty());
    }
}
