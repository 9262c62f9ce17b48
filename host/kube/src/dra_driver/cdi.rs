//! The CDI spec the driver writes for a prepared claim (Container Device
//! Interface, <https://github.com/cncf-tags/container-device-interface/blob/v1.1.0/SPEC.md>,
//! tag v1.1.0, commit 98a7d735d9592c1ccca0130e06b0709f4b65ecbf): one spec
//! file per claim, kind `<driver>/vfio`, a device per allocated device
//! (the VFIO device nodes) and one per request (its device metadata file,
//! bind-mounted read-only where the KEP-5304 protocol puts it).

use std::path::{Path, PathBuf};

use p2p_allocation::dra::claim::{ResourceClaim, POD_CLAIM_NAME_ANNOTATION};
use serde_json::{json, Value};

/// The CDI version the specs declare: the oldest with every field used
/// (`hostPath` in mounts is v0.3.0; names starting with a digit, as a claim
/// uid may, need v0.5.0; v0.6.0 is what containerd 1.7 and CRI-O 1.28 read).
pub const CDI_VERSION: &str = "0.6.0";

/// The CDI class of vp2p's devices (the name segment of `kind`).
pub const CLASS: &str = "vfio";

/// Where device metadata appears in containers (the protocol's root).
pub const METADATA_ROOT: &str = "/var/run/kubernetes.io/dra-device-attributes";

/// The CDI device name of one allocated device of a claim.
pub fn device_name(claim_uid: &str, device: &str) -> String {
    format!("{claim_uid}-{device}")
}

/// The CDI device name of a request's device metadata.
pub fn metadata_name(claim_uid: &str, request: &str) -> String {
    format!("{claim_uid}-{request}-metadata")
}

/// A fully qualified CDI device id, `<driver>/vfio=<name>`.
pub fn qualified(driver: &str, name: &str) -> String {
    format!("{driver}/{CLASS}={name}")
}

/// The claim's spec file in `cdi_dir`.
pub fn spec_path(cdi_dir: &Path, driver: &str, claim_uid: &str) -> PathBuf {
    cdi_dir.join(format!("{driver}-{claim_uid}.json"))
}

/// Where a request's metadata file appears in the container: under
/// `resourceclaimtemplates/<podClaimName>` for a claim made from a template,
/// `resourceclaims/<claimName>` otherwise, then `<request>/<driver>-metadata.json`.
pub fn metadata_container_path(claim: &ResourceClaim, request: &str, driver: &str) -> String {
    let base = match claim.metadata.annotations.get(POD_CLAIM_NAME_ANNOTATION) {
        Some(p) => format!("resourceclaimtemplates/{p}"),
        None => format!("resourceclaims/{}", claim.metadata.name),
    };
    format!("{METADATA_ROOT}/{base}/{request}/{driver}-metadata.json")
}

/// The spec: `nodes` (CDI name, device node paths) and `mounts` (CDI name,
/// host file, container path).
pub fn spec(
    driver: &str,
    nodes: &[(String, Vec<String>)],
    mounts: &[(String, PathBuf, String)],
) -> Value {
    let mut devices: Vec<Value> = nodes
        .iter()
        .map(|(name, paths)| {
            json!({
                "name": name,
                "containerEdits": {
                    "deviceNodes": paths.iter().map(|p| json!({"path": p})).collect::<Vec<_>>(),
                },
            })
        })
        .collect();
    devices.extend(mounts.iter().map(|(name, host, container)| {
        json!({
            "name": name,
            "containerEdits": {
                "mounts": [{
                    "hostPath": host.display().to_string(),
                    "containerPath": container,
                    "options": ["ro", "bind"],
                }],
            },
        })
    }));
    json!({
        "cdiVersion": CDI_VERSION,
        "kind": format!("{driver}/{CLASS}"),
        "devices": devices,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(annotations: &str) -> ResourceClaim {
        serde_json::from_str(&format!(
            r#"{{"metadata": {{"name": "gpus", "namespace": "vms", "uid": "u", "annotations": {annotations}}}}}"#
        ))
        .unwrap()
    }

    #[test]
    fn metadata_paths_follow_the_protocol_for_claims_and_templates() {
        assert_eq!(
            metadata_container_path(&claim("{}"), "gpu0", "gpu.vp2p.io"),
            "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/gpus/gpu0/gpu.vp2p.io-metadata.json"
        );
        let from_template = claim(r#"{"resource.kubernetes.io/pod-claim-name": "peers"}"#);
        assert_eq!(
            metadata_container_path(&from_template, "gpu0", "gpu.vp2p.io"),
            "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/peers/gpu0/gpu.vp2p.io-metadata.json"
        );
    }

    #[test]
    fn ids_are_kind_equals_name() {
        assert_eq!(
            qualified("gpu.vp2p.io", &device_name("3f6c", "gpu-0000-27-00-0")),
            "gpu.vp2p.io/vfio=3f6c-gpu-0000-27-00-0"
        );
        assert_eq!(metadata_name("3f6c", "gpu0"), "3f6c-gpu0-metadata");
    }
}
