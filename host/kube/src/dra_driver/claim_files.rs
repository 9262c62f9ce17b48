//! What a prepared claim leaves on the node besides bound functions: one
//! CDI spec (the VFIO device nodes of each device, and each request's
//! metadata mount) and the KEP-5304 device metadata of each request, each
//! file written atomically. Files of different claims never share a path,
//! so claims write theirs at once.

use std::path::PathBuf;

use p2p_allocation::dra::claim::ResourceClaim;
use serde_json::json;

use super::allocation::Resolved;
use super::cdi;
use super::checkpoint::RecordedDevice;
use super::vfio::PciBus;
use super::Settings;
use crate::kubelet_plugin::checkpoint::write_atomic;
use crate::kubelet_plugin::{ClaimError, ClaimRef};

/// The devices' answers and the files written for them.
#[derive(Debug)]
pub struct Written {
    /// Each device's answer to the kubelet, with its PCI address.
    pub devices: Vec<RecordedDevice>,
    /// The files, CDI spec last.
    pub files: Vec<PathBuf>,
}

/// Writes the claim's device metadata and CDI spec. Files written before an
/// error stay for the caller's undo, which removes the claim's spec and
/// metadata directory by their names.
pub fn write(
    s: &Settings,
    bus: &PciBus,
    claim: &ClaimRef,
    object: &ResourceClaim,
    resolved: &[Resolved],
) -> Result<Written, ClaimError> {
    let driver = s.plugin.driver_name.as_str();
    let mut devices = Vec::new();
    let mut nodes = Vec::new();
    for r in resolved {
        if r.alloc.is_admin() {
            // Administrative access changes nothing and opens nothing: a
            // VFIO group is one process's at a time (the VM's), so the
            // device is described by its metadata only.
            devices.push(RecordedDevice {
                request: r.alloc.request.clone(),
                pool: r.alloc.pool.clone(),
                device: r.alloc.device.clone(),
                bdf: r.bdf.to_string(),
                cdi_ids: Vec::new(),
                admin_access: true,
            });
            continue;
        }
        let edits = if s.iommufd {
            let cdev = bus.wait_vfio_cdev(r.bdf, bus.timeout).ok_or_else(|| {
                ClaimError(format!(
                    "{claim}: device {} ({}): no vfio-dev/vfioN in sysfs after {:?} on vfio-pci (--iommufd needs a kernel with VFIO_DEVICE_CDEV)",
                    r.alloc.device, r.bdf, bus.timeout
                ))
            })?;
            vec![
                "/dev/iommu".to_string(),
                format!("/dev/vfio/devices/{cdev}"),
            ]
        } else {
            vec![
                "/dev/vfio/vfio".to_string(),
                format!("/dev/vfio/{}", r.group),
            ]
        };
        nodes.push((cdi::device_name(&claim.uid, &r.alloc.device), edits));
        devices.push(RecordedDevice {
            request: r.alloc.request.clone(),
            pool: r.alloc.pool.clone(),
            device: r.alloc.device.clone(),
            bdf: r.bdf.to_string(),
            cdi_ids: vec![cdi::qualified(
                driver,
                &cdi::device_name(&claim.uid, &r.alloc.device),
            )],
            admin_access: false,
        });
    }
    let mut files = Vec::new();
    let mut mounts = Vec::new();
    let mut requests: Vec<&str> = Vec::new();
    for r in resolved {
        if !requests.contains(&r.alloc.request.as_str()) {
            requests.push(&r.alloc.request);
        }
    }
    for request in requests {
        let top = request.split('/').next().unwrap_or(request);
        let of_request: Vec<&Resolved> = resolved
            .iter()
            .filter(|r| r.alloc.request == request)
            .collect();
        let host = s
            .metadata_dir
            .join(&claim.uid)
            .join(top)
            .join(format!("{driver}-metadata.json"));
        let doc = metadata(object, request, &of_request, generation(&host));
        let text = serde_json::to_vec_pretty(&doc).expect("JSON values serialize");
        write_atomic(&host, &text).map_err(|e| {
            ClaimError(format!(
                "{claim}: writing the device metadata {}: {e}",
                host.display()
            ))
        })?;
        files.push(host.clone());
        let name = cdi::metadata_name(&claim.uid, top);
        mounts.push((
            name.clone(),
            host,
            cdi::metadata_container_path(object, top, driver),
        ));
        // The request's first device carries its metadata mount.
        if let Some(d) = devices.iter_mut().find(|d| d.request == request) {
            d.cdi_ids.push(cdi::qualified(driver, &name));
        }
    }
    let spec = cdi::spec(driver, &nodes, &mounts);
    let path = cdi::spec_path(&s.cdi_dir, driver, &claim.uid);
    let text = serde_json::to_vec_pretty(&spec).expect("JSON values serialize");
    write_atomic(&path, &text).map_err(|e| {
        ClaimError(format!(
            "{claim}: writing the CDI spec {}: {e}",
            path.display()
        ))
    })?;
    files.push(path);
    Ok(Written { devices, files })
}

/// The generation the metadata at `host` is written at: 1 for a new file,
/// one more than the file's when it is written again (a claim prepared
/// again after its run died, or after its binding was lost), as
/// Kubernetes' kubelet-plugin library numbers a metadata stream
/// (k8s.io/dynamic-resource-allocation v0.37.2, kubeletplugin/metadata.go:
/// 1 at prepare, the previous plus one at each update), so a reader can
/// tell a rewrite from the file it read.
fn generation(host: &std::path::Path) -> i64 {
    let before = std::fs::read(host)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|d| d["metadata"]["generation"].as_i64());
    before.map_or(1, |g| g + 1)
}

/// The KEP-5304 device metadata of one request (`DeviceMetadata`,
/// `metadata.resource.k8s.io/v1alpha1`, as the Kubernetes documentation's
/// "Device metadata protocol" defines it): the claim, the request, and each
/// device with the attributes its ResourceSlice publishes, among them
/// `resource.kubernetes.io/pciBusID`, which KubeVirt reads to find the
/// function to pass through.
fn metadata(
    object: &ResourceClaim,
    request: &str,
    devices: &[&Resolved],
    generation: i64,
) -> serde_json::Value {
    let m = &object.metadata;
    let mut doc = json!({
        "kind": "DeviceMetadata",
        "apiVersion": "metadata.resource.k8s.io/v1alpha1",
        "metadata": {"name": m.name, "namespace": m.namespace, "uid": m.uid, "generation": generation},
        "requests": [{
            "name": request,
            "devices": devices.iter().map(|r| json!({
                "driver": r.alloc.driver,
                "pool": r.alloc.pool,
                "name": r.alloc.device,
                "attributes": r.published.attributes,
            })).collect::<Vec<_>>(),
        }],
    });
    if let Some(p) = m
        .annotations
        .get(p2p_allocation::dra::claim::POD_CLAIM_NAME_ANNOTATION)
    {
        doc["podClaimName"] = json!(p);
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The metadata's generation is 1 when first written and one more at
    /// each rewrite (the kubelet-plugin library's rule); a file that does
    /// not read starts again at 1.
    #[test]
    fn the_metadata_generation_counts_its_writes() {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("gpu.vp2p.io-metadata.json");
        assert_eq!(generation(&host), 1);
        let claim: ResourceClaim = serde_json::from_value(json!({
            "metadata": {"name": "vm", "namespace": "vms", "uid": "u1"}, "status": {}
        }))
        .unwrap();
        for want in 1..=3 {
            let doc = metadata(&claim, "gpu", &[], generation(&host));
            assert_eq!(
                doc["metadata"],
                json!({"name": "vm", "namespace": "vms", "uid": "u1", "generation": want})
            );
            std::fs::write(&host, doc.to_string()).unwrap();
        }
        std::fs::write(&host, "{").unwrap();
        assert_eq!(generation(&host), 1);
    }
}
