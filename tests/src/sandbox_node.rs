//! A booted node of the real control plane: `scripts/qemu/node.sh` starts a
//! QEMU guest (TCG) with systemd, containerd, runc, the CNI plugins,
//! Kubernetes' own kubelet and kube-proxy, and three stand-in GPUs (QEMU's
//! bochs-display, two below one PCIe switch) behind a vIOMMU; it joins the
//! control plane of [`ControlPlane::start_for_nodes`]. Commands run on it
//! through QEMU's guest agent (`node.sh exec`). Dropping it powers it off.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::kube::{helm_command, poll_every, ControlPlane};
use crate::{binary, repo_root};

/// The node's name.
pub const NODE: &str = "vp2p-node";
/// The PCI class of the stand-in GPUs (QEMU's bochs-display, a display
/// controller), which the driver is told to take as GPUs.
pub const GPU_CLASS: &str = "0380";

/// Held while a test's node runs: one guest at a time on two cores.
pub fn one_node_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A node booted for a control plane; powered off on drop.
pub struct SandboxNode {
    cp_dir: PathBuf,
    /// Seconds from QEMU's start to the Node being Ready.
    pub boot_seconds: f64,
}

/// `bash scripts/qemu/node.sh ARGS`: (exit status, stdout, stderr).
fn node_sh(args: &[&str]) -> (i32, String, String) {
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/qemu/node.sh"))
        .args(args)
        .output()
        .expect("bash runs scripts/qemu/node.sh");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// vp2p's images from the suite's debug binaries (scripts/image.sh) in
/// `dir`: the p2p-host archive, and with `vm` the vm-launcher's after it
/// (`--vm`, holding p2p-guest).
pub fn images(dir: &Path, vm: bool) -> Vec<PathBuf> {
    let mut cmd = Command::new("bash");
    cmd.arg(repo_root().join("scripts/image.sh"))
        .arg("--binary")
        .arg(binary("p2p-host"))
        .arg("--out")
        .arg(dir);
    if vm {
        cmd.arg("--vm").arg(binary("p2p-guest"));
    }
    let out = cmd.output().expect("bash runs scripts/image.sh");
    assert!(
        out.status.success(),
        "scripts/image.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names: &[&str] = if vm {
        &["p2p-host", "vm-launcher"]
    } else {
        &["p2p-host"]
    };
    names
        .iter()
        .map(|n| dir.join(format!("{n}-{}.oci.tar", env!("CARGO_PKG_VERSION"))))
        .inspect(|a| assert!(a.exists(), "{} was not written", a.display()))
        .collect()
}

impl SandboxNode {
    /// Boots [`NODE`] for `cp` with the OCI archives `images` imported, and
    /// waits (at most `limit`) until the Node is Ready.
    pub fn boot(cp: &ControlPlane, images: &[PathBuf], limit: Duration) -> Self {
        let dir = cp.dir().to_str().expect("a UTF-8 path").to_string();
        let limit = limit.as_secs().to_string();
        let mut args = vec![
            "up",
            dir.as_str(),
            "--name",
            NODE,
            "--timeout",
            limit.as_str(),
        ];
        let images: Vec<String> = images.iter().map(|p| p.display().to_string()).collect();
        for i in &images {
            args.extend(["--image", i.as_str()]);
        }
        let started = Instant::now();
        let (rc, out, err) = node_sh(&args);
        let node = Self {
            cp_dir: cp.dir().to_path_buf(),
            boot_seconds: started.elapsed().as_secs_f64(),
        };
        assert_eq!(
            rc,
            0,
            "node.sh up: {out}{err}\nconsole:\n{}",
            node.console_tail()
        );
        node
    }

    /// The last 40 lines of the node's serial console.
    pub fn console_tail(&self) -> String {
        let text = std::fs::read_to_string(self.cp_dir.join(format!("nodes/{NODE}/console.log")))
            .unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Runs `sh -c script` on the node as root: (exit status, stdout).
    pub fn try_sh(&self, script: &str) -> (i32, String) {
        let dir = self.cp_dir.to_str().expect("a UTF-8 path");
        let (rc, out, err) = node_sh(&["exec", dir, "--name", NODE, "--", "sh", "-c", script]);
        if rc != 0 && !err.is_empty() {
            eprintln!("node: `{script}` exited {rc}: {err}");
        }
        (rc, out)
    }

    /// Runs `sh -c script` on the node; its stdout. It must succeed.
    pub fn sh(&self, script: &str) -> String {
        let (rc, out) = self.try_sh(script);
        assert_eq!(rc, 0, "on the node: `{script}` exited {rc}: {out}");
        out
    }

    /// The driver (vfio-pci, nvme, ...) `bdf` is bound to on the node, or "".
    pub fn driver_of(&self, bdf: &str) -> String {
        let (_, out) = self.try_sh(&format!(
            "basename \"$(readlink /sys/bus/pci/devices/{bdf}/driver)\""
        ));
        out.trim().to_string()
    }

    /// The IOMMU group of `bdf` on the node.
    pub fn iommu_group(&self, bdf: &str) -> u64 {
        let out = self.sh(&format!(
            "basename \"$(readlink /sys/bus/pci/devices/{bdf}/iommu_group)\""
        ));
        out.trim().parse().expect("a group number")
    }

    /// The stand-in GPUs, as the node's sysfs lists them (class [`GPU_CLASS`]).
    pub fn gpus(&self) -> Vec<String> {
        let out = self.sh(&format!(
            "for f in /sys/bus/pci/devices/*; do [ \"$(cat $f/class)\" = 0x{GPU_CLASS}00 ] && basename $f; done; true"
        ));
        out.lines().map(str::to_string).collect()
    }

    /// The DRA driver's log lines on the node, every run of the
    /// DaemonSet's pods (the kubelet keeps them across a reboot).
    pub fn driver_log(&self) -> String {
        self.try_sh("cat /var/log/pods/kube-system_vp2p-dra-driver-*/driver/*.log 2>/dev/null")
            .1
    }

    /// Reboots the node (`systemctl reboot` in the guest; QEMU boots it
    /// again, its disk kept) and waits until the Node is Ready with another
    /// boot id; the seconds that took.
    pub fn reboot(&self, cp: &ControlPlane, limit: Duration) -> f64 {
        let boot_id = |cp: &ControlPlane| {
            cp.get_json(&["get", "node", NODE])["status"]["nodeInfo"]["bootID"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        let before = boot_id(cp);
        let started = Instant::now();
        // Later than the guest agent's answer, which a reboot would cut.
        self.sh("systemd-run --on-active=1 systemctl reboot");
        poll(
            "the node Ready again after its reboot",
            limit,
            || {
                let n = try_get(cp, &["node", NODE])?;
                let ready = n["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True");
                let id = n["status"]["nodeInfo"]["bootID"].as_str()?;
                (ready && id != before).then_some(())
            },
            || self.console_tail(),
        );
        started.elapsed().as_secs_f64()
    }

    /// The driver's log and `kubectl describe pod POD`: what a wait on the
    /// pod shows when it gives up.
    pub fn pod_context(&self, cp: &ControlPlane, pod: &str) -> String {
        format!(
            "{}\n{}",
            self.driver_log(),
            cp.try_kubectl(&["describe", "pod", pod])
                .unwrap_or_else(|e| e)
        )
    }

    /// The device nodes of container `id` (a CRI `containerd://` id or a
    /// bare one) in the OCI spec containerd holds for it.
    pub fn oci_devices(&self, id: &str) -> std::collections::BTreeSet<String> {
        let info = self.sh(&format!(
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

    /// Container `container` of pod `namespace/pod` (uid `uid`) as the
    /// kubelet's log files on the node hold it: (stream, text) per CRI log
    /// line (time, stream, tag, text).
    fn container_lines(
        &self,
        namespace: &str,
        pod: &str,
        uid: &str,
        container: &str,
    ) -> Vec<(String, String)> {
        let text = self.sh(&format!(
            "cat /var/log/pods/{namespace}_{pod}_{uid}/{container}/*.log"
        ));
        text.lines()
            .filter_map(|l| {
                let mut parts = l.splitn(4, ' ');
                let (_, stream, _) = (parts.next()?, parts.next()?, parts.next()?);
                Some((stream.to_string(), parts.next().unwrap_or("").to_string()))
            })
            .collect()
    }

    /// Both streams of container `container` of pod `namespace/pod` (uid
    /// `uid`), as they came.
    pub fn container_log(&self, namespace: &str, pod: &str, uid: &str, container: &str) -> String {
        self.container_lines(namespace, pod, uid, container)
            .into_iter()
            .map(|(_, text)| text + "\n")
            .collect()
    }

    /// The stdout of container `container` of pod `namespace/pod` (uid `uid`).
    pub fn container_stdout(
        &self,
        namespace: &str,
        pod: &str,
        uid: &str,
        container: &str,
    ) -> String {
        self.container_lines(namespace, pod, uid, container)
            .into_iter()
            .filter(|(stream, _)| stream == "stdout")
            .map(|(_, text)| text + "\n")
            .collect()
    }
}

impl Drop for SandboxNode {
    fn drop(&mut self) {
        let dir = self.cp_dir.to_str().unwrap_or_default().to_string();
        // The test is over: its disks go (gigabytes each), its console log stays.
        let _ = node_sh(&["down", dir.as_str(), "--name", NODE, "--discard"]);
    }
}

/// A control plane for nodes in target/kube-peers/runs/`run` (made anew)
/// and [`NODE`] booted for it with vp2p's images (the vm-launcher's too
/// with `vm`), Ready within 15 minutes. Bind both (`let (cp, node) =`):
/// the node is powered off before its control plane stops.
pub fn boot_node(run: &str, vm: bool) -> (ControlPlane, SandboxNode) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let archives = images(dir.path(), vm);
    let cp = ControlPlane::start_for_nodes(&crate::target_dir().join("kube-peers/runs").join(run));
    let node = SandboxNode::boot(&cp, &archives, Duration::from_secs(900));
    (cp, node)
}

/// `helm install vp2p` of the shipped chart into kube-system, the driver
/// told to take the stand-ins' class as GPUs; Helm's stdout.
pub fn helm_install(cp: &ControlPlane) -> String {
    let kubeconfig = cp.kubeconfig();
    let out = helm_command(&cp.dir().join("helm"))
        .args(["install", "vp2p"])
        .arg(repo_root().join("host/kubernetes/helm/vp2p"))
        .args(["--namespace", "kube-system", "--kubeconfig"])
        .arg(&kubeconfig)
        .arg(format!("--set=extraArgs={{--gpu-class,{GPU_CLASS}}}"))
        .output()
        .expect("helm runs");
    assert!(
        out.status.success(),
        "helm install: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The chart's driver pod once it is Ready (at most `limit`).
pub fn driver_pod_ready(cp: &ControlPlane, limit: Duration) -> Value {
    poll(
        "the driver's pod is Ready",
        limit,
        || {
            let pods = try_get(
                cp,
                &[
                    "-n",
                    "kube-system",
                    "pods",
                    "-l",
                    "app.kubernetes.io/name=vp2p-dra-driver",
                ],
            )?;
            let p = pods["items"].as_array()?.first()?.clone();
            let ready = p["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            ready.then_some(p)
        },
        || {
            cp.try_kubectl(&["-n", "kube-system", "describe", "pods"])
                .unwrap_or_else(|e| e)
        },
    )
}

/// Polls `f` every 2 s until it returns Some, at most `limit`; panics with
/// `what` and `context()` after.
pub fn poll<T>(
    what: &str,
    limit: Duration,
    f: impl FnMut() -> Option<T>,
    context: impl Fn() -> String,
) -> T {
    poll_every(what, limit, Duration::from_secs(2), f, context)
}

/// `kubectl get ARGS -o json`, or None when kubectl fails (not found yet).
pub fn try_get(cp: &ControlPlane, args: &[&str]) -> Option<Value> {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend(["-o", "json"]);
    let text = cp.try_kubectl(&a).ok()?;
    serde_json::from_str(&text).ok()
}
