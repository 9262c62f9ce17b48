//! `p2p-host device-plugin` driven by the kubelet's own device-manager code:
//! `kube-peers device-manager` (tests/kube/kubelet/devicemanager.go) serves
//! the registration server of k8s.io/kubernetes v1.37's
//! pkg/kubelet/cm/devicemanager/plugin/v1beta1 on DIR/kubelet.sock, whose
//! plugin client dials the plugin's endpoint and runs ListAndWatch; then
//! GetPreferredAllocation and Allocate through that client. No control plane:
//! a device plugin talks only to its kubelet.
//!
//! The trees, copied with GPUs relinked to vfio-pci, and what the kubelet
//! must see of them, read by hand from the fixtures (`driver`, `numa_node`
//! and `iommu_group` of each function; kernel/iommu_groups):
//! - qemu-11.1-nested-switch-iommu-on, its five NVMe functions (1b36:0010)
//!   all on vfio-pci: 25:00.0 and 26:00.0 in group 9, 27:00.0 group 10,
//!   28:00.0 group 11 (NUMA 0), 81:00.0 group 5 (NUMA 1);
//! - qemu-11.1-two-socket-iommu-on, six of its seven NVMe functions on
//!   vfio-pci (01:00.0 on pcie.0, numa_node -1, group 6, is left on nvme and
//!   must not be offered): 23:00.0 group 16, 24:00.0 group 17, 26:00.0
//!   group 19, 41:00.0 group 12 (NUMA 0), 83:00.0 group 9, 84:00.0 group 10
//!   (NUMA 1);
//! - h200x4-passthrough-guest, the four H200s 00:06.0..00:09.0 (numa_node
//!   -1: no topology) with an operator's NVLink map linking 07 and 09; the
//!   guest had no IOMMU, so its tree has no groups: Allocate is refused as
//!   such, and a copy gets groups 30..33 (one per GPU, made here) for the
//!   allocations.
//!
//! Each preferred allocation is compared with `p2p-host allocate` on the
//! same tree, available set, size and must-include.

use p2p_tests::process::{SpawnOwned, Spawned};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use p2p_tests::kube::kube_peers;
use p2p_tests::kubelet::{rebind, Plugin};
use p2p_tests::{binary, fixture_dir, run, unpack_fixture};
use serde_json::{json, Value};

/// One GPU as the kubelet must see it, by hand from the fixture.
#[derive(Clone, Copy)]
struct Gpu {
    id: &'static str,
    numa: Option<i64>,
    group: Option<u32>,
}

const fn gpu(id: &'static str, numa: Option<i64>, group: Option<u32>) -> Gpu {
    Gpu { id, numa, group }
}

/// A copied tree, the plugin's arguments for it and `allocate`'s.
struct Tree {
    _tmp: tempfile::TempDir,
    _unpacked: Option<tempfile::TempDir>,
    sysfs: PathBuf,
    resource: &'static str,
    /// The plugin's socket name for `resource`, by hand.
    endpoint: &'static str,
    /// KubeVirt's variable for `resource`, by hand.
    env: &'static str,
    /// The GPUs on vfio-pci, in address order.
    gpus: Vec<Gpu>,
    /// `p2p-host device-plugin` arguments besides the directories.
    plugin_args: Vec<String>,
    /// `p2p-host allocate` arguments besides the question.
    allocate_args: Vec<String>,
}

const NVME: &str = "vp2p.io/nvme";
const NVME_SOCKET: &str = "vp2p-vp2p_io_nvme.sock";
const NVME_ENV: &str = "PCI_RESOURCE_VP2P_IO_NVME";

fn copy_tree(src: &Path, dst: &Path) {
    let ok = Command::new("cp")
        .arg("-a")
        .arg(src)
        .arg(dst)
        .status()
        .unwrap();
    assert!(ok.success(), "cp -a {}", src.display());
}

/// An NVMe tree of qemu-11.1 with `gpus` relinked to vfio-pci; `allocate`
/// is told the same GPUs (`--gpus`), as the plugin offers exactly those.
fn nvme_tree(fixture: &str, gpus: &[Gpu]) -> Tree {
    let tmp = tempfile::tempdir().unwrap();
    let sysfs = tmp.path().join("sysfs");
    copy_tree(&fixture_dir(fixture).join("sysfs"), &sysfs);
    for g in gpus {
        rebind(&sysfs, g.id, "vfio-pci");
    }
    let list: Vec<&str> = gpus.iter().map(|g| g.id).collect();
    Tree {
        _tmp: tmp,
        _unpacked: None,
        sysfs,
        resource: NVME,
        endpoint: NVME_SOCKET,
        env: NVME_ENV,
        gpus: gpus.to_vec(),
        plugin_args: ["--selector", "1b36:0010"].map(String::from).to_vec(),
        allocate_args: vec!["--gpus".into(), list.join(",")],
    }
}

const NESTED: [Gpu; 5] = [
    gpu("0000:25:00.0", Some(0), Some(9)),
    gpu("0000:26:00.0", Some(0), Some(9)),
    gpu("0000:27:00.0", Some(0), Some(10)),
    gpu("0000:28:00.0", Some(0), Some(11)),
    gpu("0000:81:00.0", Some(1), Some(5)),
];

fn nested_switch() -> Tree {
    nvme_tree("qemu-11.1-nested-switch-iommu-on", &NESTED)
}

/// 01:00.0 stays on nvme.
const TWO_SOCKET: [Gpu; 6] = [
    gpu("0000:23:00.0", Some(0), Some(16)),
    gpu("0000:24:00.0", Some(0), Some(17)),
    gpu("0000:26:00.0", Some(0), Some(19)),
    gpu("0000:41:00.0", Some(0), Some(12)),
    gpu("0000:83:00.0", Some(1), Some(9)),
    gpu("0000:84:00.0", Some(1), Some(10)),
];

fn two_socket() -> Tree {
    let t = nvme_tree("qemu-11.1-two-socket-iommu-on", &TWO_SOCKET);
    // By hand: the function left out is still on nvme in the copy.
    let drv = std::fs::read_link(t.sysfs.join("bus/pci/devices/0000:01:00.0/driver")).unwrap();
    assert_eq!(drv.file_name().unwrap(), "nvme");
    t
}

const H200_RESOURCE: &str = "nvidia.com/GH100_H200_SXM_141GB";

/// The 4x H200 guest's tree, GPUs on vfio-pci, the operator's NVLink map
/// (07-09 only); with `groups`, each GPU gets an IOMMU group of its own
/// (30..33), made as the kernel shows one.
fn h200(groups: bool) -> Tree {
    let ids = [
        "0000:00:06.0",
        "0000:00:07.0",
        "0000:00:08.0",
        "0000:00:09.0",
    ];
    let unpacked = unpack_fixture("h200x4-passthrough-guest");
    let tmp = tempfile::tempdir().unwrap();
    let sysfs = tmp.path().join("sysfs");
    copy_tree(&unpacked.path().join("sysfs"), &sysfs);
    let groups_dir = sysfs.join("kernel/iommu_groups");
    // By hand: the guest had no IOMMU.
    assert_eq!(std::fs::read_dir(&groups_dir).unwrap().count(), 0);
    let mut gpus = Vec::new();
    for (i, id) in ids.into_iter().enumerate() {
        rebind(&sysfs, id, "vfio-pci");
        let group = groups.then_some(30 + i as u32);
        if let Some(g) = group {
            let dev = std::fs::canonicalize(sysfs.join("bus/pci/devices").join(id)).unwrap();
            let gdir = groups_dir.join(g.to_string());
            std::fs::create_dir_all(gdir.join("devices")).unwrap();
            std::os::unix::fs::symlink(&dev, gdir.join("devices").join(id)).unwrap();
            std::os::unix::fs::symlink(&gdir, dev.join("iommu_group")).unwrap();
        }
        gpus.push(gpu(id, None, group));
    }
    let map = tmp.path().join("nvlink.json");
    std::fs::write(
        &map,
        r#"{"links": [{"a": "0000:00:07.0", "b": "0000:00:09.0", "count": 18}]}"#,
    )
    .unwrap();
    let nvlink = [
        "--no-nvml".to_string(),
        "--nvlink".into(),
        map.display().to_string(),
    ];
    Tree {
        _tmp: tmp,
        _unpacked: Some(unpacked),
        sysfs,
        resource: H200_RESOURCE,
        endpoint: "vp2p-nvidia_com_GH100_H200_SXM_141GB.sock",
        env: "PCI_RESOURCE_NVIDIA_COM_GH100_H200_SXM_141GB",
        gpus,
        plugin_args: nvlink.to_vec(),
        allocate_args: nvlink.to_vec(),
    }
}

/// What one `kube-peers device-manager` run ended with.
struct Outcome {
    ok: bool,
    stdout: String,
    stderr: String,
    plugin_log: String,
    kubelet_dir: PathBuf,
    _dir: tempfile::TempDir,
}

impl Outcome {
    fn json(&self) -> Value {
        assert!(
            self.ok,
            "kube-peers device-manager failed:\n{}\nplugin:\n{}",
            self.stderr, self.plugin_log
        );
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("one JSON object on stdout ({e}):\n{}", self.stdout))
    }
}

/// Which one starts first.
#[derive(PartialEq)]
enum Order {
    /// The kubelet, then the plugin (as a DaemonSet's pod starts).
    KubeletFirst,
    /// The plugin, then the kubelet.
    PluginFirst,
}

fn start_plugin(tree: &Tree, kubelet_dir: &Path, log: &Path) -> Plugin {
    Plugin(
        Command::new(binary("p2p-host"))
            .args(["device-plugin", "--resource", tree.resource])
            .args(&tree.plugin_args)
            .arg("--kubelet-dir")
            .arg(kubelet_dir)
            .arg("--sysfs-root")
            .arg(&tree.sysfs)
            .args(["--poll-ms", "100"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn_owned()
            .expect("p2p-host device-plugin starts"),
    )
}

/// Runs `kube-peers device-manager --size SIZE [--must-include] [--available]`
/// with the plugin on `tree`, both in a fresh device-plugins directory.
fn device_manager_in_order(
    tree: &Tree,
    size: usize,
    must: &[&str],
    available: Option<&[&str]>,
    timeout: &str,
    order: Order,
) -> Outcome {
    let (dir, kubelet_dir) = fresh_dir();
    let plugin_log = dir.path().join("plugin.log");
    let mut _plugin = None;
    if order == Order::PluginFirst {
        _plugin = Some(start_plugin(tree, &kubelet_dir, &plugin_log));
        // Its socket is up: it is serving and trying to register.
        wait_until("the plugin's socket", Duration::from_secs(120), || {
            kubelet_dir.join(tree.endpoint).exists()
        });
    }
    let mut extra = Vec::new();
    if !must.is_empty() {
        extra.extend(["--must-include".to_string(), must.join(",")]);
    }
    if let Some(a) = available {
        extra.extend(["--available".to_string(), a.join(",")]);
    }
    let mut child = spawn_device_manager(&dir, tree.resource, size, timeout, &extra);
    if order == Order::KubeletFirst {
        let sock = kubelet_dir.join("kubelet.sock");
        wait_until(
            "the kubelet's kubelet.sock",
            Duration::from_secs(120),
            || sock.exists() || child.0.try_wait().ok().flatten().is_some(),
        );
        _plugin = Some(start_plugin(tree, &kubelet_dir, &plugin_log));
    }
    outcome(child, _plugin, dir, kubelet_dir)
}

/// A temporary directory with an empty device-plugins directory in it (the
/// logs go beside that).
fn fresh_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let kubelet_dir = dir.path().join("device-plugins");
    std::fs::create_dir(&kubelet_dir).unwrap();
    (dir, kubelet_dir)
}

/// Starts `kube-peers device-manager` on DIR/device-plugins for `resource`,
/// `size` and `extra` arguments, its stderr in DIR/kube-peers.log.
fn spawn_device_manager(
    dir: &tempfile::TempDir,
    resource: &str,
    size: usize,
    timeout: &str,
    extra: &[String],
) -> KubePeers {
    KubePeers(
        Command::new(kube_peers())
            .arg("device-manager")
            .arg("--dir")
            .arg(dir.path().join("device-plugins"))
            .args(["--resource", resource, "--size", &size.to_string()])
            .args(["--timeout", timeout])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.path().join("kube-peers.log")).unwrap())
            .spawn_owned()
            .expect("kube-peers device-manager starts"),
    )
}

/// Waits for kube-peers to end, stops the plugin, and reads what both said
/// (DIR/kube-peers.log, DIR/plugin.log).
fn outcome(
    mut child: KubePeers,
    plugin: Option<Plugin>,
    dir: tempfile::TempDir,
    kubelet_dir: PathBuf,
) -> Outcome {
    let mut stdout = String::new();
    child
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let status = child.0.wait().unwrap();
    drop(plugin);
    let read = |name| std::fs::read_to_string(dir.path().join(name)).unwrap_or_default();
    Outcome {
        ok: status.success(),
        stdout,
        stderr: read("kube-peers.log"),
        plugin_log: read("plugin.log"),
        kubelet_dir,
        _dir: dir,
    }
}

fn device_manager(tree: &Tree, size: usize, must: &[&str], available: Option<&[&str]>) -> Outcome {
    device_manager_in_order(tree, size, must, available, "60s", Order::KubeletFirst)
}

/// kube-peers, killed if a failed assertion leaves it running.
struct KubePeers(Spawned);

impl Drop for KubePeers {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `p2p-host allocate`'s first line for the same question.
fn allocate_cli(tree: &Tree, available: &[&str], must: &[&str], size: usize) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "allocate".into(),
        "--sysfs-root".into(),
        tree.sysfs.display().to_string(),
    ];
    args.extend(tree.allocate_args.iter().cloned());
    args.extend([
        "--available".into(),
        available.join(","),
        "--size".into(),
        size.to_string(),
    ]);
    if !must.is_empty() {
        args.extend(["--must-include".into(), must.join(",")]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = run("p2p-host", &args);
    assert_eq!(r.code, Some(0), "allocate {args:?}: {}", r.stderr);
    r.stdout
        .lines()
        .next()
        .unwrap()
        .split(',')
        .map(str::to_string)
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("a list: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// Asks for `size` (with `must` and `available`) and checks the whole answer
/// against the fixture and `p2p-host allocate`; the preferred ids.
fn check(tree: &Tree, size: usize, must: &[&str], available: Option<&[&str]>) -> Vec<String> {
    let what = format!(
        "{} size {size} must {must:?} available {available:?}",
        tree.resource
    );
    let out = device_manager(tree, size, must, available);
    let j = out.json();

    // Registration as the kubelet's server took it: the resource, the
    // endpoint it dialled (DIR joined with the plugin's socket name) and the
    // options it asked on connecting.
    assert_eq!(j["resource"], tree.resource, "{what}");
    assert_eq!(
        j["endpoint"],
        out.kubelet_dir.join(tree.endpoint).display().to_string(),
        "{what}"
    );
    assert_eq!(
        j["options"],
        json!({"pre_start_required": false, "get_preferred_allocation_available": true}),
        "{what}"
    );

    // ListAndWatch's first list: exactly the tree's GPUs on vfio-pci.
    let want_devices: Vec<Value> = tree
        .gpus
        .iter()
        .map(|g| json!({"id": g.id, "health": "Healthy", "numa": g.numa.into_iter().collect::<Vec<_>>()}))
        .collect();
    assert_eq!(j["devices"], Value::from(want_devices), "{what}");

    // GetPreferredAllocation is allocate's answer.
    let all: Vec<&str> = tree.gpus.iter().map(|g| g.id).collect();
    let asked = available.unwrap_or(&all);
    assert_eq!(strings(&j["request"]["available"]), asked, "{what}");
    let preferred = strings(&j["preferred"]);
    // `allocate` is asked with the GPUs in address order: the kubelet sends
    // its available set in map order, so the answer must not hang on it.
    let mut sorted = asked.to_vec();
    sorted.sort();
    assert_eq!(preferred, allocate_cli(tree, &sorted, must, size), "{what}");
    assert_eq!(preferred.len(), size, "{what}");

    // Allocate: /dev/vfio/vfio and the chosen GPUs' groups, KubeVirt's
    // variable with the addresses, nothing else.
    let groups: BTreeSet<u32> = preferred
        .iter()
        .map(|p| {
            tree.gpus
                .iter()
                .find(|g| g.id == p)
                .and_then(|g| g.group)
                .unwrap()
        })
        .collect();
    let mut want_paths: BTreeSet<String> =
        groups.iter().map(|g| format!("/dev/vfio/{g}")).collect();
    want_paths.insert("/dev/vfio/vfio".into());
    let a = &j["allocate"];
    let specs = a["devices"].as_array().unwrap();
    assert_eq!(specs.len(), want_paths.len(), "{what}: {specs:?}");
    let mut got_paths = BTreeSet::new();
    for s in specs {
        assert_eq!(s["container_path"], s["host_path"], "{what}");
        assert_eq!(s["permissions"], "mrw", "{what}");
        got_paths.insert(s["host_path"].as_str().unwrap().to_string());
    }
    assert_eq!(got_paths, want_paths, "{what}");
    let envs: BTreeMap<String, String> = serde_json::from_value(a["envs"].clone()).unwrap();
    assert_eq!(
        envs,
        BTreeMap::from([(tree.env.to_string(), preferred.join(","))]),
        "{what}"
    );
    assert_eq!(a["mounts"], json!([]), "{what}");
    assert_eq!(a["annotations"], json!({}), "{what}");
    assert_eq!(a["cdi_devices"], json!([]), "{what}");
    preferred
}

#[test]
fn nested_switch_through_the_kubelets_device_manager() {
    let t = nested_switch();
    let mut answers = Vec::new();
    for size in 1..=4 {
        answers.push(check(&t, size, &[], None));
    }
    // By hand (docs/choosing.md): one GPU of five is 81:00.0, leaving the
    // other four one block; two are the PIX pair 25/26.
    assert_eq!(answers[0], ["0000:81:00.0"]);
    assert_eq!(answers[1], ["0000:25:00.0", "0000:26:00.0"]);
    check(&t, 2, &["0000:81:00.0"], None);
    check(&t, 3, &["0000:28:00.0"], None);
    // A smaller available set, in the kubelet's (map) order rather than
    // address order.
    check(
        &t,
        2,
        &[],
        Some(&["0000:81:00.0", "0000:28:00.0", "0000:27:00.0"]),
    );
}

#[test]
fn two_socket_through_the_kubelets_device_manager() {
    let t = two_socket();
    for size in 1..=4 {
        check(&t, size, &[], None);
    }
    check(&t, 2, &["0000:83:00.0"], None);
    check(
        &t,
        3,
        &["0000:41:00.0"],
        Some(&[
            "0000:84:00.0",
            "0000:41:00.0",
            "0000:23:00.0",
            "0000:83:00.0",
            "0000:26:00.0",
        ]),
    );
}

#[test]
fn h200_nvlinks_through_the_kubelets_device_manager() {
    let t = h200(true);
    let mut answers = Vec::new();
    for size in 1..=4 {
        answers.push(check(&t, size, &[], None));
    }
    // By hand: the only NVLinked pair.
    assert_eq!(answers[1], ["0000:00:07.0", "0000:00:09.0"]);
    check(&t, 2, &["0000:00:06.0"], None);
}

/// kube-peers' one-line reason on stderr (the kubelet's goroutines may still
/// log a line after it: a plugin's retried Register, a ListAndWatch ended).
fn failure(out: &Outcome) -> &str {
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("kube-peers: "))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "{}\nplugin:\n{}",
        out.stderr,
        out.plugin_log
    );
    lines[0]
}

/// Without IOMMU groups (the tree as captured) the plugin offers the GPUs
/// and answers GetPreferredAllocation, and Allocate is refused in the
/// plugin's words; device-manager says which call failed and exits non-zero.
#[test]
fn allocate_without_iommu_groups_fails_with_the_plugins_reason() {
    let t = h200(false);
    let out = device_manager(&t, 2, &[], None);
    assert!(!out.ok, "{}", out.stdout);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    let last = failure(&out);
    assert!(
        last.starts_with("kube-peers: device-manager: device plugin Allocate rpc failed for [0000:00:07.0 0000:00:09.0]:"),
        "{}\nplugin:\n{}",
        out.stderr,
        out.plugin_log
    );
    assert!(
        last.contains("0000:00:07.0 has no IOMMU group: is the IOMMU on?"),
        "{}",
        out.stderr
    );
}

/// The kubelet's registration server (server.go:170) refuses a resource
/// name that is not an extended resource name (`IsExtendedResourceName`).
/// The plugin checks the same rule at start and exits at once (exit 2, the
/// rule and the reason named) instead of registering in vain forever, so the
/// kubelet's refusal can no longer be reached through the plugin: here each
/// name is sent to the kubelet's server by the test's own RegisterRequest
/// (the plugin's generated client), and the kubelet must refuse every name
/// the plugin refuses, in its words and with its source line. Names at the
/// rule's edges that the plugin accepts are registered by the plugin itself
/// and go through the whole device-manager run.
#[test]
fn the_plugin_refuses_at_start_exactly_the_names_the_kubelet_refuses() {
    let t = nested_switch();
    // (name, the plugin's reason), each breaking one clause of the rule.
    let refused = [
        ("nvme", "no domain"),
        ("kubernetes.io/nvme", "contains \"kubernetes.io/\""),
        ("example.kubernetes.io/nvme", "contains \"kubernetes.io/\""),
        ("notkubernetes.io/nvme", "contains \"kubernetes.io/\""),
        ("requests.vp2p.io/nvme", "starts with \"requests.\""),
        ("vp2p.io/a/nvme", "more than one '/'"),
        (
            "Vp2p.io/nvme",
            "the domain \"Vp2p.io\" is not a lowercase DNS subdomain",
        ),
        ("vp2p.io/nvme_", "the name \"nvme_\" after the domain"),
    ];
    for (name, why) in refused {
        let (_dir, kubelet_dir) = fresh_dir();
        let (code, stderr) = plugin_exit(&t, name, &kubelet_dir);
        assert_eq!(code, Some(2), "{name}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "invalid value '{name}' for '--resource <NAME>': \"{name}\" is not an extended \
                 resource name, which the kubelet requires to register a device plugin \
                 (IsExtendedResourceName): "
            )),
            "{name}: {stderr}"
        );
        assert!(stderr.contains(why), "{name}: {stderr}");
        assert_eq!(
            std::fs::read_dir(&kubelet_dir).unwrap().count(),
            0,
            "{name}"
        );

        let out = kubelet_refusal(name);
        assert!(!out.ok, "{name}: {}", out.stdout);
        assert!(
            failure(&out).starts_with(&format!(
                "kube-peers: device-manager: the kubelet's registration server refused the plugin: \
                 Bad registration request from device plugin: the ResourceName {name:?} is invalid \
                 (k8s.io/kubernetes@v1.37.2/pkg/kubelet/cm/devicemanager/plugin/v1beta1/server.go:"
            )),
            "{name}: {}",
            out.stderr
        );
    }
    // Accepted at the edges: "kubernetes.io" not followed by '/', a domain of
    // one label, the name part's upper case, '_' and '.'.
    let accepted = [
        (
            "kubernetes.io.example.com/nvme",
            "vp2p-kubernetes_io_example_com_nvme.sock",
            "PCI_RESOURCE_KUBERNETES_IO_EXAMPLE_COM_NVME",
        ),
        (
            "vp2p/NVMe_x.1",
            "vp2p-vp2p_NVMe_x_1.sock",
            "PCI_RESOURCE_VP2P_NVME_X_1",
        ),
    ];
    for (resource, endpoint, env) in accepted {
        let mut t = nested_switch();
        (t.resource, t.endpoint, t.env) = (resource, endpoint, env);
        check(&t, 1, &[], None);
    }
}

/// `p2p-host device-plugin --resource NAME` on `tree` with `kubelet_dir`:
/// its exit code and stderr (kept beside `kubelet_dir`), which must come
/// within 10 s.
fn plugin_exit(tree: &Tree, name: &str, kubelet_dir: &Path) -> (Option<i32>, String) {
    let log = kubelet_dir.with_extension("log");
    let mut p = Plugin(
        Command::new(binary("p2p-host"))
            .args(["device-plugin", "--resource", name])
            .args(&tree.plugin_args)
            .arg("--kubelet-dir")
            .arg(kubelet_dir)
            .arg("--sysfs-root")
            .arg(&tree.sysfs)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn_owned()
            .expect("p2p-host device-plugin starts"),
    );
    let mut code = None;
    wait_until(
        &format!("the plugin for {name:?} exits"),
        Duration::from_secs(10),
        || {
            code = p.0.try_wait().unwrap().map(|s| s.code());
            code.is_some()
        },
    );
    (code.unwrap(), std::fs::read_to_string(&log).unwrap())
}

/// `kube-peers device-manager --resource NAME` sent a RegisterRequest for
/// NAME by the test (an endpoint that does not exist: the name is checked
/// first); the Register call must fail with the kubelet's words.
fn kubelet_refusal(name: &str) -> Outcome {
    use p2p_host_kube::device_plugin::api::{RegisterRequest, RegistrationClient, VERSION};
    let (dir, kubelet_dir) = fresh_dir();
    let child = spawn_device_manager(&dir, name, 1, "30s", &[]);
    let sock = kubelet_dir.join("kubelet.sock");
    wait_until(
        "the kubelet's kubelet.sock",
        Duration::from_secs(120),
        || sock.exists(),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let refused = rt
        .block_on(async {
            // The socket file is there from bind(), before listen(): a
            // connection may be refused for a moment.
            let start = Instant::now();
            let channel = loop {
                match p2p_host_kube::grpc::connect_unix(&sock).await {
                    Ok(c) => break c,
                    Err(e) if start.elapsed() > Duration::from_secs(10) => {
                        panic!("connecting to {}: {e}", sock.display())
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            };
            RegistrationClient::new(channel)
                .register(RegisterRequest {
                    version: VERSION.to_string(),
                    endpoint: "vp2p-test.sock".to_string(),
                    resource_name: name.to_string(),
                    options: None,
                })
                .await
        })
        .expect_err("the kubelet refuses the name");
    assert_eq!(
        refused.message(),
        format!("the ResourceName {name:?} is invalid"),
        "{name}"
    );
    outcome(child, None, dir, kubelet_dir)
}

/// A plugin already serving when the kubelet's registration server starts:
/// the kubelet's Start removes every socket in the directory
/// (ManagerImpl.CleanupPluginDirectory, manager.go:191, called from
/// plugin/v1beta1/server.go:103), the plugin's included, and then dials the
/// endpoint the plugin registers. The plugin must serve on its socket again
/// and register.
#[test]
fn a_plugin_started_before_the_kubelet_registers() {
    let t = nested_switch();
    let out = device_manager_in_order(&t, 1, &[], None, "45s", Order::PluginFirst);
    let j = out.json();
    assert_eq!(
        j["endpoint"],
        out.kubelet_dir.join(t.endpoint).display().to_string()
    );
    assert_eq!(strings(&j["preferred"]), ["0000:81:00.0"]);
    assert!(
        out.plugin_log.contains(
            "device-plugin: the kubelet started (kubelet.sock created or our socket removed); \
             serving and registering again"
        ),
        "{}",
        out.plugin_log
    );
}
