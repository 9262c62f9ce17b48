//! `p2p-host dra driver`'s API side against a stand-in API server on
//! loopback (tests/src/apiserver.rs: plain HTTP, the `resource.k8s.io/v1`
//! paths, answers shaped as the API server's), reached through a kubeconfig:
//! the node's slices created, published again with a new pool generation
//! when a GPU leaves vfio-pci, deleted on SIGTERM; claims read at prepare;
//! 409 and 500 answers reported and retried while the driver keeps serving.
//! No real API server runs here (no registry this machine reaches ships
//! kube-apiserver).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use p2p_tests::apiserver::ApiServer;
use p2p_tests::binary;
use p2p_tests::dra_kubelet::{register, Dra};
use p2p_tests::kubelet::{rebind, vfio_tree};
use serde_json::{json, Value};

const DRIVER: &str = "gpu.vp2p.io";
const NODE: &str = "node-a";
const SLICE: &str = "node-a-gpu.vp2p.io-0";

struct Plugin(Child);

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(root: &Path, tree: &Path, api: &ApiServer) -> (Plugin, PathBuf) {
    start_with(root, tree, api, &[])
}

/// [`start`] with more of the driver's options.
fn start_with(root: &Path, tree: &Path, api: &ApiServer, more: &[&str]) -> (Plugin, PathBuf) {
    let kubeconfig = root.join("kubeconfig");
    api.kubeconfig(&kubeconfig);
    let kubelet = root.join("kubelet");
    let child = Command::new(binary("p2p-host"))
        .args(["dra", "driver", "--node-name", NODE, "--gpu-class", "0108"])
        .args(if more.contains(&"--resync-ms") {
            &[][..]
        } else {
            &["--resync-ms", "100"][..]
        })
        .arg("--sysfs-root")
        .arg(tree)
        .arg("--kubelet-root")
        .arg(&kubelet)
        .arg("--cdi-dir")
        .arg(root.join("cdi"))
        .arg("--metadata-dir")
        .arg(root.join("metadata"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(more)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let reg = kubelet.join(format!("plugins_registry/{DRIVER}-reg.sock"));
    wait("the registration socket", || reg.exists());
    (Plugin(child), kubelet)
}

fn wait(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{what} within 20 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn device(bdf: &str) -> String {
    format!("gpu-{}", bdf.replace([':', '.'], "-"))
}

fn names(slice: &Value) -> Vec<String> {
    slice["spec"]["devices"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|d| d["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn claim(ns: &str, name: &str, uid: &str, dev: &str) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns, "uid": uid, "resourceVersion": "7"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "vp2p-gpu"}}]}},
        "status": {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": dev}]}}}})
}

fn sigterm(p: &mut Plugin) -> Option<i32> {
    // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
    let r = unsafe { libc::kill(p.0.id() as i32, libc::SIGTERM) };
    assert_eq!(r, 0);
    let start = Instant::now();
    loop {
        if let Some(s) = p.0.try_wait().unwrap() {
            return s.code();
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the driver stops on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn publishes_republishes_on_change_reads_claims_and_removes_on_shutdown() {
    let tmp = tempfile::tempdir().unwrap();
    let tree = vfio_tree(tmp.path());
    let api = ApiServer::start();
    api.add_claim(claim("vms", "vm-gpu", "c1", &device("0000:27:00.0")));
    let (mut p, kubelet) = start(tmp.path(), &tree, &api);
    // Published: the three GPUs VFIO can assign alone (27, 28, 81; 25 and 26
    // share group 9), pool generation 1, on this node, by this driver.
    wait("the slice", || api.slices().contains_key(SLICE));
    let s = &api.slices()[SLICE];
    assert_eq!(
        names(s),
        [
            device("0000:27:00.0"),
            device("0000:28:00.0"),
            device("0000:81:00.0")
        ]
    );
    assert_eq!(s["spec"]["driver"], DRIVER);
    assert_eq!(s["spec"]["nodeName"], NODE);
    assert_eq!(
        s["spec"]["pool"],
        json!({"name": NODE, "generation": 1, "resourceSliceCount": 1})
    );
    let first: Vec<_> = api
        .seen()
        .into_iter()
        .filter(|r| r.method != "GET")
        .collect();
    assert_eq!(first[0].method, "POST");
    assert!(first[0]
        .path
        .starts_with("/apis/resource.k8s.io/v1/resourceslices"));

    // 81:00.0 leaves vfio-pci: published again without it, generation 2.
    rebind(&tree, "0000:81:00.0", "nvme");
    wait("generation 2", || {
        api.slices()[SLICE]["spec"]["pool"]["generation"] == 2
    });
    assert_eq!(
        names(&api.slices()[SLICE]),
        [device("0000:27:00.0"), device("0000:28:00.0")]
    );
    assert!(api
        .seen()
        .iter()
        .any(|r| r.method == "PUT" && r.path.split('?').next().unwrap().ends_with(SLICE)));

    // Prepare reads the claim from the API server.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        register(
            &kubelet.join(format!("plugins_registry/{DRIVER}-reg.sock")),
            None,
        )
        .await;
        let mut dra = Dra::v1(&kubelet.join(format!("plugins/{DRIVER}/dra.sock"))).await;
        let a = dra.prepare(&[("vms", "vm-gpu", "c1")]).await.unwrap();
        assert_eq!(a["c1"].error, "");
        assert_eq!(a["c1"].devices[0].name, device("0000:27:00.0"));
        let a = dra.prepare(&[("vms", "absent", "c2")]).await.unwrap();
        assert!(
            a["c2"].error.contains("vms/absent") && a["c2"].error.contains("not found"),
            "{}",
            a["c2"].error
        );
    });
    assert!(api.seen().iter().any(|r| r.method == "GET"
        && r.path == "/apis/resource.k8s.io/v1/namespaces/vms/resourceclaims/vm-gpu"));

    // SIGTERM: the slices are deleted, the process exits cleanly.
    assert_eq!(sigterm(&mut p), Some(0));
    assert!(api.slices().is_empty(), "{:?}", api.slices().keys());
    assert!(api
        .seen()
        .iter()
        .any(|r| r.method == "DELETE" && r.path.split('?').next().unwrap().ends_with(SLICE)));
}

#[test]
fn conflicts_and_server_errors_are_reported_retried_and_the_driver_keeps_serving() {
    let tmp = tempfile::tempdir().unwrap();
    let tree = vfio_tree(tmp.path());
    let api = ApiServer::start();
    // A slice left by an earlier run (generation 4), one of another driver
    // on the node, and a stale second slice of ours.
    {
        let mut st = api.state.lock().unwrap();
        let old = |name: &str, driver: &str, gen: i64| {
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name, "resourceVersion": "3"},
            "spec": {"driver": driver, "nodeName": NODE, "pool": {"name": NODE, "generation": gen, "resourceSliceCount": 2}}})
        };
        st.slices.insert(SLICE.into(), old(SLICE, DRIVER, 4));
        st.slices.insert(
            "node-a-gpu.vp2p.io-1".into(),
            old("node-a-gpu.vp2p.io-1", DRIVER, 4),
        );
        st.slices.insert(
            "node-a-gpu.nvidia.com-0".into(),
            old("node-a-gpu.nvidia.com-0", "gpu.nvidia.com", 1),
        );
        // The first create fails with 500; the claim read fails with 500 once.
        st.fail.push_back((
            "POST".into(),
            "/apis/resource.k8s.io/v1/resourceslices".into(),
            500,
        ));
        st.fail.push_back((
            "GET".into(),
            "/apis/resource.k8s.io/v1/namespaces/vms/resourceclaims/".into(),
            500,
        ));
    }
    api.add_claim(claim("vms", "vm-gpu", "c1", &device("0000:28:00.0")));
    let (mut p, kubelet) = start(tmp.path(), &tree, &api);
    // Retried after the 500; the 409 on create (the old slice) turns into a
    // replace at generation 5; the stale slice of ours goes, the other
    // driver's stays.
    wait("generation 5", || {
        api.slices()
            .get(SLICE)
            .is_some_and(|s| s["spec"]["pool"]["generation"] == 5)
    });
    wait("the stale slice deleted", || {
        !api.slices().contains_key("node-a-gpu.vp2p.io-1")
    });
    assert!(api.slices().contains_key("node-a-gpu.nvidia.com-0"));
    let posts = api.seen().iter().filter(|r| r.method == "POST").count();
    assert!(posts >= 2, "the create was retried after the 500");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        register(
            &kubelet.join(format!("plugins_registry/{DRIVER}-reg.sock")),
            None,
        )
        .await;
        let mut dra = Dra::v1(&kubelet.join(format!("plugins/{DRIVER}/dra.sock"))).await;
        let a = dra.prepare(&[("vms", "vm-gpu", "c1")]).await.unwrap();
        assert!(
            a["c1"].error.contains("claim vms/vm-gpu") && a["c1"].error.contains("500"),
            "{}",
            a["c1"].error
        );
        // Still serving; the next call reads the claim.
        let a = dra.prepare(&[("vms", "vm-gpu", "c1")]).await.unwrap();
        assert_eq!(a["c1"].error, "");
    });
    assert_eq!(sigterm(&mut p), Some(0));
    assert_eq!(
        api.slices().keys().collect::<Vec<_>>(),
        ["node-a-gpu.nvidia.com-0"]
    );
}

/// An operator's NVLink map joining 27:00.0 and 28:00.0 (18 links, as an
/// H100's), and `fmpm -l` output (fmpm.cpp's listPartitions shape) with a
/// 2-GPU partition of those two and a 1-GPU partition of 81:00.0.
const NVLINKS: &str = r#"{"links": [{"a": "0000:27:00.0", "b": "0000:28:00.0", "count": 18}]}"#;
const FMPM: &str = r#"{"maxNumPartitions": 2, "numPartitions": 2, "partitionInfo": [
  {"gpuInfo": [{"pciBusId": "00000000:27:00.0"}, {"pciBusId": "00000000:28:00.0"}],
   "isActive": 0, "numGpus": 2, "partitionId": 7},
  {"gpuInfo": [{"pciBusId": "00000000:81:00.0"}], "isActive": 0, "numGpus": 1, "partitionId": 9}
], "version": 1}"#;

#[test]
fn the_driver_publishes_what_dra_slices_prints_nvlinks_and_partitions_included() {
    let tmp = tempfile::tempdir().unwrap();
    let tree = vfio_tree(tmp.path());
    let nvlinks = tmp.path().join("nvlinks.json");
    let fmpm = tmp.path().join("fmpm-l.json");
    std::fs::write(&nvlinks, NVLINKS).unwrap();
    std::fs::write(&fmpm, FMPM).unwrap();
    let more = [
        "--nvlink",
        nvlinks.to_str().unwrap(),
        "--fm-partitions",
        fmpm.to_str().unwrap(),
        "--no-nvml",
    ];
    let api = ApiServer::start();
    let (mut p, _kubelet) = start_with(tmp.path(), &tree, &api, &more);
    wait("the slice", || api.slices().contains_key(SLICE));
    let published = api.slices()[SLICE]["spec"]["devices"].clone();

    let mut args = vec![
        "dra",
        "slices",
        "--json",
        "--node-name",
        NODE,
        "--gpu-class",
        "0108",
    ];
    args.extend(["--sysfs-root", tree.to_str().unwrap()]);
    args.extend(more);
    let printed = p2p_tests::run("p2p-host", &args);
    assert_eq!(printed.code, Some(0), "{}", printed.stderr);
    let printed: Value = serde_json::from_str(&printed.stdout).unwrap();
    assert_eq!(
        published, printed["items"][0]["spec"]["devices"],
        "the driver's devices differ from `dra slices`'s"
    );

    // The values, by hand: the linked pair's domain is its lower address;
    // each GPU names the partition of its size that holds it; 81:00.0 is in
    // no NVLink set.
    let attr = |bdf: &str, key: &str| {
        published
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["name"] == device(bdf))
            .unwrap_or_else(|| panic!("{bdf} published"))["attributes"]
            .get(format!("{DRIVER}/{key}"))
            .cloned()
    };
    for bdf in ["0000:27:00.0", "0000:28:00.0"] {
        assert_eq!(
            attr(bdf, "nvlinkDomain"),
            Some(json!({"string": "0000:27:00.0"}))
        );
        assert_eq!(attr(bdf, "fmPartition2"), Some(json!({"int": 7})));
        assert_eq!(attr(bdf, "fmPartition1"), None);
    }
    assert_eq!(attr("0000:81:00.0", "nvlinkDomain"), None);
    assert_eq!(
        attr("0000:81:00.0", "fmPartition1"),
        Some(json!({"int": 9}))
    );
    assert_eq!(sigterm(&mut p), Some(0));
}

/// Sends `msg` to the kernel's uevent multicast group, as the kernel does
/// for a device event; a process may do so with CAP_NET_ADMIN (root here).
fn send_uevent(msg: &[u8]) {
    // SAFETY: socket(2) with constant arguments; the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_KOBJECT_UEVENT,
        )
    };
    assert!(
        fd >= 0,
        "a uevent socket: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: sockaddr_nl is plain data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    addr.nl_groups = 1;
    // SAFETY: sendto(2) on the socket just opened, with `msg` and a
    // sockaddr_nl of its exact size.
    let sent = unsafe {
        libc::sendto(
            fd,
            msg.as_ptr().cast(),
            msg.len(),
            0,
            (&addr as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    let err = std::io::Error::last_os_error();
    // SAFETY: closing the descriptor opened above, used by nothing else.
    unsafe { libc::close(fd) };
    assert_eq!(
        sent,
        msg.len() as isize,
        "sending to the uevent group needs CAP_NET_ADMIN (run the tests as root): {err}"
    );
}

/// A kernel uevent of a PCI function wakes the publisher at once. The
/// driver checks sysfs every 10 minutes here, so after its first
/// publication a second one within seconds can only come from the uevent:
/// 81:00.0 leaves vfio-pci, and the unbind the kernel would broadcast for it
/// (lib/kobject_uevent.c's format: `ACTION@DEVPATH`, then `KEY=VALUE`
/// strings, NUL-terminated) is sent to the uevent group.
#[test]
fn a_pci_uevent_is_published_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let tree = vfio_tree(tmp.path());
    let api = ApiServer::start();
    let (mut p, _kubelet) = start_with(tmp.path(), &tree, &api, &["--resync-ms", "600000"]);
    wait("the slice", || api.slices().contains_key(SLICE));
    assert_eq!(names(&api.slices()[SLICE]).len(), 3);
    rebind(&tree, "0000:81:00.0", "nvme");
    let devpath = "/devices/pci0000:80/0000:80:00.0/0000:81:00.0";
    let msg = format!(
        "unbind@{devpath}\0ACTION=unbind\0DEVPATH={devpath}\0SUBSYSTEM=pci\0DRIVER=vfio-pci\0SEQNUM=4711\0"
    );
    let sent = Instant::now();
    send_uevent(msg.as_bytes());
    wait("generation 2 after the uevent", || {
        api.slices()[SLICE]["spec"]["pool"]["generation"] == 2
    });
    assert!(
        sent.elapsed() < Duration::from_secs(10),
        "published {:?} after the uevent",
        sent.elapsed()
    );
    assert_eq!(
        names(&api.slices()[SLICE]),
        [device("0000:27:00.0"), device("0000:28:00.0")]
    );
    // A uevent of another subsystem wakes nothing: no third generation.
    rebind(&tree, "0000:81:00.0", "vfio-pci");
    send_uevent(b"bind@/devices/usb1/1-1\0ACTION=bind\0SUBSYSTEM=usb\0SEQNUM=4712\0");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(api.slices()[SLICE]["spec"]["pool"]["generation"], 2);
    assert_eq!(sigterm(&mut p), Some(0));
}
