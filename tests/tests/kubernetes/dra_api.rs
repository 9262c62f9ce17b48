//! `p2p-host dra driver`'s API side against a stand-in API server on
//! loopback (tests/src/apiserver.rs: plain HTTP, the `resource.k8s.io/v1`
//! paths, answers shaped as the API server's), for what the real one cannot
//! be made to do: answer 500, hold stale slices of an earlier run at a higher
//! generation, serve a claim and then lose it. The happy paths run against
//! the real kube-apiserver in tests/tests/kubernetes/kube_dra_api.rs.

use p2p_tests::process::{SpawnOwned, Spawned};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use p2p_tests::apiserver::ApiServer;
use p2p_tests::binary;
use p2p_tests::dra_kubelet::{register, Dra};
use p2p_tests::kubelet::vfio_tree;
use serde_json::{json, Value};

const DRIVER: &str = "gpu.vp2p.io";
const NODE: &str = "node-a";
const SLICE: &str = "node-a-gpu.vp2p.io-0";

struct Plugin(Spawned);

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
        .spawn_owned()
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
        // A claim the API server does not have is refused by name.
        let a = dra.prepare(&[("vms", "absent", "c2")]).await.unwrap();
        assert!(
            a["c2"].error.contains("vms/absent") && a["c2"].error.contains("not found"),
            "{}",
            a["c2"].error
        );
    });
    // Stopping leaves the node's slices published (an upgrade does not
    // withdraw the devices).
    assert_eq!(sigterm(&mut p), Some(0));
    assert_eq!(
        api.slices().keys().collect::<Vec<_>>(),
        ["node-a-gpu.nvidia.com-0", SLICE]
    );
}
