//! One claim's life on a real node, each step what an operator does:
//! `helm install` of the chart starts the driver from vp2p's image; a pod
//! claims two peer GPUs through the shipped tiered template; the kubelet is
//! restarted under it; the DaemonSet is rolled while a second pod arrives;
//! the pods are deleted. Expectations come from the node's own kernel (its
//! sysfs: which stand-ins share a switch, their IOMMU groups, their drivers)
//! and from the API server (what the scheduler allocated).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use p2p_tests::kube::ControlPlane;
use p2p_tests::repo_root;
use p2p_tests::sandbox_node::{
    boot_node, driver_pod_ready, helm_install, one_node_at_a_time, poll, try_get, SandboxNode, NODE,
};
use serde_json::Value;

/// A pod with two containers on claim `claim` (a template's name or a
/// claim's): `check` runs `p2p-host vfio-check --json` once, `hold` (the
/// pause image) keeps the devices while the pod lives, and is started again
/// (OnFailure) when its sandbox is lost.
fn pod(name: &str, claim_source: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
spec:
  restartPolicy: OnFailure
  resourceClaims:
    - name: gpus
      {claim_source}
  containers:
    - name: check
      image: localhost/vp2p/p2p-host:0.1.0
      command: ["p2p-host", "vfio-check", "--json"]
      resources:
        claims: [{{name: gpus}}]
    - name: hold
      image: localhost/vp2p/pause:0.1.0
      resources:
        claims: [{{name: gpus}}]
"#
    )
}

const ONE_GPU_CLAIM: &str = r#"apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: one-gpu
  namespace: default
spec:
  devices:
    requests:
      - name: gpu
        exactly:
          deviceClassName: vp2p-gpu
          allocationMode: ExactCount
          count: 1
"#;

/// A published or recorded device's PCI address (its `pciBusID` attribute).
fn pci_bus_id(device: &Value) -> String {
    device["attributes"]["resource.kubernetes.io/pciBusID"]["string"]
        .as_str()
        .expect("a pciBusID attribute")
        .to_string()
}

/// The status of container `name` of `pod`, when there is one.
fn container<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    pod["status"]["containerStatuses"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)
}

/// What `check` printed, once it ended with exit code 0.
fn checked(cp: &ControlPlane, node: &SandboxNode, pod: &str, limit: Duration) -> (Value, Value) {
    let object = poll(
        &format!("pod {pod}'s check container ends"),
        limit,
        || {
            let p = try_get(cp, &["pod", pod])?;
            container(&p, "check")?["state"]["terminated"]
                .is_object()
                .then_some(p)
        },
        || {
            cp.try_kubectl(&["describe", "pod", pod])
                .unwrap_or_else(|e| e)
        },
    );
    let uid = object["metadata"]["uid"].as_str().unwrap().to_string();
    let stdout = node.container_stdout("default", pod, &uid, "check");
    let terminated = &container(&object, "check").unwrap()["state"]["terminated"];
    assert_eq!(
        terminated["exitCode"], 0,
        "vfio-check in {pod}: {terminated}\n{stdout}"
    );
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("vfio-check's JSON in {pod}: {e}\n{stdout}"));
    (object, report)
}

/// The functions `pod`'s claim was allocated, as the API server says
/// (allocation results -> the slices' pciBusID).
fn allocated(cp: &ControlPlane, pod: &Value) -> BTreeSet<String> {
    // A claim named in the pod, or the one made from its template.
    let claim = pod["spec"]["resourceClaims"][0]["resourceClaimName"]
        .as_str()
        .or(pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"].as_str())
        .expect("the pod's claim is named in its spec or status");
    let claim = cp.get_json(&["get", "resourceclaim", claim]);
    let slices = cp.get_json(&["get", "resourceslices"]);
    claim["status"]["allocation"]["devices"]["results"]
        .as_array()
        .expect("allocation results")
        .iter()
        .map(|r| {
            slices["items"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|s| s["spec"]["devices"].as_array().unwrap())
                .find(|d| d["name"] == r["device"])
                .map(pci_bus_id)
                .unwrap_or_else(|| panic!("{} is in no slice", r["device"]))
        })
        .collect()
}

/// The functions the container opened, each checked against the node: the
/// group it opened is the function's IOMMU group, its ids are QEMU's
/// bochs-display's (1234:1111, class 038000), read through the device fd.
fn opened(node: &SandboxNode, report: &Value) -> BTreeSet<String> {
    report["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let bdf = f["bdf"].as_str().unwrap().to_string();
            assert_eq!(f["group"], node.iommu_group(&bdf), "{bdf}'s group: {f}");
            assert_eq!(
                (&f["vendor"], &f["device"], &f["class"]),
                (
                    &Value::from("1234"),
                    &Value::from("1111"),
                    &Value::from("038000")
                ),
                "{bdf} as read through its device fd"
            );
            bdf
        })
        .collect()
}

fn count(text: &str, needle: &str) -> usize {
    text.matches(needle).count()
}

fn slice_uids(cp: &ControlPlane) -> BTreeSet<String> {
    cp.get_json(&["get", "resourceslices"])["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["metadata"]["uid"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_claim_for_peer_gpus_lives_and_ends_on_a_real_node() {
    let _one = one_node_at_a_time();
    let t0 = Instant::now();
    let step = |what: &str| eprintln!("[{:>6.1} s] {what}", t0.elapsed().as_secs_f64());
    let (cp, node) = boot_node("node-claim-lifecycle", false);
    step(&format!(
        "node Ready {:.1} s after QEMU started",
        node.boot_seconds
    ));

    // The node as Kubernetes sees it: the kubelet's own version, containerd 2.
    let n = cp.get_json(&["get", "node", NODE]);
    assert_eq!(n["status"]["nodeInfo"]["kubeletVersion"], "v1.37.2");
    let runtime = n["status"]["nodeInfo"]["containerRuntimeVersion"]
        .as_str()
        .unwrap();
    assert!(runtime.starts_with("containerd://2."), "{runtime}");

    // Which stand-ins share a switch, from the node's kernel: below pci0000:00
    // a function on a root port is two links deep, one below a switch four.
    let gpus = node.gpus();
    assert_eq!(gpus.len(), 3, "the node's stand-in GPUs: {gpus:?}");
    let depth = |bdf: &str| {
        let path = node.sh(&format!("readlink -f /sys/bus/pci/devices/{bdf}"));
        path.trim()
            .split('/')
            .skip_while(|c| !c.starts_with("pci0000"))
            .count()
            - 1
    };
    let switched: BTreeSet<String> = gpus.iter().filter(|g| depth(g) == 4).cloned().collect();
    let alone: BTreeSet<String> = gpus.iter().filter(|g| depth(g) == 2).cloned().collect();
    assert_eq!((switched.len(), alone.len()), (2, 1), "{gpus:?}");
    let drivers: std::collections::BTreeMap<String, String> = gpus
        .iter()
        .map(|g| (g.clone(), node.driver_of(g)))
        .collect();
    assert!(
        drivers.values().all(|d| d != "vfio-pci"),
        "none on vfio-pci before a claim: {drivers:?}"
    );

    // The chart's DaemonSet: the driver from vp2p's image, with the pod's
    // service-account token, registers with the kubelet and publishes.
    helm_install(&cp);
    let driver_pod = driver_pod_ready(&cp, Duration::from_secs(300));
    step("driver pod Ready");
    assert_eq!(driver_pod["spec"]["nodeName"], NODE);
    let log = node.driver_log();
    assert!(log.contains("the kubelet registered gpu.vp2p.io"), "{log}");
    let slices = cp.get_json(&["get", "resourceslices"]);
    let published: BTreeSet<String> = slices["items"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["spec"]["devices"].as_array().unwrap())
        .map(pci_bus_id)
        .collect();
    assert_eq!(
        published,
        gpus.iter().cloned().collect(),
        "published devices"
    );
    for s in slices["items"].as_array().unwrap() {
        assert_eq!(s["spec"]["nodeName"], NODE);
        assert_eq!(
            s["metadata"]["ownerReferences"][0]["uid"], n["metadata"]["uid"],
            "owned by the Node"
        );
    }

    // Two peer GPUs through the shipped tiered template.
    let templates = std::fs::read_to_string(
        repo_root().join("host/kubernetes/dra/claim-templates-tiered.yaml"),
    )
    .unwrap();
    cp.apply(&templates).expect("the tiered templates apply");
    let created = Instant::now();
    cp.create(&pod(
        "peers",
        "resourceClaimTemplateName: two-peer-gpus-tiered",
    ))
    .expect("pod peers");
    let (peers, report) = checked(&cp, &node, "peers", Duration::from_secs(300));
    let running = poll(
        "peers' hold container runs",
        Duration::from_secs(120),
        || {
            let p = try_get(&cp, &["pod", "peers"])?;
            container(&p, "hold")?["state"]["running"]
                .is_object()
                .then_some(p)
        },
        String::new,
    );
    let start_seconds = created.elapsed().as_secs_f64();
    step(&format!(
        "pod peers: check done, hold running {start_seconds:.1} s after creation"
    ));
    let pair = allocated(&cp, &peers);
    assert_eq!(
        pair, switched,
        "the scheduler allocated the two stand-ins below the switch"
    );
    assert_eq!(
        opened(&node, &report),
        pair,
        "the container opened what was allocated"
    );
    for bdf in &pair {
        assert_eq!(node.driver_of(bdf), "vfio-pci", "{bdf} bound for the claim");
    }
    for bdf in &alone {
        assert_eq!(node.driver_of(bdf), drivers[bdf], "{bdf} left alone");
    }
    let metadata = report["metadata"].as_array().unwrap();
    assert_eq!(
        metadata.len(),
        1,
        "one metadata file for one request: {metadata:?}"
    );
    let in_metadata: BTreeSet<String> = metadata[0]["document"]["requests"][0]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(pci_bus_id)
        .collect();
    assert_eq!(
        in_metadata, pair,
        "the KEP-5304 metadata names the allocated devices"
    );
    let claim_name = peers["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        .as_str()
        .unwrap()
        .to_string();
    let prepared = format!("prepared claim default/{claim_name} ");
    assert_eq!(
        count(&node.driver_log(), &prepared),
        1,
        "one prepare so far"
    );
    assert!(
        node.sh("ls /var/run/cdi").contains("gpu.vp2p.io-"),
        "the claim's CDI spec"
    );

    // The kubelet restarted under the running pod keeps its own claim
    // checkpoint and asks no driver while the pod's sandbox lives (it
    // prepares only when it makes a sandbox, pkg/kubelet/kuberuntime); the
    // plugin registers again; the container keeps running and its devices.
    let hold_id = container(&running, "hold").unwrap()["containerID"].clone();
    let registered = "the kubelet registered gpu.vp2p.io";
    let before = count(&node.driver_log(), registered);
    node.sh("systemctl restart kubelet");
    poll(
        "the restarted kubelet registers the driver again",
        Duration::from_secs(300),
        || (count(&node.driver_log(), registered) > before).then_some(()),
        || node.driver_log(),
    );
    step("kubelet restarted; plugin registered again");
    assert_eq!(
        count(&node.driver_log(), &prepared),
        1,
        "no prepare while the sandbox lives"
    );
    let after = cp.get_json(&["get", "pod", "peers"]);
    let hold = container(&after, "hold").unwrap();
    assert_eq!(hold["containerID"], hold_id, "the same container");
    assert_eq!(hold["restartCount"], 0);
    assert!(hold["state"]["running"].is_object(), "{hold}");
    for bdf in &pair {
        assert_eq!(node.driver_of(bdf), "vfio-pci", "{bdf} still bound");
    }

    // Its sandbox lost, the restarted kubelet makes a new one and prepares
    // the claim again: the driver answers from its checkpoint, and the new
    // hold container gets the groups through the CDI ids it answered.
    node.sh("for id in $(ctr -n k8s.io containers ls -q); do \
           info=$(ctr -n k8s.io containers info $id); \
           echo \"$info\" | grep -q '\"io.kubernetes.pod.name\": \"peers\"' && \
           echo \"$info\" | grep -q '\"io.cri-containerd.kind\": \"sandbox\"' && \
           ctr -n k8s.io task kill -s SIGKILL $id; done; true");
    let again = poll(
        "a new sandbox for peers, its claim prepared from the checkpoint",
        Duration::from_secs(300),
        || {
            let log = node.driver_log();
            let from_checkpoint = log.lines().any(|l| {
                l.contains(&format!("claim default/{claim_name} "))
                    && l.ends_with("prepared before, answered from the checkpoint")
            });
            let p = try_get(&cp, &["pod", "peers"])?;
            let hold = container(&p, "hold")?;
            (from_checkpoint
                && hold["restartCount"].as_u64()? >= 1
                && hold["state"]["running"].is_object())
            .then(|| hold["containerID"].as_str().unwrap().to_string())
        },
        || node.pod_context(&cp, "peers"),
    );
    step("sandbox made anew; claim answered from the driver's checkpoint");
    let devices = node.oci_devices(&again);
    for bdf in &pair {
        let group = format!("/dev/vfio/{}", node.iommu_group(bdf));
        assert!(
            devices.contains(&group),
            "the new hold container has {group}: {devices:?}"
        );
    }
    let hold_id = Value::from(again);

    // The DaemonSet rolled while a new pod arrives: no slice withdrawn, the
    // new pod prepared by the new driver pod, the old pod keeps its devices.
    let uids = slice_uids(&cp);
    let old_driver = driver_pod["metadata"]["name"].as_str().unwrap().to_string();
    cp.kubectl(&[
        "-n",
        "kube-system",
        "rollout",
        "restart",
        "daemonset/vp2p-dra-driver",
    ]);
    let single_created = Instant::now();
    cp.create(ONE_GPU_CLAIM).expect("claim one-gpu");
    cp.create(&pod("single", "resourceClaimName: one-gpu"))
        .expect("pod single");
    cp.kubectl(&[
        "-n",
        "kube-system",
        "rollout",
        "status",
        "daemonset/vp2p-dra-driver",
        "--timeout=300s",
    ]);
    step("DaemonSet rolled");
    let (single, report) = checked(&cp, &node, "single", Duration::from_secs(300));
    // The kubelet cannot prepare while no driver is registered (the old pod
    // gone, the new one not yet up) and retries with its back-off.
    step(&format!(
        "pod single checked {:.1} s after creation, during the roll",
        single_created.elapsed().as_secs_f64()
    ));
    assert_eq!(allocated(&cp, &single), alone, "the GPU left");
    assert_eq!(opened(&node, &report), alone);
    let pods = cp.get_json(&[
        "get",
        "-n",
        "kube-system",
        "pods",
        "-l",
        "app.kubernetes.io/name=vp2p-dra-driver",
    ]);
    let new_driver = pods["items"][0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(new_driver, old_driver, "a new driver pod");
    let new_log = node.sh(&format!(
        "cat /var/log/pods/kube-system_{new_driver}_*/driver/*.log"
    ));
    assert!(
        new_log.contains("prepared claim default/one-gpu "),
        "{new_log}"
    );
    assert_eq!(
        slice_uids(&cp),
        uids,
        "no slice was withdrawn and made again"
    );
    let hold = container(&cp.get_json(&["get", "pod", "peers"]), "hold")
        .unwrap()
        .clone();
    assert_eq!(
        hold["containerID"], hold_id,
        "peers' container kept through the roll"
    );

    // Deleting the pods: the kubelet unprepares, the functions go back to
    // the driver they had (none: the node's kernel has none for bochs-display),
    // the CDI specs and the metadata are gone.
    cp.kubectl(&["delete", "pod", "peers", "single", "--timeout=300s"]);
    cp.kubectl(&["delete", "resourceclaim", "one-gpu", "--timeout=120s"]);
    poll(
        "the stand-ins are back on their drivers",
        Duration::from_secs(120),
        || {
            gpus.iter()
                .all(|g| node.driver_of(g) == drivers[g])
                .then_some(())
        },
        || node.driver_log(),
    );
    step("pods deleted, functions given back");
    let log = node.driver_log();
    assert!(
        log.contains(&format!("unprepared claim default/{claim_name} ")),
        "{log}"
    );
    assert!(log.contains("unprepared claim default/one-gpu "), "{log}");
    assert_eq!(node.sh("ls -A /var/run/cdi").trim(), "", "no CDI spec left");
    assert_eq!(
        node.sh("ls -A /var/run/vp2p/dra-metadata").trim(),
        "",
        "no metadata left"
    );
    eprintln!(
        "node: boot to Ready {:.1} s; pod creation to container running {start_seconds:.1} s; whole test {:.1} s",
        node.boot_seconds,
        t0.elapsed().as_secs_f64()
    );
}
