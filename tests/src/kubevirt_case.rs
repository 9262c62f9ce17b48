//! The KubeVirt case the hook tests share (kubevirt_hook.rs: the sidecar as
//! the shim runs it; kubevirt_plugin_hook.rs: the plugin against a
//! virt-launcher stand-in; kubevirt_hook_client.rs: both through KubeVirt's
//! own client code): the captured two-socket node, the domains virt-launcher
//! sends, the VMI, how their results are read, and the plugin hook process.
//!
//! The node's "GPUs" are NVMe functions (hence `vp2p.io/gpu-class: 0108`); at
//! PHB its cliques are boot.sh's table: 23:00.0 and 24:00.0 below one switch
//! share clique 0, 41:00.0 (another root port) is 1, 83:00.0 (the other
//! socket) is 2.

use crate::process::{SpawnOwned, Spawned};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::libvirt::DomainView;
use crate::{binary, fixture_dir, repo_root};

/// The captured tree the hooks read as the node's sysfs.
pub const TREE: &str = "qemu-11.1-two-socket-iommu-on";

/// The `hooks.kubevirt.io/hookSidecars` annotation asking for vp2p's sidecar.
pub const HOOK_SIDECARS: &str =
    "[{\"args\":[\"--version\",\"v1alpha3\"],\"image\":\"localhost/vp2p/kubevirt-hook:0.1.0\"}]";

/// The domain KubeVirt 1.9.0's plugin pipeline sends
/// (tests/fixtures/domains/kubevirt-1.9-plugin-hook.xml).
pub fn plugin_domain() -> String {
    domain_fixture("kubevirt-1.9-plugin-hook.xml")
}

/// The domain virt-launcher passes to a sidecar
/// (tests/fixtures/domains/kubevirt-virt-launcher.xml).
pub fn sidecar_domain() -> String {
    domain_fixture("kubevirt-virt-launcher.xml")
}

fn domain_fixture(name: &str) -> String {
    let p = repo_root().join("tests/fixtures/domains").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A VMI as virt-launcher marshals it: four GPUs, vp2p's GPU class, and
/// `annotations` added.
pub fn vmi(annotations: &[(&str, &str)]) -> String {
    vmi_value(annotations).to_string()
}

/// [`vmi`] asking for vp2p's sidecar (`hooks.kubevirt.io/hookSidecars`).
pub fn sidecar_vmi(annotations: &[(&str, &str)]) -> String {
    let mut v = vmi_value(annotations);
    v["metadata"]["annotations"]["hooks.kubevirt.io/hookSidecars"] = json!(HOOK_SIDECARS);
    v.to_string()
}

fn vmi_value(annotations: &[(&str, &str)]) -> Value {
    let mut ann = json!({
        "kubevirt.io/latest-observed-api-version": "v1",
        "vp2p.io/gpu-class": "0108",
    });
    for (k, v) in annotations {
        ann[*k] = Value::String(v.to_string());
    }
    json!({
        "kind": "VirtualMachineInstance",
        "apiVersion": "kubevirt.io/v1",
        "metadata": {"name": "train-01", "namespace": "gpu-jobs", "annotations": ann,
                     "uid": "0c5e1f7a-3b2d-4e8f-9a61-7d4c2b8e5f13"},
        "spec": {"domain": {"devices": {"gpus": [
            {"name": "gpu1", "deviceName": "nvidia.com/GH100_H200"},
            {"name": "gpu2", "deviceName": "nvidia.com/GH100_H200"},
            {"name": "gpu3", "deviceName": "nvidia.com/GH100_H200"},
            {"name": "gpu4", "deviceName": "nvidia.com/GH100_H200"}]}}},
        "status": {"phase": "Scheduled", "nodeName": "gpu-node-07"}
    })
}

/// `(host address, clique)` pairs, as written by hand.
pub fn hand(v: &[(&str, u8)]) -> Vec<(String, u8)> {
    v.iter().map(|(b, c)| (b.to_string(), *c)).collect()
}

/// boot.sh's cliques at PHB for the VMI's four GPUs on [`TREE`].
pub fn boot_sh_cliques() -> Vec<(String, u8)> {
    hand(&[
        ("0000:23:00.0", 0),
        ("0000:24:00.0", 0),
        ("0000:41:00.0", 1),
        ("0000:83:00.0", 2),
    ])
}

/// The cliques a domain gives its hostdevs, by host address.
pub fn cliques(xml: &str) -> Vec<(String, u8)> {
    DomainView::parse(xml).cliques().into_iter().collect()
}

/// libvirt's schema is stricter than its parser on two things virt-launcher
/// writes (empty `<bios>`/`<baseBoard>`/`<chassis>` in sysinfo, `type="pci"`
/// on a hostdev's source address in Go's tab-indented DomainSpec): both go
/// before validating.
pub fn schema_form(xml: &str) -> String {
    xml.lines()
        .filter(|l| {
            !matches!(
                l.trim(),
                "<bios></bios>" | "<baseBoard></baseBoard>" | "<chassis></chassis>"
            )
        })
        .map(|l| {
            // Source addresses are the only ones four tabs deep.
            if l.starts_with("\t\t\t\t") && l.trim_start().starts_with("<address type=\"pci\" ") {
                l.replacen("<address type=\"pci\" ", "<address ", 1)
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What `p2p-host kubevirt on-define-domain` (the sidecar path) prints on
/// [`TREE`].
pub fn on_define_domain(vmi: &str, domain: &str) -> String {
    let out = Command::new(binary("p2p-host"))
        .args(["kubevirt", "on-define-domain", "--vmi", vmi])
        .args(["--domain", domain])
        .env("VP2P_SYSFS_ROOT", fixture_dir(TREE))
        .output()
        .expect("p2p-host runs");
    assert!(
        out.status.success(),
        "on-define-domain: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("a UTF-8 domain")
}

/// A `p2p-host` server on a unix socket over [`TREE`] (the plugin hook):
/// stopped with SIGTERM by [`HookProcess::stop`], killed if dropped.
pub struct HookProcess {
    child: Spawned,
    /// The socket it serves.
    pub socket: PathBuf,
    log: Receiver<String>,
}

impl Drop for HookProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl HookProcess {
    /// `p2p-host ARGS --socket SOCKET`, once the socket exists.
    pub fn start(socket: &Path, args: &[String]) -> Self {
        let mut child = Command::new(binary("p2p-host"))
            .args(args)
            .arg("--socket")
            .arg(socket)
            .env("VP2P_SYSFS_ROOT", fixture_dir(TREE))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn_owned()
            .expect("p2p-host starts");
        let err = BufReader::new(child.stderr.take().expect("piped stderr"));
        let (tx, log) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in err.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "no socket within 20 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            child,
            socket: socket.to_path_buf(),
            log,
        }
    }

    /// `p2p-host kubevirt plugin-hook` at `DIR/kubevirt-plugin/vp2p/hook.sock`,
    /// where the pod has it.
    pub fn plugin_hook_in(dir: &Path) -> Self {
        Self::start(
            &dir.join("kubevirt-plugin/vp2p/hook.sock"),
            &["kubevirt".into(), "plugin-hook".into()],
        )
    }

    /// SIGTERM; the exit status and everything logged.
    pub fn stop(mut self) -> (Option<i32>, String) {
        // SAFETY: kill(2) on the pid of a child not waited for yet.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let status = self.child.wait().expect("the hook is waited for");
        let log: Vec<String> = self.log.try_iter().collect();
        (status.code(), log.join("\n"))
    }
}

/// Checks a domain with the guest tree mirrored from [`TREE`] (annotation
/// `vp2p.io/guest-topology: mirror`), against boot.sh's layout: valid in
/// schema form; 23:00.0 on NUMA node 0 and 83:00.0 on node 1 (below their
/// expander buses); 41:00.0 on a root port of an expander bus of its own;
/// the NCCL file inline in fw_cfg. Returns the parsed view for more checks.
pub fn assert_mirrored(xml: &str) -> DomainView {
    crate::libvirt::validate(&schema_form(xml)).unwrap_or_else(|e| panic!("{e}\n{xml}"));
    let v = DomainView::parse(xml);
    assert_eq!(v.chain("0000:23:00.0").1, Some(0), "{xml}");
    assert_eq!(
        v.chain("0000:41:00.0").0,
        vec!["pcie-root-port", "pcie-expander-bus"],
        "{xml}"
    );
    assert_eq!(v.chain("0000:83:00.0").1, Some(1), "{xml}");
    let (file, text) = &v.fw_cfg["opt/vp2p/nccl-topo.xml"];
    assert!(
        file.is_none() && text.starts_with("<system version=\"1\">"),
        "the NCCL file inline: {text}"
    );
    v
}
