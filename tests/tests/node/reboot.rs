//! A node rebooted with a pod's claim prepared: the reboot empties
//! `/var/run` (the claim's CDI spec, its device metadata) and the kernel
//! forgets the vfio-pci binding; the driver's checkpoint, on disk under the
//! kubelet's root, still says the claim is prepared. The kubelet starts the
//! pod again and asks the driver to prepare; the pod's container must come
//! back with its devices. Expectations from the node's kernel (drivers,
//! IOMMU groups), the API server (the allocation) and the container's OCI
//! spec as containerd holds it.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use p2p_tests::kube::ControlPlane;
use p2p_tests::sandbox_node::{
    driver_pod_ready, helm_install, images, one_node_at_a_time, poll, try_get, SandboxNode,
};
use p2p_tests::target_dir;
use serde_json::Value;

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

/// The device nodes of container `id` in its OCI spec.
fn oci_devices(node: &SandboxNode, id: &str) -> BTreeSet<String> {
    let info = node.sh(&format!(
        "ctr -n k8s.io containers info {}",
        id.trim_start_matches("containerd://")
    ));
    let info: Value = serde_json::from_str(&info).expect("ctr's container info");
    info["Spec"]["linux"]["devices"]
        .as_array()
        .map(|d| {
            d.iter()
                .filter_map(|d| d["path"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_claim_prepared_before_a_reboot_gives_the_pod_its_devices_after() {
    let _one = one_node_at_a_time();
    let t0 = Instant::now();
    let step = |what: &str| eprintln!("[{:>6.1} s] {what}", t0.elapsed().as_secs_f64());
    let dir = tempfile::tempdir().unwrap();
    let archives = images(dir.path(), false);
    let cp = ControlPlane::start_for_nodes(&target_dir().join("kube-peers/runs/node-reboot"));
    let node = SandboxNode::boot(&cp, &archives, Duration::from_secs(900));
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
    assert!(oci_devices(&node, &first).contains(&group));
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
        || {
            format!(
                "{}\n{}",
                node.driver_log(),
                cp.try_kubectl(&["describe", "pod", "held"])
                    .unwrap_or_else(|e| e)
            )
        },
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
    let devices = oci_devices(&node, &again);
    assert!(devices.contains(&group), "{group} in {devices:?}");
    assert!(node
        .sh("ls /var/run/cdi")
        .contains(&format!("gpu.vp2p.io-{uid}.json")));

    cp.kubectl(&["delete", "pod", "held", "--timeout=300s"]);
    cp.kubectl(&["delete", "resourceclaim", "held", "--timeout=120s"]);
    poll(
        "the stand-in given back",
        Duration::from_secs(120),
        || (node.driver_of(&bdf) != "vfio-pci").then_some(()),
        || node.driver_log(),
    );
    eprintln!(
        "reboot: node Ready again {seconds:.1} s after `systemctl reboot`; whole test {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}
