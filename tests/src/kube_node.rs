//! A node of the real control plane ([`crate::kube::ControlPlane`]): a Node
//! object, a copy of a captured tree with its GPUs (and the NICs named)
//! relinked to vfio-pci, and `p2p-host dra driver` for it, authenticated as
//! the shipped ServiceAccount with a token the API server issued, bound by
//! the shipped ClusterRole. No kubelet runs; the kubelet's own DRA code is
//! `kube-peers kubelet-dra`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
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
    driver: Option<Child>,
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
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let tree = vfio_tree(fixture, tmp.path(), rdma_nics);
        cp.add_node(name, &[("vp2p.io/gpu-passthrough", "true")]);
        let kubeconfig = tmp.path().join("driver.kubeconfig");
        cp.token_kubeconfig(
            &cp.token("kube-system", "vp2p-dra-driver", Some(name)),
            &kubeconfig,
        );
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
        node.wait_published(cp);
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
            .spawn()
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
