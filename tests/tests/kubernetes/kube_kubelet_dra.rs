//! `p2p-host dra driver` driven by the kubelet's own DRA code
//! (`kube-peers kubelet-dra`: the kubelet's plugin manager and DRA manager
//! from k8s.io/kubernetes v1.37.2, the CDI library as container runtimes use
//! it, and Kubernetes' device metadata reader) against the real control
//! plane of tests/src/kube.rs: the driver publishes node-a's GPUs of the
//! nested-switch tree, the real scheduler allocates two peers on one root
//! complex to a pod's claim and binds the pod to node-a, and the kubelet's
//! code registers the driver, prepares the claim (NodePrepareResources v1),
//! injects the CDI devices, reads the device metadata and unprepares. Here
//! the tree's GPUs are on vfio-pci already, so the driver's `--bind` binds
//! nothing; tests/tests/kubernetes/kube_kubelet_dra_bind.rs starts them on nvme. The
//! node, the pod and kubelet-dra's mount namespace are tests/src/kube_node.rs.
//!
//! Expectations come from the fixture by hand
//! (tests/fixtures/qemu-11.1-nested-switch-iommu-on/sysfs): 27:00.0 and
//! 28:00.0 hang off host bridge pci0000:20 (27:00.0 below switch port
//! 22:01.0, 28:00.0 below root port 20:01.0); kernel/iommu_groups/10 holds
//! 22:01.0 (a bridge) and 27:00.0, group 11 holds 28:00.0 alone; 25:00.0 and
//! 26:00.0 share group 9 and are not published; 81:00.0 is alone on
//! pci0000:80, so no claim of two with `matchAttribute: cliquePhb` can take
//! it.
//!
//! The registration is the kubelet's own dial, unchanged: its plugin
//! watcher dials the registration socket by its path, so grpc-go sends the
//! percent-encoded path as `:authority`, which h2 alone refuses as malformed
//! with RST_STREAM(PROTOCOL_ERROR); the driver's shim
//! (host/kube/src/grpc/uds_authority/) replaces it with `localhost`.
//!
//! No container runtime or VFIO runs here: kubelet-dra runs in a mount
//! namespace of its own whose `/dev` is the machine's with an overlay that
//! adds `/dev/vfio/vfio` and the tree's group nodes, standing in for the
//! node's `/dev` as the copied tree stands in for its sysfs (the CDI library
//! reads a device node's type and numbers from the host's `/dev`). This
//! needs root (CAP_SYS_ADMIN and CAP_MKNOD) and `unshare`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use p2p_tests::dra_kubelet::driver_of;
use p2p_tests::dra_node::device;
use p2p_tests::kube::ControlPlane;
use p2p_tests::kube_node::{
    kubelet_dra, oci_devices, oci_mounts, strs, tail, two_peer_gpus_pod, vfio_group_nodes,
    KubeletNode, DRIVER, GROUP_MAJOR, VFIO_CONTAINER,
};
use p2p_tests::kubelet::vfio_tree;
use serde_json::{json, Value};

/// The protocol's directory in containers (KEP-5304).
const METADATA_ROOT: &str = "/var/run/kubernetes.io/dra-device-attributes";

/// The allocated peers by hand: BDF, IOMMU group (kernel/iommu_groups).
const PEERS: [(&str, u32); 2] = [("0000:27:00.0", 10), ("0000:28:00.0", 11)];

/// Node `node` with the driver (`--bind`, which binds nothing here) on a
/// copy of the nested-switch tree whose NVMe "GPUs" are all on vfio-pci.
fn node_with_driver(cp: &ControlPlane, node: &str, dir: &Path) -> KubeletNode {
    let tree = vfio_tree(dir);
    KubeletNode::start(cp, node, dir, &tree, &["--bind"])
}

/// The fixture agrees with the expectations written by hand above.
fn check_fixture(tree: &Path) {
    for (bdf, group) in PEERS {
        let link = std::fs::read_link(tree.join("bus/pci/devices").join(bdf).join("iommu_group"))
            .or_else(|_| {
                let dev = std::fs::canonicalize(tree.join("bus/pci/devices").join(bdf))?;
                std::fs::read_link(dev.join("iommu_group"))
            });
        if let Ok(l) = link {
            assert_eq!(
                l.file_name().unwrap().to_string_lossy(),
                group.to_string(),
                "{bdf}'s IOMMU group in the fixture"
            );
        }
        let members: BTreeSet<String> =
            std::fs::read_dir(tree.join(format!("kernel/iommu_groups/{group}/devices")))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
        assert!(
            members.contains(bdf),
            "group {group} holds {bdf}: {members:?}"
        );
    }
}

/// The driver registered by the kubelet's plugin manager as the kubelet
/// dials it, a pod's claim of two peers prepared, injected and unprepared.
/// The plugin watcher closes its registration connection right after
/// NotifyRegistrationStatus (operation_generator.go: `defer conn.Close()`);
/// the driver must outlive that (it once died of SIGPIPE there).
#[test]
fn the_kubelet_prepares_two_peer_gpus_injects_them_and_unprepares() {
    let cp = ControlPlane::shared(module_path!());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let node = "node-a";
    let mut n = node_with_driver(cp, node, dir);
    let tree = dir.join("sysfs");
    check_fixture(&tree);

    // Two GPUs on one root complex (a claim of a template, KubeVirt's case).
    let ns = "kdra";
    let a = two_peer_gpus_pod(cp, ns, node, true);
    let (claim_name, uid) = (a.name.as_str(), a.uid.as_str());
    // request -> BDF, as the scheduler allocated.
    let by_request: BTreeMap<String, String> = a
        .devices
        .iter()
        .map(|(r, d)| {
            let bdf = PEERS
                .iter()
                .map(|(b, _)| *b)
                .find(|b| *d == device(b))
                .unwrap_or_else(|| panic!("allocated {d}, not 27:00.0 or 28:00.0"));
            (r.clone(), bdf.to_string())
        })
        .collect();
    assert_eq!(
        by_request.keys().collect::<Vec<_>>(),
        ["gpu0", "gpu1"],
        "{}",
        a.claim
    );
    assert_ne!(by_request["gpu0"], by_request["gpu1"]);

    // The kubelet's code, as system:node:node-a.
    let groups: Vec<u32> = PEERS.iter().map(|(_, g)| *g).collect();
    let mut args = n.kubelet_dra_args(cp, &format!("{ns}/vm"));
    args.push("--unprepare".into());
    let (code, stdout, stderr) = kubelet_dra(dir, &vfio_group_nodes(&groups), &args);
    let driver_log = n.driver_log();
    if let Ok(Some(status)) = n.driver.try_wait() {
        use std::os::unix::process::ExitStatusExt;
        assert_ne!(
            status.signal(),
            Some(libc::SIGPIPE),
            "the driver died of SIGPIPE (see this test's doc); kubelet-dra:\n{}\ndriver log:\n{driver_log}",
            tail(&stderr)
        );
    }
    assert_eq!(
        code,
        Some(0),
        "kubelet-dra failed\nstderr (tail):\n{}\ndriver ({:?}) log:\n{driver_log}",
        tail(&stderr),
        n.driver
            .try_wait()
            .map(|s| s.map_or("running".to_string(), |s| s.to_string()))
    );
    let out: Value = serde_json::from_str(&stdout).expect("kubelet-dra printed one JSON object");

    // Registered by the plugin watcher with the DRA manager's handler, with
    // the versions the driver's GetInfo names.
    let reg = &out["registered"];
    assert_eq!(reg["driver"], DRIVER);
    assert_eq!(
        reg["endpoint"],
        n.root
            .join(format!("plugins/{DRIVER}/dra.sock"))
            .to_str()
            .unwrap()
    );
    assert_eq!(
        strs(&reg["versions"]),
        ["v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth"],
        "{reg}"
    );
    // By the kubelet's own dial (:authority the percent-encoded path),
    // refused by no one.
    let errors = out["kubelet_errors"].to_string();
    assert!(!errors.contains("PROTOCOL_ERROR"), "{errors}");
    assert!(
        driver_log.contains(&format!("the kubelet registered {DRIVER}")),
        "{driver_log}"
    );
    // grpc-go's frames all followed by the driver's shim.
    assert!(
        !driver_log.contains("closed a client's connection"),
        "{driver_log}"
    );
    assert_eq!(out["pod"], format!("{ns}/vm"));
    assert_eq!(out["node"], node);

    // The claim the kubelet prepared: the pod's, with both devices, each
    // with its device's CDI id and its request's metadata id
    // (`<driver>/vfio=<claim uid>-<device>`, `...=<claim uid>-<request>-metadata`).
    let claims = out["claims"].as_array().unwrap();
    assert_eq!(claims.len(), 1, "{}", out["claims"]);
    assert_eq!(claims[0]["namespace"], ns);
    assert_eq!(claims[0]["name"], claim_name);
    assert_eq!(claims[0]["uid"], uid);
    let prepared: BTreeMap<String, (String, Vec<String>)> = claims[0]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            assert_eq!(d["driver"], DRIVER);
            assert_eq!(d["pool"], node);
            (
                strs(&d["requests"]).join(","),
                (
                    d["device"].as_str().unwrap().to_string(),
                    strs(&d["cdi_device_ids"]),
                ),
            )
        })
        .collect();
    let want: BTreeMap<String, (String, Vec<String>)> = by_request
        .iter()
        .map(|(r, b)| {
            let ids = vec![
                format!("{DRIVER}/vfio={uid}-{}", device(b)),
                format!("{DRIVER}/vfio={uid}-{r}-metadata"),
            ];
            (r.clone(), (device(b), ids))
        })
        .collect();
    assert_eq!(prepared, want);

    // The container's CDI devices: of kind gpu.vp2p.io/vfio (the driver's
    // CDI kind, docs/kubevirt.md), no duplicate.
    let ids = strs(&out["cdi_devices"]["compute"]);
    assert!(!ids.is_empty());
    assert!(
        ids.iter().all(|i| i.starts_with("gpu.vp2p.io/vfio=")),
        "{ids:?}"
    );
    assert_eq!(
        ids.iter().collect::<BTreeSet<_>>().len(),
        ids.len(),
        "{ids:?}"
    );

    // The OCI spec: the VFIO container and the two groups, character
    // devices with the stand-in /dev's numbers; nothing else.
    let mut want = BTreeMap::from([(
        "/dev/vfio/vfio".to_string(),
        ("c".to_string(), VFIO_CONTAINER.0, VFIO_CONTAINER.1),
    )]);
    for (minor, (_, g)) in PEERS.iter().enumerate() {
        want.insert(
            format!("/dev/vfio/{g}"),
            ("c".to_string(), GROUP_MAJOR, minor as i64),
        );
    }
    assert_eq!(oci_devices(&out["oci"]), want, "{}", out["oci"]);
    assert_eq!(out["oci"]["devices"].as_array().unwrap().len(), 3);

    // One metadata mount per request, read-only, where the protocol puts a
    // template's claim: resourceclaimtemplates/<pod claim>/<request>/.
    let mounts = oci_mounts(&out["oci"]);
    let dest = |req: &str| {
        format!("{METADATA_ROOT}/resourceclaimtemplates/peers/{req}/{DRIVER}-metadata.json")
    };
    assert_eq!(
        mounts.keys().cloned().collect::<Vec<_>>(),
        [dest("gpu0"), dest("gpu1")],
        "{}",
        out["oci"]
    );
    for (source, options) in mounts.values() {
        assert_eq!(options, &["ro", "bind"], "{source}");
        assert!(Path::new(source).starts_with(&n.meta), "{source}");
    }

    // The metadata as Kubernetes' reader decodes it: DeviceMetadata of
    // metadata.resource.k8s.io/v1alpha1 at generation 1, each request's
    // device with its pciBusID and pcieRoot, valid.
    let md = out["metadata"].as_array().unwrap();
    assert_eq!(md.len(), 2, "{}", out["metadata"]);
    let mut seen = BTreeSet::new();
    for m in md {
        assert_eq!(m["validation_error"], "", "{m}");
        assert_eq!(m["api_version"], "metadata.resource.k8s.io/v1alpha1", "{m}");
        assert_eq!(m["claim"]["name"], claim_name);
        assert_eq!(m["claim"]["namespace"], ns);
        assert_eq!(m["claim"]["uid"], uid);
        assert_eq!(m["claim"]["generation"], 1, "{m}");
        assert_eq!(m["pod_claim_name"], "peers");
        let reqs = m["requests"].as_array().unwrap();
        assert_eq!(reqs.len(), 1, "{m}");
        let req = reqs[0]["name"].as_str().unwrap();
        assert_eq!(m["destination"], dest(req));
        assert_eq!(m["file"], mounts[&dest(req)].0.as_str());
        let devs = reqs[0]["devices"].as_array().unwrap();
        assert_eq!(devs.len(), 1, "{m}");
        let bdf = &by_request[req];
        assert_eq!(devs[0]["driver"], DRIVER);
        assert_eq!(devs[0]["pool"], node);
        assert_eq!(devs[0]["device"], device(bdf).as_str());
        let attrs = &devs[0]["attributes"];
        assert_eq!(
            attrs["resource.kubernetes.io/pciBusID"],
            json!({"string": bdf}),
            "{m}"
        );
        assert_eq!(
            attrs["resource.kubernetes.io/pcieRoot"],
            json!({"string": "pci0000:20"}),
            "{m}"
        );
        seen.insert(bdf.clone());
    }
    assert_eq!(
        seen,
        PEERS
            .iter()
            .map(|(b, _)| b.to_string())
            .collect::<BTreeSet<_>>()
    );

    // Unprepared: the driver's checkpoint no longer has the claim, and the
    // CDI spec and metadata files are gone.
    assert_eq!(out["unprepared"], true);
    let checkpoint = n.checkpoint();
    assert!(
        checkpoint["claims"].get(uid).is_none(),
        "the claim is still in the checkpoint: {checkpoint}"
    );
    for (source, _) in mounts.values() {
        assert!(!Path::new(source).exists(), "{source} is left");
    }
    let left: Vec<_> = std::fs::read_dir(&n.cdi)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        left.iter().all(|n| !n.to_string_lossy().contains(uid)),
        "CDI specs left: {left:?}"
    );
    // The groups were whole on vfio-pci already: `--bind` bound nothing, so
    // unprepare gave nothing back.
    for (bdf, _) in PEERS {
        assert_eq!(driver_of(&tree, bdf).as_deref(), Some("vfio-pci"), "{bdf}");
    }
}

/// A claim the scheduler could never have made: allocated (by an admin
/// writing its status) to 25:00.0, which the driver left out of its slices
/// (IOMMU group 9 also holds 26:00.0). The kubelet's own NodePrepareResources
/// call for it is refused by the driver naming the device; nothing is
/// prepared, no CDI spec written.
#[test]
fn a_claim_naming_a_device_the_driver_left_out_is_refused_through_the_kubelet() {
    let cp = ControlPlane::shared(module_path!());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let node = "node-left-out";
    let n = node_with_driver(cp, node, dir);
    let left_out = device("0000:25:00.0");
    let slices = cp.get_json(&[
        "get",
        "resourceslices",
        "--field-selector",
        &format!("spec.nodeName={node}"),
    ]);
    assert!(
        !slices.to_string().contains(&left_out),
        "25:00.0 is not published: {slices}"
    );
    let ns = "kdra-left-out";
    let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
         "metadata": {"name": "hand-made", "namespace": ns},
         "spec": {"devices": {"requests": [
             {"name": "gpu0", "exactly": {"deviceClassName": "vp2p-gpu"}}]}}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "vm", "namespace": ns},
         "spec": {
             "nodeName": node,
             "resourceClaims": [{"name": "peers", "resourceClaimName": "hand-made"}],
             "containers": [{"name": "compute", "image": "registry.invalid/virt-launcher:0",
                             "resources": {"claims": [{"name": "peers"}]}}]}}]});
    cp.apply(&objects.to_string())
        .expect("the claim and the pod");
    let pod = cp.get_json(&["get", "pod", "vm", "-n", ns]);
    let status = json!({"status": {
        "allocation": {"devices": {"results": [
            {"request": "gpu0", "driver": DRIVER, "pool": node, "device": left_out}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
        "reservedFor": [{"resource": "pods", "name": "vm", "uid": pod["metadata"]["uid"]}]}});
    cp.kubectl(&[
        "patch",
        "resourceclaim",
        "hand-made",
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        &status.to_string(),
    ]);
    let args = n.kubelet_dra_args(cp, &format!("{ns}/vm"));
    let (code, stdout, stderr) = kubelet_dra(dir, &vfio_group_nodes(&[9]), &args);
    eprintln!("kubelet-dra on the hand-made claim:\n{}", tail(&stderr));
    assert_ne!(code, Some(0), "prepare must fail:\n{stdout}");
    assert!(
        stderr.contains(&left_out),
        "the refusal names the device:\n{}",
        tail(&stderr)
    );
    let checkpoint = n.checkpoint().to_string();
    assert!(
        !checkpoint.contains(pod["metadata"]["uid"].as_str().unwrap())
            && !checkpoint.contains(&left_out),
        "nothing prepared: {checkpoint}"
    );
    let specs = std::fs::read_dir(&n.cdi).map(|d| d.count()).unwrap_or(0);
    assert_eq!(specs, 0, "no CDI spec written");
}
