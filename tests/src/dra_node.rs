//! A node for tests of `p2p-host dra driver`: a scratch directory laid out
//! as the kubelet's, ResourceClaim files the driver reads (`--claims-dir`),
//! copies of the captured nested-switch tree, the driver process, and
//! readers of what it writes (CDI specs, the checkpoint).

use crate::process::{SpawnOwned, Spawned};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::dra_kubelet::function_dir;
use crate::{binary, fixture_dir, repo_root};

/// The driver's name the tests run it with.
pub const DRIVER: &str = "gpu.vp2p.io";
/// The node (pool) name.
pub const NODE: &str = "node-a";

/// A device's name in the slices, derived by hand from its address:
/// `gpu-` and the address with `:` and `.` turned into `-`.
pub fn device(bdf: &str) -> String {
    format!("gpu-{}", bdf.replace([':', '.'], "-"))
}

/// A plain copy of the nested-switch tree (NVMe functions on nvme).
pub fn plain_tree(dir: &Path) -> PathBuf {
    let dst = dir.join("sysfs");
    let ok = Command::new("cp")
        .arg("-a")
        .arg(fixture_dir("qemu-11.1-nested-switch-iommu-on").join("sysfs"))
        .arg(&dst)
        .status()
        .unwrap();
    assert!(ok.success());
    dst
}

/// Lists `bdf` in IOMMU group `group` of the copy (kernel/iommu_groups), as
/// a platform whose ACS isolates less would.
pub fn add_to_group(tree: &Path, group: u32, bdf: &str) {
    let link = tree.join(format!("kernel/iommu_groups/{group}/devices/{bdf}"));
    std::os::unix::fs::symlink(function_dir(tree, bdf), link).unwrap();
}

/// A scratch directory laid out as a node: the kubelet root, CDI specs,
/// device metadata, ResourceClaim files.
pub struct Dirs {
    _tmp: tempfile::TempDir,
    /// The directory.
    pub root: PathBuf,
}

impl Default for Dirs {
    fn default() -> Self {
        Self::new()
    }
}

impl Dirs {
    /// A fresh one.
    pub fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        Self { _tmp: tmp, root }
    }
    /// The kubelet root.
    pub fn kubelet(&self) -> PathBuf {
        self.root.join("kubelet")
    }
    /// The registration socket.
    pub fn reg_socket(&self) -> PathBuf {
        self.kubelet()
            .join(format!("plugins_registry/{DRIVER}-reg.sock"))
    }
    /// The DRA socket.
    pub fn dra_socket(&self) -> PathBuf {
        self.kubelet().join(format!("plugins/{DRIVER}/dra.sock"))
    }
    /// The checkpoint, read now.
    pub fn checkpoint(&self) -> Value {
        let p = self
            .kubelet()
            .join(format!("plugins/{DRIVER}/checkpoint.json"));
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    }
    /// Where CDI specs go.
    pub fn cdi(&self) -> PathBuf {
        self.root.join("cdi")
    }
    /// The CDI spec of claim `uid`.
    pub fn spec(&self, uid: &str) -> PathBuf {
        self.cdi().join(format!("{DRIVER}-{uid}.json"))
    }
    /// Where device metadata goes.
    pub fn metadata(&self) -> PathBuf {
        self.root.join("metadata")
    }
    /// Where ResourceClaim files go (`--claims-dir`).
    pub fn claims(&self) -> PathBuf {
        self.root.join("claims")
    }

    /// Writes the ResourceClaim `namespace/name` with `results`
    /// ((request, driver, device) in pool NODE).
    pub fn claim(&self, namespace: &str, name: &str, uid: &str, results: &[(&str, &str, &str)]) {
        let results: Vec<Value> = results
            .iter()
            .map(|(r, d, dev)| json!({"request": r, "driver": d, "pool": NODE, "device": dev}))
            .collect();
        let obj = json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "spec": {"devices": {"requests": []}},
            "status": {"allocation": {"devices": {"results": results}}},
        });
        let dir = self.claims().join(namespace);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.json")), obj.to_string()).unwrap();
    }
}

/// The driver process, killed when dropped.
pub struct Plugin(pub Spawned);

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `p2p-host dra driver` on `tree` with `d`'s directories, claims
/// from `d.claims()`, the NVMe functions as GPUs, and `extra`; waits for the
/// registration socket.
pub fn start(d: &Dirs, tree: &Path, extra: &[&str]) -> Plugin {
    std::fs::create_dir_all(d.claims()).unwrap();
    let _ = std::fs::remove_file(d.reg_socket());
    let child = Command::new(binary("p2p-host"))
        .args(["dra", "driver", "--node-name", NODE, "--gpu-class", "0108"])
        .arg("--sysfs-root")
        .arg(tree)
        .arg("--kubelet-root")
        .arg(d.kubelet())
        .arg("--cdi-dir")
        .arg(d.cdi())
        .arg("--metadata-dir")
        .arg(d.metadata())
        .arg("--claims-dir")
        .arg(d.claims())
        .args(extra)
        .stdout(Stdio::null())
        .spawn_owned()
        .unwrap();
    let start = Instant::now();
    while !d.reg_socket().exists() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the registration socket appears"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Plugin(child)
}

/// A current-thread runtime for the stand-in's calls.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// vp2p's own schema of the CDI specification (tests/contracts).
pub fn schema() -> jsonschema::Validator {
    let text =
        std::fs::read_to_string(repo_root().join("tests/contracts/cdi-spec.schema.json")).unwrap();
    jsonschema::draft202012::new(&serde_json::from_str::<Value>(&text).unwrap()).unwrap()
}

/// A JSON file, naming it when it cannot be read.
pub fn read_json(p: &Path) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
    )
    .unwrap()
}

/// The spec's devices as (name, device node paths, mount container paths).
pub fn spec_devices(spec: &Value) -> Vec<(String, Vec<String>, Vec<String>)> {
    spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let strs = |k: &str, f: &str| -> Vec<String> {
                d["containerEdits"][k]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|x| x[f].as_str().unwrap().to_string())
                            .collect()
                    })
                    .unwrap_or_default()
            };
            (
                d["name"].as_str().unwrap().to_string(),
                strs("deviceNodes", "path"),
                strs("mounts", "containerPath"),
            )
        })
        .collect()
}
