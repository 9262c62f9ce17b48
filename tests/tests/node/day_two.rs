//! Day two on a real node. A node rebooted with a pod's claim prepared: the
//! reboot empties `/var/run` (the claim's CDI spec, its device metadata)
//! and the kernel forgets the vfio-pci binding; the driver's checkpoint, on
//! disk under the kubelet's root, still says the claim is prepared. The
//! kubelet starts the pod again and asks the driver to prepare; the pod's
//! container must come back with its devices. Then the device fails under
//! the running pod (its function taken off vfio-pci): the real kubelet,
//! told through the driver's health stream (KEP-4680), must show it
//! Unhealthy in the pod's status, with the driver's reason. Expectations
//! from the node's kernel (drivers, IOMMU groups), the API server (the
//! allocation, the pod's status) and the container's OCI spec as containerd
//! holds it.

use std::time::{Duration, Instant};

use p2p_tests::kube::ControlPlane;
use p2p_tests::sandbox_node::{
    boot_node, driver_pod_ready, helm_install, one_node_at_a_time, poll, try_get,
};

/// A claim for one stand-in GPU and a pod holding it (the pause image,
/// started again whenever its sandbox is made anew).
const HELD: &str = r#"apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: held
  namespace: default
spec:
  devices:
    requests:
      - name: gpu
        exactly:
          deviceClassName: vp2p-gpu
---
apiVersion: v1
kind: Pod
metadata:
  name: held
  namespace: default
spec:
  resourceClaims:
    - name: gpu
      resourceClaimName: held
  containers:
    - name: hold
      image: localhost/vp2p/pause:0.1.0
      resources:
        claims: [{name: gpu}]
"#;

/// The running `hold` container's id, once there is one other than `not`.
fn running_hold(cp: &ControlPlane, not: Option<&str>) -> Option<String> {
    let p = try_get(cp, &["pod", "held"])?;
    let c = p["status"]["containerStatuses"].as_array()?.first()?;
    let id = c["containerID"].as_str()?;
    (c["state"]["running"].is_object() && Some(id) != not).then(|| id.to_string())
}

#[test]
fn a_prepared_claim_survives_a_reboot_and_its_devices_health_reaches_the_pod() {
    let _one = one_node_at_a_time();
    let t0 = Instant::now();
    let step = |what: &str| eprintln!("[{:>6.1} s] {what}", t0.elapsed().as_secs_f64());
    let (cp, node) = boot_node("node-reboot", false);
    step("node Ready");
    helm_install(&cp);
    driver_pod_ready(&cp, Duration::from_secs(300));
    step("driver pod Ready");

    cp.apply(HELD).expect("claim and pod held");
    let first = poll(
        "held's container runs",
        Duration::from_secs(300),
        || running_hold(&cp, None),
        || {
            cp.try_kubectl(&["describe", "pod", "held"])
                .unwrap_or_else(|e| e)
        },
    );
    let claim = cp.get_json(&["get", "resourceclaim", "held"]);
    let device = claim["status"]["allocation"]["devices"]["results"][0]["device"]
        .as_str()
        .unwrap()
        .to_string();
    // vp2p names a GPU after its address: gpu-0000-03-00-0 is 0000:03:00.0.
    let bdf = {
        let d: Vec<&str> = device.trim_start_matches("gpu-").split('-').collect();
        format!("{}:{}:{}.{}", d[0], d[1], d[2], d[3])
    };
    let group = format!("/dev/vfio/{}", node.iommu_group(&bdf));
    assert_eq!(node.driver_of(&bdf), "vfio-pci");
    assert!(node.oci_devices(&first).contains(&group));
    let uid = claim["metadata"]["uid"].as_str().unwrap().to_string();
    assert!(node
        .sh("ls /var/run/cdi")
        .contains(&format!("gpu.vp2p.io-{uid}.json")));
    step(&format!("held runs with {bdf} ({group})"));

    let seconds = node.reboot(&cp, Duration::from_secs(600));
    step(&format!("node rebooted, Ready again after {seconds:.1} s"));
    let again = poll(
        "held's container runs again after the reboot",
        Duration::from_secs(420),
        || running_hold(&cp, Some(&first)),
        || node.pod_context(&cp, "held"),
    );
    step("held's container runs again");
    let log = node.driver_log();
    assert!(
        log.contains(&format!(
            "claim default/held (uid {uid}): prepared before, but "
        )) && log.contains("(a reboot?): preparing it again"),
        "{log}"
    );
    assert_eq!(node.driver_of(&bdf), "vfio-pci", "{bdf} bound again");
    assert_eq!(
        node.iommu_group(&bdf).to_string(),
        group["/dev/vfio/".len()..]
    );
    let devices = node.oci_devices(&again);
    assert!(devices.contains(&group), "{group} in {devices:?}");
    assert!(node
        .sh("ls /var/run/cdi")
        .contains(&format!("gpu.vp2p.io-{uid}.json")));

    // Healthy as the kubelet shows it, then the function taken off
    // vfio-pci under the running pod: Unhealthy, with the driver's reason.
    let resource_health = |cp: &ControlPlane| -> Option<(String, String)> {
        let p = try_get(cp, &["pod", "held"])?;
        let r = &p["status"]["containerStatuses"][0]["allocatedResourcesStatus"][0];
        let h = &r["resources"][0];
        Some((
            h["health"].as_str()?.to_string(),
            h["message"].as_str().unwrap_or_default().to_string(),
        ))
    };
    let status = |cp: &ControlPlane| {
        try_get(cp, &["pod", "held"]).map_or(String::new(), |p| {
            serde_json::to_string_pretty(&p["status"]["containerStatuses"]).unwrap()
        })
    };
    poll(
        "held's device Healthy in its status",
        Duration::from_secs(120),
        || (resource_health(&cp)?.0 == "Healthy").then_some(()),
        || status(&cp),
    );
    let failed = Instant::now();
    node.sh(&format!(
        "echo {bdf} > /sys/bus/pci/devices/{bdf}/driver/unbind"
    ));
    let (_, message) = poll(
        "held's device Unhealthy in its status",
        Duration::from_secs(120),
        || resource_health(&cp).filter(|(h, _)| h == "Unhealthy"),
        || status(&cp),
    );
    let told = failed.elapsed().as_secs_f64();
    step(&format!(
        "device unbound: Unhealthy in the pod's status {told:.1} s later"
    ));
    assert_eq!(
        message,
        format!("{bdf} is bound to no driver, not vfio-pci")
    );
    let resource = cp.get_json(&["get", "pod", "held"])["status"]["containerStatuses"][0]
        ["allocatedResourcesStatus"][0]
        .clone();
    assert_eq!(resource["name"], "claim:gpu", "{resource}");

    cp.kubectl(&["delete", "pod", "held", "--timeout=300s"]);
    cp.kubectl(&["delete", "resourceclaim", "held", "--timeout=120s"]);
    poll(
        "the claim unprepared",
        Duration::from_secs(120),
        || {
            node.driver_log()
                .contains(&format!("unprepared claim default/held (uid {uid})"))
                .then_some(())
        },
        || node.driver_log(),
    );
    assert_ne!(node.driver_of(&bdf), "vfio-pci");
    eprintln!(
        "day two: node Ready again {seconds:.1} s after `systemctl reboot`; a failed device \
         Unhealthy in the pod's status {told:.1} s after; whole test {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}
