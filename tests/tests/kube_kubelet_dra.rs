//! `p2p-host dra driver` driven by the kubelet's own DRA code
//! (`kube-peers kubelet-dra`: the kubelet's plugin manager and DRA manager
//! from k8s.io/kubernetes v1.37.2, the CDI library as container runtimes use
//! it, and Kubernetes' device metadata reader) against the real control
//! plane of tests/src/kube.rs: the driver publishes node-a's GPUs of the
//! nested-switch tree, the real scheduler allocates two peers on one root
//! complex to a pod's claim and binds the pod to node-a, and the kubelet's
//! code registers the driver, prepares the claim (NodePrepareResources v1),
//! injects the CDI devices, reads the device metadata and unprepares.
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
//! (host/kube/src/grpc/uds_authority.rs) replaces it with `localhost`.
//!
//! No container runtime or VFIO runs here: kubelet-dra runs in a mount
//! namespace of its own whose `/dev` is the machine's with an overlay that
//! adds `/dev/vfio/vfio` and the tree's group nodes, standing in for the
//! node's `/dev` as the copied tree stands in for its sysfs (the CDI library
//! reads a device node's type and numbers from the host's `/dev`). This
//! needs root (CAP_SYS_ADMIN and CAP_MKNOD) and `unshare`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use p2p_tests::kube::{kube_peers, ControlPlane};
use p2p_tests::kubelet::vfio_tree;
use p2p_tests::{binary, repo_root};
use serde_json::{json, Value};

const DRIVER: &str = "gpu.vp2p.io";
/// The protocol's directory in containers (KEP-5304).
const METADATA_ROOT: &str = "/var/run/kubernetes.io/dra-device-attributes";

/// The allocated peers by hand: BDF, IOMMU group (kernel/iommu_groups).
const PEERS: [(&str, u32); 2] = [("0000:27:00.0", 10), ("0000:28:00.0", 11)];
/// The stand-in `/dev`: /dev/vfio/vfio is the VFIO container's misc device
/// (major 10, VFIO_MINOR 196 in the kernel's include/linux/miscdevice.h);
/// a group's node has a dynamic major, here 511 with minors 0 and 1.
const VFIO_CONTAINER: (i64, i64) = (10, 196);
const GROUP_MAJOR: i64 = 511;

/// The DRA device name of a BDF, as published (`gpu-` and the address with
/// `:` and `.` as `-`).
fn device(bdf: &str) -> String {
    format!("gpu-{}", bdf.replace([':', '.'], "-"))
}

struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The driver's manifests (ServiceAccount, RBAC, DaemonSet) and the
/// DeviceClasses, once per control plane.
fn manifests(cp: &ControlPlane) {
    static APPLIED: OnceLock<()> = OnceLock::new();
    APPLIED.get_or_init(|| {
        for f in ["driver.yaml", "deviceclasses.yaml"] {
            let text = std::fs::read_to_string(repo_root().join("host/kubernetes/dra").join(f))
                .expect("the manifest");
            cp.apply(&text)
                .unwrap_or_else(|e| panic!("kubectl apply -f {f}: {e}"));
        }
    });
}

/// Node `node` with its driver running on a copy of the nested-switch tree
/// (every NVMe "GPU" linked to vfio-pci), authenticated with a token of the
/// driver's ServiceAccount bound to the node; returns the driver and the
/// kubelet root. Waits until the node's ResourceSlice is published.
fn node_with_driver(cp: &ControlPlane, node: &str, dir: &Path) -> (Driver, PathBuf) {
    manifests(cp);
    // Labeled as a kubelet labels its node, for the pod's nodeSelector (the
    // tests' nodes have the same GPUs).
    cp.add_node(node, &[("kubernetes.io/hostname", node)]);
    let token = cp.token("kube-system", "vp2p-dra-driver", Some(node));
    let kubeconfig = dir.join("driver.kubeconfig");
    cp.token_kubeconfig(&token, &kubeconfig);
    let tree = vfio_tree(dir);
    let root = dir.join("kubelet");
    let log = std::fs::File::create(dir.join("driver.log")).unwrap();
    let child = Command::new(binary("p2p-host"))
        .args([
            "dra",
            "driver",
            "--node-name",
            node,
            "--gpu-class",
            "0108",
            "--bind",
        ])
        .arg("--sysfs-root")
        .arg(&tree)
        .arg("--kubelet-root")
        .arg(&root)
        .arg("--cdi-dir")
        .arg(dir.join("cdi"))
        .arg("--metadata-dir")
        .arg(dir.join("meta"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("p2p-host dra driver starts");
    let driver = Driver(child);
    let reg = root.join(format!("plugins_registry/{DRIVER}-reg.sock"));
    let selector = format!("spec.nodeName={node}");
    cp.wait_for(
        &format!("the driver's registration socket and {node}'s ResourceSlice"),
        Duration::from_secs(60),
        || {
            let slices = cp.get_json(&["get", "resourceslices", "--field-selector", &selector]);
            let n = slices["items"].as_array().map_or(0, Vec::len);
            (reg.exists() && n > 0).then_some(())
        },
    );
    (driver, root)
}

/// `kube-peers kubelet-dra ARGS` in a mount namespace whose /dev has the
/// stand-in VFIO nodes of `groups` (see the module's doc); (exit code,
/// stdout, stderr).
fn kubelet_dra(dir: &Path, groups: &[u32], args: &[&str]) -> (Option<i32>, String, String) {
    let ovl = dir.join("dev-overlay");
    std::fs::create_dir_all(&ovl).unwrap();
    let mut script = String::from(
        "set -e\n\
         mount -t tmpfs tmpfs \"$OVL\"\n\
         mkdir \"$OVL/upper\" \"$OVL/work\"\n\
         mount -t overlay overlay -o \"lowerdir=/dev,upperdir=$OVL/upper,workdir=$OVL/work\" /dev\n\
         mkdir -p /dev/vfio\n\
         rm -f /dev/vfio/vfio\n",
    );
    script.push_str(&format!(
        "mknod /dev/vfio/vfio c {} {}\n",
        VFIO_CONTAINER.0, VFIO_CONTAINER.1
    ));
    for (minor, g) in groups.iter().enumerate() {
        script.push_str(&format!(
            "rm -f /dev/vfio/{g}\nmknod /dev/vfio/{g} c {GROUP_MAJOR} {minor}\n"
        ));
    }
    script.push_str("exec \"$@\"\n");
    let out = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
            "sh",
        ])
        .arg(kube_peers())
        .arg("kubelet-dra")
        .args(args)
        .env("OVL", &ovl)
        .stdin(Stdio::null())
        .output()
        .expect("unshare runs (util-linux)");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("an array: {v}"))
        .iter()
        .map(|s| s.as_str().expect("a string").to_string())
        .collect()
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
    let cp = ControlPlane::shared();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let node = "node-a";
    let (mut driver, root) = node_with_driver(cp, node, dir);
    check_fixture(&dir.join("sysfs"));

    // Two GPUs on one root complex, as in docs/kubevirt.md's DRA section.
    let ns = "kdra";
    let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
         "metadata": {"name": "two-peer-gpus", "namespace": ns},
         "spec": {"spec": {"devices": {
             "requests": [
                 {"name": "gpu0", "exactly": {"deviceClassName": "vp2p-gpu"}},
                 {"name": "gpu1", "exactly": {"deviceClassName": "vp2p-gpu"}}],
             "constraints": [{"matchAttribute": "gpu.vp2p.io/cliquePhb"}]}}}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "vm", "namespace": ns},
         "spec": {
             "nodeSelector": {"kubernetes.io/hostname": node},
             "resourceClaims": [{"name": "peers", "resourceClaimTemplateName": "two-peer-gpus"}],
             "containers": [{"name": "compute", "image": "registry.invalid/virt-launcher:0",
                             "resources": {"claims": [{"name": "peers"}]}}]}}]});
    cp.apply(&objects.to_string())
        .expect("the claim template and the pod");

    // The scheduler allocates and binds; the claim is reserved for the pod.
    let (claim_name, claim) = cp.wait_for(
        "the pod bound to node-a with its claim allocated and reserved",
        Duration::from_secs(120),
        || {
            let pod = cp.get_json(&["get", "pod", "vm", "-n", ns]);
            if pod["spec"]["nodeName"] != node {
                return None;
            }
            let name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
                .as_str()?
                .to_string();
            let claim = cp.get_json(&["get", "resourceclaim", &name, "-n", ns]);
            let reserved = claim["status"]["reservedFor"]
                .as_array()
                .is_some_and(|r| r.iter().any(|c| c["uid"] == pod["metadata"]["uid"]));
            (claim["status"]["allocation"].is_object() && reserved).then_some((name, claim))
        },
    );
    let uid = claim["metadata"]["uid"].as_str().unwrap().to_string();
    // request -> BDF, as the scheduler allocated.
    let by_request: BTreeMap<String, String> = claim["status"]["allocation"]["devices"]["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r["driver"], DRIVER);
            assert_eq!(r["pool"], node);
            let bdf = PEERS
                .iter()
                .map(|(b, _)| *b)
                .find(|b| r["device"] == device(b))
                .unwrap_or_else(|| panic!("allocated {}, not 27:00.0 or 28:00.0", r["device"]));
            (r["request"].as_str().unwrap().to_string(), bdf.to_string())
        })
        .collect();
    assert_eq!(
        by_request.keys().collect::<Vec<_>>(),
        ["gpu0", "gpu1"],
        "{claim}"
    );
    assert_ne!(by_request["gpu0"], by_request["gpu1"]);

    // The kubelet's code, as system:node:node-a.
    let node_kc = dir.join("node.kubeconfig");
    cp.node_kubeconfig(node, &node_kc);
    let cdi = dir.join("cdi");
    let groups: Vec<u32> = PEERS.iter().map(|(_, g)| *g).collect();
    let (code, stdout, stderr) = kubelet_dra(
        dir,
        &groups,
        &[
            "--kubeconfig",
            node_kc.to_str().unwrap(),
            "--node",
            node,
            "--root",
            root.to_str().unwrap(),
            "--driver",
            DRIVER,
            "--pod",
            &format!("{ns}/vm"),
            "--cdi-dir",
            cdi.to_str().unwrap(),
            "--unprepare",
            "--timeout",
            "90s",
        ],
    );
    let driver_log = std::fs::read_to_string(dir.join("driver.log")).unwrap_or_default();
    if let Ok(Some(status)) = driver.0.try_wait() {
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
        driver
            .0
            .try_wait()
            .map(|s| s.map_or("running".to_string(), |s| s.to_string()))
    );
    let out: Value = serde_json::from_str(&stdout).expect("kubelet-dra printed one JSON object");

    // Registered by the plugin watcher with the DRA manager's handler.
    let reg = &out["registered"];
    assert_eq!(reg["driver"], DRIVER);
    assert_eq!(
        reg["endpoint"],
        root.join(format!("plugins/{DRIVER}/dra.sock"))
            .to_str()
            .unwrap()
    );
    assert!(
        strs(&reg["versions"]).contains(&"v1.DRAPlugin".to_string()),
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

    // The claim the kubelet prepared: the pod's, with both devices.
    let claims = out["claims"].as_array().unwrap();
    assert_eq!(claims.len(), 1, "{}", out["claims"]);
    assert_eq!(claims[0]["namespace"], ns);
    assert_eq!(claims[0]["name"], claim_name.as_str());
    assert_eq!(claims[0]["uid"], uid.as_str());
    let prepared: BTreeMap<String, String> = claims[0]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            assert_eq!(d["driver"], DRIVER);
            assert_eq!(d["pool"], node);
            (
                strs(&d["requests"]).join(","),
                d["device"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: BTreeMap<String, String> = by_request
        .iter()
        .map(|(r, b)| (r.clone(), device(b)))
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
    let devices: BTreeMap<String, (String, i64, i64)> = out["oci"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["path"].as_str().unwrap().to_string(),
                (
                    d["type"].as_str().unwrap().to_string(),
                    d["major"].as_i64().unwrap(),
                    d["minor"].as_i64().unwrap(),
                ),
            )
        })
        .collect();
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
    assert_eq!(devices, want, "{}", out["oci"]);
    assert_eq!(out["oci"]["devices"].as_array().unwrap().len(), 3);

    // One metadata mount per request, read-only, where the protocol puts a
    // template's claim: resourceclaimtemplates/<pod claim>/<request>/.
    let mounts: BTreeMap<String, (String, Vec<String>)> = out["oci"]["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["destination"].as_str().unwrap().to_string(),
                (
                    m["source"].as_str().unwrap().to_string(),
                    strs(&m["options"]),
                ),
            )
        })
        .collect();
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
        assert!(options.contains(&"ro".to_string()), "{options:?}");
        assert!(Path::new(source).starts_with(dir.join("meta")), "{source}");
    }

    // The metadata as Kubernetes' reader decodes it: each request's device
    // with its pciBusID and pcieRoot, valid.
    let md = out["metadata"].as_array().unwrap();
    assert_eq!(md.len(), 2, "{}", out["metadata"]);
    let mut seen = BTreeSet::new();
    for m in md {
        assert_eq!(m["validation_error"], "", "{m}");
        assert_eq!(m["claim"]["name"], claim_name.as_str());
        assert_eq!(m["claim"]["namespace"], ns);
        assert_eq!(m["claim"]["uid"], uid.as_str());
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
    let checkpoint: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join(format!("plugins/{DRIVER}/checkpoint.json")))
            .expect("the driver's checkpoint"),
    )
    .expect("the checkpoint is JSON");
    assert!(
        checkpoint["claims"].get(&uid).is_none(),
        "the claim is still in the checkpoint: {checkpoint}"
    );
    for (source, _) in mounts.values() {
        assert!(!Path::new(source).exists(), "{source} is left");
    }
    let left: Vec<_> = std::fs::read_dir(&cdi)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        left.iter().all(|n| !n.to_string_lossy().contains(&uid)),
        "CDI specs left: {left:?}"
    );
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// A claim the scheduler could never have made: allocated (by an admin
/// writing its status) to 25:00.0, which the driver left out of its slices
/// (IOMMU group 9 also holds 26:00.0). The kubelet's own NodePrepareResources
/// call for it is refused by the driver naming the device; nothing is
/// prepared, no CDI spec written.
#[test]
fn a_claim_naming_a_device_the_driver_left_out_is_refused_through_the_kubelet() {
    let cp = ControlPlane::shared();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let node = "node-left-out";
    let (_driver, root) = node_with_driver(cp, node, dir);
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
    let node_kc = dir.join("node.kubeconfig");
    cp.node_kubeconfig(node, &node_kc);
    let cdi = dir.join("cdi");
    let (code, stdout, stderr) = kubelet_dra(
        dir,
        &[9],
        &[
            "--kubeconfig",
            node_kc.to_str().unwrap(),
            "--node",
            node,
            "--root",
            root.to_str().unwrap(),
            "--driver",
            DRIVER,
            "--pod",
            &format!("{ns}/vm"),
            "--cdi-dir",
            cdi.to_str().unwrap(),
            "--timeout",
            "90s",
        ],
    );
    eprintln!("kubelet-dra on the hand-made claim:\n{}", tail(&stderr));
    assert_ne!(code, Some(0), "prepare must fail:\n{stdout}");
    assert!(
        stderr.contains(&left_out),
        "the refusal names the device:\n{}",
        tail(&stderr)
    );
    let checkpoint =
        std::fs::read_to_string(root.join(format!("plugins/{DRIVER}/checkpoint.json")))
            .unwrap_or_default();
    assert!(
        !checkpoint.contains(pod["metadata"]["uid"].as_str().unwrap())
            && !checkpoint.contains(&left_out),
        "nothing prepared: {checkpoint}"
    );
    let specs = std::fs::read_dir(&cdi).map(|d| d.count()).unwrap_or(0);
    assert_eq!(specs, 0, "no CDI spec written");
}
