//! A node of the real control plane ([`crate::kube::ControlPlane`]): a Node
//! object, a copy of a captured tree with its GPUs (and the NICs named)
//! relinked to vfio-pci, and `p2p-host dra driver` for it, authenticated as
//! the shipped ServiceAccount with a token the API server issued, bound by
//! the shipped ClusterRole. No kubelet runs; the kubelet's own DRA code is
//! `kube-peers kubelet-dra`, run here ([`spawn_kubelet_dra`]) for a
//! [`KubeletNode`] (a node whose tree the test makes) in a mount namespace
//! whose `/dev` has stand-in VFIO nodes, for a pod whose claim the real
//! scheduler allocated ([`two_peer_gpus_pod`]).

use crate::process::{SpawnOwned, Spawned};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::kube::ControlPlane;
use crate::{binary, fixture_dir};

/// The driver's name in the shipped manifests.
pub const DRIVER: &str = "gpu.vp2p.io";

/// Copies the captured tree `fixture` (its `sysfs/` directory) to
/// `dst/sysfs`, relinks every function of class 0x0108 (the NVMe stand-ins
/// of the QEMU captures' GPUs) and every function of `rdma_nics` to
/// vfio-pci, and gives each of `rdma_nics` an `infiniband/mlx5_<n>` entry, as
/// a ConnectX shows in sysfs (the captures' NIC is an emulated e1000e, which
/// has none: a staged edit of a real tree).
pub fn vfio_tree(fixture: &str, dst: &Path, rdma_nics: &[&str]) -> PathBuf {
    let tree = dst.join("sysfs");
    let ok = Command::new("cp")
        .arg("-a")
        .arg(fixture_dir(fixture).join("sysfs"))
        .arg(&tree)
        .status()
        .expect("cp runs");
    assert!(ok.success(), "copying {fixture}");
    let devices = tree.join("bus/pci/devices");
    for e in std::fs::read_dir(&devices).expect("bus/pci/devices") {
        let e = e.expect("an entry");
        let bdf = e.file_name().to_string_lossy().into_owned();
        let dev = std::fs::canonicalize(e.path()).expect("a device directory");
        let class = std::fs::read_to_string(dev.join("class")).unwrap_or_default();
        let nic = rdma_nics.iter().position(|n| *n == bdf);
        if !class.starts_with("0x0108") && nic.is_none() {
            continue;
        }
        relink(&tree, &dev, "vfio-pci");
        if let Some(n) = nic {
            std::fs::create_dir_all(dev.join(format!("infiniband/mlx5_{n}")))
                .expect("an infiniband entry");
        }
    }
    tree
}

/// Points the function directory `dev`'s `driver` link at `tree`'s
/// `bus/pci/drivers/<driver>`, relative as the kernel writes it.
pub fn relink(tree: &Path, dev: &Path, driver: &str) {
    let depth = dev
        .strip_prefix(std::fs::canonicalize(tree).expect("the tree"))
        .expect("the function lies in the tree")
        .components()
        .count();
    let target = PathBuf::from("../".repeat(depth))
        .join("bus/pci/drivers")
        .join(driver);
    let link = dev.join("driver");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(target, &link).expect("a driver link");
}

/// One simulated node and its driver process (killed when dropped).
pub struct SimNode {
    /// The node's name.
    pub name: String,
    /// The sysfs tree the driver reads.
    pub tree: PathBuf,
    /// The node's kubelet root (plugin sockets, checkpoint).
    pub kubelet: PathBuf,
    /// Where the driver writes CDI specs.
    pub cdi: PathBuf,
    /// The kubeconfig the driver runs with (its ServiceAccount's token).
    pub kubeconfig: PathBuf,
    driver: Option<Spawned>,
    _tmp: tempfile::TempDir,
}

impl SimNode {
    /// A Node `name` labelled for the DaemonSet, a vfio-pci copy of
    /// `fixture` (with `rdma_nics`), and the driver on it as
    /// `kube-system/vp2p-dra-driver` with a token bound to the Node; waits
    /// until the API server holds the node's slices.
    pub fn start(cp: &ControlPlane, name: &str, fixture: &str, rdma_nics: &[&str]) -> Self {
        Self::start_with(cp, name, fixture, rdma_nics, &[])
    }

    /// [`Self::start`] with more of the driver's options.
    pub fn start_with(
        cp: &ControlPlane,
        name: &str,
        fixture: &str,
        rdma_nics: &[&str],
        extra: &[&str],
    ) -> Self {
        let node = Self::start_as(cp, name, fixture, rdma_nics, "vp2p-dra-driver", extra);
        node.wait_published(cp);
        node
    }

    /// [`Self::start_with`] as ServiceAccount `kube-system/<account>`,
    /// without waiting for the slices.
    pub fn start_as(
        cp: &ControlPlane,
        name: &str,
        fixture: &str,
        rdma_nics: &[&str],
        account: &str,
        extra: &[&str],
    ) -> Self {
        cp.add_node(name, &[("vp2p.io/gpu-passthrough", "true")]);
        let token = cp.token("kube-system", account, Some(name));
        Self::with_token(cp, name, fixture, rdma_nics, &token, extra)
    }

    /// [`Self::start_with`] as the DaemonSet's pod would run it: a Pod of
    /// `kube-system/vp2p-dra-driver` bound to the node (no kubelet runs it)
    /// and a token bound to that Pod, which names the node as the API
    /// server's pod-bound tokens do, and outlives the Node object (a token
    /// bound to the Node does not).
    pub fn start_in_pod(cp: &ControlPlane, name: &str, fixture: &str, extra: &[&str]) -> Self {
        cp.add_node(name, &[("vp2p.io/gpu-passthrough", "true")]);
        let pod = format!("vp2p-dra-driver-{name}");
        let object = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": "kube-system"},
            "spec": {"nodeName": name, "serviceAccountName": "vp2p-dra-driver",
                     "containers": [{"name": "driver", "image": "localhost/vp2p/p2p-host:0.1.0"}]}});
        cp.create(&object.to_string())
            .unwrap_or_else(|e| panic!("creating pod {pod}: {e}"));
        let token = cp.pod_token("kube-system", "vp2p-dra-driver", &pod);
        let node = Self::with_token(cp, name, fixture, &[], &token, extra);
        node.wait_published(cp);
        node
    }

    /// The node's tree and the driver on it, authenticated with `token`.
    fn with_token(
        cp: &ControlPlane,
        name: &str,
        fixture: &str,
        rdma_nics: &[&str],
        token: &str,
        extra: &[&str],
    ) -> Self {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let tree = vfio_tree(fixture, tmp.path(), rdma_nics);
        let kubeconfig = tmp.path().join("driver.kubeconfig");
        cp.token_kubeconfig(token, &kubeconfig);
        let mut node = Self {
            name: name.to_string(),
            tree,
            kubelet: tmp.path().join("kubelet"),
            cdi: tmp.path().join("cdi"),
            kubeconfig,
            driver: None,
            _tmp: tmp,
        };
        node.start_driver(extra);
        node
    }

    /// (Re)starts the driver with `extra` arguments.
    pub fn start_driver(&mut self, extra: &[&str]) {
        self.stop_driver();
        let log = std::fs::File::create(self._tmp.path().join("driver.log")).expect("a log");
        let child = Command::new(binary("p2p-host"))
            .args([
                "dra",
                "driver",
                "--node-name",
                &self.name,
                "--gpu-class",
                "0108",
            ])
            .args(if extra.contains(&"--resync-ms") {
                &[][..]
            } else {
                &["--resync-ms", "1000"][..]
            })
            .arg("--sysfs-root")
            .arg(&self.tree)
            .arg("--kubelet-root")
            .arg(&self.kubelet)
            .arg("--cdi-dir")
            .arg(&self.cdi)
            .arg("--metadata-dir")
            .arg(self._tmp.path().join("metadata"))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(extra)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn_owned()
            .expect("p2p-host dra driver starts");
        self.driver = Some(child);
    }

    /// Sends the driver SIGTERM and waits for it to exit; its exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        let mut c = self.driver.take()?;
        // SAFETY: kill(2) on the pid of a child this process started and has not reaped.
        let r = unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        assert_eq!(r, 0, "SIGTERM to the driver");
        let start = std::time::Instant::now();
        loop {
            if let Some(s) = c.try_wait().expect("waiting for the driver") {
                return s.code();
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the driver stops on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The directory of the node's own files (the tree's parent).
    pub fn dir(&self) -> &Path {
        self._tmp.path()
    }

    /// Stops the driver (SIGKILL: nothing of a graceful stop).
    pub fn stop_driver(&mut self) {
        if let Some(mut c) = self.driver.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// What the driver printed.
    pub fn driver_log(&self) -> String {
        std::fs::read_to_string(self._tmp.path().join("driver.log")).unwrap_or_default()
    }

    /// Waits up to `within` for the driver to exit by itself; its exit
    /// code (None: still running, or killed by a signal).
    pub fn exited(&mut self, within: Duration) -> Option<i32> {
        let start = std::time::Instant::now();
        let c = self.driver.as_mut()?;
        while start.elapsed() < within {
            if let Some(s) = c.try_wait().expect("waiting for the driver") {
                self.driver = None;
                return s.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// The driver's checkpoint file.
    pub fn checkpoint(&self) -> PathBuf {
        self.kubelet
            .join(format!("plugins/{DRIVER}/checkpoint.json"))
    }

    /// The claims the driver's checkpoint records, by uid.
    pub fn recorded_claims(&self) -> serde_json::Map<String, Value> {
        let p = self.checkpoint();
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let cp: Value = serde_json::from_str(&text).expect("the checkpoint is JSON");
        cp["claims"].as_object().cloned().unwrap_or_default()
    }

    /// The driver's slices of this node on the API server.
    pub fn slices(&self, cp: &ControlPlane) -> Vec<Value> {
        let list = cp.get_json(&[
            "get",
            "resourceslices",
            "--field-selector",
            &format!("spec.nodeName={},spec.driver={DRIVER}", self.name),
        ]);
        list["items"].as_array().cloned().unwrap_or_default()
    }

    /// Waits until the node's slices are on the API server; the driver's
    /// log (an API error, a refusal of the shipped RBAC) when they are not.
    pub fn wait_published(&self, cp: &ControlPlane) -> Vec<Value> {
        let start = std::time::Instant::now();
        loop {
            let s = self.slices(cp);
            if !s.is_empty() {
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "node {}'s slices not published within 60 s; the driver said:\n{}",
                self.name,
                self.driver_log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// What `p2p-host dra slices --json` prints for this node's tree.
    pub fn expected_slices(&self) -> Value {
        let out = Command::new(binary("p2p-host"))
            .args([
                "dra",
                "slices",
                "--node-name",
                &self.name,
                "--gpu-class",
                "0108",
            ])
            .arg("--sysfs-root")
            .arg(&self.tree)
            .arg("--json")
            .output()
            .expect("p2p-host runs");
        assert!(
            out.status.success(),
            "dra slices: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("dra slices --json is JSON")
    }

    /// The `pciBusID` of each of the node's published devices, by name.
    pub fn bus_ids(&self, cp: &ControlPlane) -> std::collections::BTreeMap<String, String> {
        let mut m = std::collections::BTreeMap::new();
        for s in self.slices(cp) {
            for d in s["spec"]["devices"].as_array().into_iter().flatten() {
                let id = d["attributes"]["resource.kubernetes.io/pciBusID"]["string"]
                    .as_str()
                    .unwrap_or_default();
                m.insert(
                    d["name"].as_str().unwrap_or_default().to_string(),
                    id.to_string(),
                );
            }
        }
        m
    }
}

impl Drop for SimNode {
    fn drop(&mut self) {
        self.stop_driver();
    }
}

/// The DRA driver's manifests (ServiceAccount, RBAC, DaemonSet) and the
/// DeviceClasses, applied once per control plane (the tests of a module
/// share theirs, [`ControlPlane::shared`]; the modules of one test binary
/// each have their own).
pub fn dra_manifests(cp: &ControlPlane) {
    type Slot = &'static std::sync::OnceLock<()>;
    static APPLIED: std::sync::Mutex<std::collections::BTreeMap<PathBuf, Slot>> =
        std::sync::Mutex::new(std::collections::BTreeMap::new());
    // The map is held only to find the control plane's slot.
    let slot: Slot = *APPLIED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(cp.kubeconfig())
        .or_insert_with(|| Box::leak(Box::new(std::sync::OnceLock::new())));
    slot.get_or_init(|| {
        for f in ["driver.yaml", "deviceclasses.yaml"] {
            let text =
                std::fs::read_to_string(crate::repo_root().join("host/kubernetes/dra").join(f))
                    .expect("the manifest");
            cp.apply(&text)
                .unwrap_or_else(|e| panic!("kubectl apply -f {f}: {e}"));
        }
    });
}

/// A node for the kubelet's own DRA code (`kube-peers kubelet-dra`): a Node
/// labelled as a kubelet labels its node (`kubernetes.io/hostname`) and
/// `p2p-host dra driver` on a tree the test made, as the shipped
/// ServiceAccount with a token bound to the Node; its files in the test's
/// directory (`driver.log`, `kubelet/`, `cdi/`, `meta/`). The driver is
/// killed when dropped.
pub struct KubeletNode {
    /// The node's name (and the driver's pool).
    pub name: String,
    /// The test's directory.
    pub dir: PathBuf,
    /// The kubelet root the driver registers in.
    pub root: PathBuf,
    /// Where the driver writes CDI specs.
    pub cdi: PathBuf,
    /// Where the driver writes device metadata.
    pub meta: PathBuf,
    /// The driver process.
    pub driver: Spawned,
}

impl KubeletNode {
    /// Node `name` and the driver on `tree` with `extra` options; waits
    /// until its registration socket is there and its ResourceSlice
    /// published.
    pub fn start(cp: &ControlPlane, name: &str, dir: &Path, tree: &Path, extra: &[&str]) -> Self {
        dra_manifests(cp);
        cp.add_node(name, &[("kubernetes.io/hostname", name)]);
        let token = cp.token("kube-system", "vp2p-dra-driver", Some(name));
        let kubeconfig = dir.join("driver.kubeconfig");
        cp.token_kubeconfig(&token, &kubeconfig);
        let (root, cdi, meta) = (dir.join("kubelet"), dir.join("cdi"), dir.join("meta"));
        let log = std::fs::File::create(dir.join("driver.log")).expect("a log");
        let driver = Command::new(binary("p2p-host"))
            .args(["dra", "driver", "--node-name", name, "--gpu-class", "0108"])
            .args(extra)
            .arg("--sysfs-root")
            .arg(tree)
            .arg("--kubelet-root")
            .arg(&root)
            .arg("--cdi-dir")
            .arg(&cdi)
            .arg("--metadata-dir")
            .arg(&meta)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn_owned()
            .expect("p2p-host dra driver starts");
        let node = Self {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            root,
            cdi,
            meta,
            driver,
        };
        let reg = node
            .root
            .join(format!("plugins_registry/{DRIVER}-reg.sock"));
        let selector = format!("spec.nodeName={name}");
        cp.wait_for(
            &format!("the driver's registration socket and {name}'s ResourceSlice"),
            Duration::from_secs(60),
            || {
                let slices = cp.get_json(&["get", "resourceslices", "--field-selector", &selector]);
                let n = slices["items"].as_array().map_or(0, Vec::len);
                (reg.exists() && n > 0).then_some(())
            },
        );
        node
    }

    /// What the driver logged.
    pub fn driver_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("driver.log")).unwrap_or_default()
    }

    /// The driver's checkpoint (null when it has none).
    pub fn checkpoint(&self) -> Value {
        std::fs::read_to_string(self.root.join(format!("plugins/{DRIVER}/checkpoint.json")))
            .ok()
            .map_or(Value::Null, |t| {
                serde_json::from_str(&t).expect("the checkpoint is JSON")
            })
    }

    /// `kube-peers kubelet-dra`'s arguments for pod `namespace/name` on this
    /// node, as system:node:NAME (a kubeconfig written to the directory),
    /// with this node's CDI specs and a 90 s bound.
    pub fn kubelet_dra_args(&self, cp: &ControlPlane, pod: &str) -> Vec<String> {
        let kc = self.dir.join("node.kubeconfig");
        cp.node_kubeconfig(&self.name, &kc);
        let path = |p: &Path| p.to_str().expect("a UTF-8 path").to_string();
        [
            "--kubeconfig",
            &path(&kc),
            "--node",
            &self.name,
            "--root",
            &path(&self.root),
            "--driver",
            DRIVER,
            "--pod",
            pod,
            "--cdi-dir",
            &path(&self.cdi),
            "--timeout",
            "90s",
        ]
        .map(String::from)
        .to_vec()
    }
}

impl Drop for KubeletNode {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// A device node of the stand-in `/dev`: path, major, minor (a character
/// device).
pub type DevNode = (String, i64, i64);

/// /dev/vfio/vfio, the VFIO container's misc device (major 10, VFIO_MINOR
/// 196 in the kernel's include/linux/miscdevice.h).
pub const VFIO_CONTAINER: (i64, i64) = (10, 196);
/// The stand-in major of the VFIO group nodes (dynamic in the kernel).
pub const GROUP_MAJOR: i64 = 511;

/// The legacy VFIO nodes: /dev/vfio/vfio and `groups`' nodes, each group of
/// major [`GROUP_MAJOR`] and its index in `groups` as minor.
pub fn vfio_group_nodes(groups: &[u32]) -> Vec<DevNode> {
    let mut nodes = vec![(
        "/dev/vfio/vfio".to_string(),
        VFIO_CONTAINER.0,
        VFIO_CONTAINER.1,
    )];
    for (minor, g) in groups.iter().enumerate() {
        nodes.push((format!("/dev/vfio/{g}"), GROUP_MAJOR, minor as i64));
    }
    nodes
}

/// Starts `kube-peers kubelet-dra ARGS` in a mount namespace of its own
/// whose `/dev` is the machine's with an overlay adding `nodes` (standing in
/// for the node's `/dev` as a copied tree stands in for its sysfs: the CDI
/// library reads a device node's type and numbers from the host's `/dev`);
/// stdout and stderr go to `dir`'s kubelet-dra.out and .err. Needs root
/// (CAP_SYS_ADMIN and CAP_MKNOD) and `unshare`.
pub fn spawn_kubelet_dra(dir: &Path, nodes: &[DevNode], args: &[String]) -> Spawned {
    let ovl = dir.join("dev-overlay");
    std::fs::create_dir_all(&ovl).expect("the overlay's directory");
    let mut script = String::from(
        "set -e\n\
         mount -t tmpfs tmpfs \"$OVL\"\n\
         mkdir \"$OVL/upper\" \"$OVL/work\"\n\
         mount -t overlay overlay -o \"lowerdir=/dev,upperdir=$OVL/upper,workdir=$OVL/work\" /dev\n",
    );
    for (path, major, minor) in nodes {
        let parent = Path::new(path).parent().expect("a node in a directory");
        script.push_str(&format!(
            "mkdir -p {}\nrm -f {path}\nmknod {path} c {major} {minor}\n",
            parent.display()
        ));
    }
    script.push_str("exec \"$@\"\n");
    let file = |ext: &str| std::fs::File::create(dir.join(format!("kubelet-dra.{ext}"))).unwrap();
    Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
            "sh",
        ])
        .arg(crate::kube::kube_peers())
        .arg("kubelet-dra")
        .args(args)
        .env("OVL", &ovl)
        .stdin(Stdio::null())
        .stdout(file("out"))
        .stderr(file("err"))
        .spawn_owned()
        .expect("unshare runs (util-linux)")
}

/// Waits for a [`spawn_kubelet_dra`] run: (exit code, stdout, stderr).
pub fn finish_kubelet_dra(mut child: Spawned, dir: &Path) -> (Option<i32>, String, String) {
    let status = child.wait().expect("waiting for kubelet-dra");
    let read = |ext: &str| {
        std::fs::read_to_string(dir.join(format!("kubelet-dra.{ext}"))).unwrap_or_default()
    };
    (status.code(), read("out"), read("err"))
}

/// [`spawn_kubelet_dra`] run to its end.
pub fn kubelet_dra(
    dir: &Path,
    nodes: &[DevNode],
    args: &[String],
) -> (Option<i32>, String, String) {
    finish_kubelet_dra(spawn_kubelet_dra(dir, nodes, args), dir)
}

/// A claim the real scheduler allocated for a pod.
pub struct Allocated {
    /// The claim's name.
    pub name: String,
    /// Its uid.
    pub uid: String,
    /// The claim as the API server holds it.
    pub claim: Value,
    /// Request name: device name, as allocated (all of [`DRIVER`] in the
    /// node's pool).
    pub devices: std::collections::BTreeMap<String, String>,
}

/// Namespace `ns` with pod `vm` on `node` (by its `kubernetes.io/hostname`)
/// whose claim `peers` asks for two GPUs on one root complex (requests
/// `gpu0` and `gpu1` of `vp2p-gpu`, `matchAttribute: gpu.vp2p.io/cliquePhb`,
/// as in docs/kubevirt.md's DRA section): a claim of the template
/// `two-peer-gpus` when `template`, else the ResourceClaim `vm-gpus`. Waits
/// until the scheduler has allocated the claim, reserved it for the pod and
/// bound the pod to `node`.
pub fn two_peer_gpus_pod(cp: &ControlPlane, ns: &str, node: &str, template: bool) -> Allocated {
    use serde_json::json;
    let spec = json!({
        "requests": [
            {"name": "gpu0", "exactly": {"deviceClassName": "vp2p-gpu"}},
            {"name": "gpu1", "exactly": {"deviceClassName": "vp2p-gpu"}}],
        "constraints": [{"matchAttribute": "gpu.vp2p.io/cliquePhb"}]});
    let (claim, pod_claim) = if template {
        (
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                   "metadata": {"name": "two-peer-gpus", "namespace": ns},
                   "spec": {"spec": {"devices": spec}}}),
            json!({"name": "peers", "resourceClaimTemplateName": "two-peer-gpus"}),
        )
    } else {
        (
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                   "metadata": {"name": "vm-gpus", "namespace": ns},
                   "spec": {"devices": spec}}),
            json!({"name": "peers", "resourceClaimName": "vm-gpus"}),
        )
    };
    let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        claim,
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "vm", "namespace": ns},
         "spec": {
             "nodeSelector": {"kubernetes.io/hostname": node},
             "resourceClaims": [pod_claim],
             "containers": [{"name": "compute", "image": "registry.invalid/virt-launcher:0",
                             "resources": {"claims": [{"name": "peers"}]}}]}}]});
    cp.apply(&objects.to_string())
        .expect("the claim (template) and the pod");
    let (name, claim) = cp.wait_for(
        &format!("the pod bound to {node} with its claim allocated and reserved"),
        Duration::from_secs(120),
        || {
            let pod = cp.get_json(&["get", "pod", "vm", "-n", ns]);
            if pod["spec"]["nodeName"] != node {
                return None;
            }
            let name = if template {
                pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
                    .as_str()?
                    .to_string()
            } else {
                "vm-gpus".to_string()
            };
            let claim = cp.get_json(&["get", "resourceclaim", &name, "-n", ns]);
            let reserved = claim["status"]["reservedFor"]
                .as_array()
                .is_some_and(|r| r.iter().any(|c| c["uid"] == pod["metadata"]["uid"]));
            (claim["status"]["allocation"].is_object() && reserved).then_some((name, claim))
        },
    );
    let devices = claim["status"]["allocation"]["devices"]["results"]
        .as_array()
        .expect("the allocation's results")
        .iter()
        .map(|r| {
            assert_eq!(r["driver"], DRIVER, "{r}");
            assert_eq!(r["pool"], node, "{r}");
            (
                r["request"].as_str().expect("a request").to_string(),
                r["device"].as_str().expect("a device").to_string(),
            )
        })
        .collect();
    Allocated {
        name,
        uid: claim["metadata"]["uid"]
            .as_str()
            .expect("the claim's uid")
            .to_string(),
        claim,
        devices,
    }
}

/// The strings of a JSON array.
pub fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("an array: {v}"))
        .iter()
        .map(|s| s.as_str().expect("a string").to_string())
        .collect()
}

/// The last 30 lines of `s`.
pub fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// The devices of kubelet-dra's OCI spec (`out["oci"]`): path: (type,
/// major, minor).
pub fn oci_devices(oci: &Value) -> std::collections::BTreeMap<String, (String, i64, i64)> {
    oci["devices"]
        .as_array()
        .expect("the OCI spec's devices")
        .iter()
        .map(|d| {
            (
                d["path"].as_str().expect("a path").to_string(),
                (
                    d["type"].as_str().expect("a type").to_string(),
                    d["major"].as_i64().expect("a major"),
                    d["minor"].as_i64().expect("a minor"),
                ),
            )
        })
        .collect()
}

/// The mounts of kubelet-dra's OCI spec: destination: (source, options).
pub fn oci_mounts(oci: &Value) -> std::collections::BTreeMap<String, (String, Vec<String>)> {
    oci["mounts"]
        .as_array()
        .expect("the OCI spec's mounts")
        .iter()
        .map(|m| {
            (
                m["destination"]
                    .as_str()
                    .expect("a destination")
                    .to_string(),
                (
                    m["source"].as_str().expect("a source").to_string(),
                    strs(&m["options"]),
                ),
            )
        })
        .collect()
}
