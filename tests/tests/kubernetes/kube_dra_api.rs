//! `p2p-host dra driver`'s API side against the real kube-apiserver
//! (v1.37.2, `kube-peers`), as the shipped ServiceAccount with a token bound
//! to its Node: the node's slices created, published again with a new pool
//! generation when a GPU leaves vfio-pci (on the timer, and at once on a
//! kernel uevent), left published on SIGTERM (kube_dra_upgrade.rs: adopted
//! at the next start, removed at uninstall); with `--nvlink` and
//! `--fm-partitions`, what `dra slices` prints. The failure answers a real
//! server cannot be made to give (500s, a 409 on every write) stay with the
//! stand-in in tests/tests/kubernetes/dra_api.rs.

use std::time::{Duration, Instant};

use p2p_tests::kube::ControlPlane;
use p2p_tests::kube_node::{relink, SimNode, DRIVER};
use serde_json::{json, Value};

const NESTED: &str = "qemu-11.1-nested-switch-iommu-on";

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

/// Takes `bdf` of `node`'s tree off vfio-pci (to nvme), as an unbind would.
fn unbind(node: &SimNode, bdf: &str, driver: &str) {
    let dev = std::fs::canonicalize(node.tree.join("bus/pci/devices").join(bdf)).unwrap();
    relink(&node.tree, &dev, driver);
}

/// Waits until the node's one slice is at pool generation `g`.
fn generation(cp: &ControlPlane, node: &SimNode, g: i64) -> Value {
    cp.wait_for(
        &format!("{}'s slice at generation {g}", node.name),
        Duration::from_secs(30),
        || {
            let s = node.slices(cp);
            (s.len() == 1 && s[0]["spec"]["pool"]["generation"] == json!(g)).then(|| s[0].clone())
        },
    )
}

fn setup() -> &'static ControlPlane {
    static DONE: std::sync::OnceLock<&'static ControlPlane> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        let cp = ControlPlane::shared(module_path!());
        let yaml =
            std::fs::read_to_string(p2p_tests::repo_root().join("host/kubernetes/dra/driver.yaml"))
                .unwrap();
        cp.apply(&yaml).expect("driver.yaml");
        cp
    })
}

#[test]
fn publishes_republishes_on_change_and_leaves_them_on_shutdown() {
    let cp = setup();
    let mut node = SimNode::start(cp, "api-a", NESTED, &[]);
    // Published: the three GPUs VFIO can assign alone (27, 28, 81; 25 and 26
    // share group 9), pool generation 1, on this node, by this driver.
    let s = generation(cp, &node, 1);
    assert_eq!(
        names(&s),
        [
            device("0000:27:00.0"),
            device("0000:28:00.0"),
            device("0000:81:00.0")
        ]
    );
    assert_eq!(s["spec"]["driver"], DRIVER);
    assert_eq!(s["spec"]["nodeName"], "api-a");
    assert_eq!(
        s["spec"]["pool"],
        json!({"name": "api-a", "generation": 1, "resourceSliceCount": 1})
    );
    let uid = s["metadata"]["uid"].clone();
    // 81:00.0 leaves vfio-pci: published again without it, generation 2,
    // the same object replaced (its uid kept).
    unbind(&node, "0000:81:00.0", "nvme");
    let s = generation(cp, &node, 2);
    assert_eq!(names(&s), [device("0000:27:00.0"), device("0000:28:00.0")]);
    assert_eq!(
        s["metadata"]["uid"], uid,
        "replaced, not deleted and created"
    );
    // SIGTERM: the process exits cleanly and the slice stays, as published.
    assert_eq!(node.terminate(), Some(0));
    let left = node.slices(cp);
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0]["spec"], s["spec"]);
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
    let cp = setup();
    let tmp = tempfile::tempdir().unwrap();
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
    let mut node = SimNode::start_with(cp, "api-b", NESTED, &[], &more);
    let published = node.slices(cp)[0]["spec"]["devices"].clone();
    let mut args = vec![
        "dra",
        "slices",
        "--json",
        "--node-name",
        "api-b",
        "--gpu-class",
        "0108",
    ];
    args.extend(["--sysfs-root", node.tree.to_str().unwrap()]);
    args.extend(more);
    let printed = p2p_tests::run("p2p-host", &args);
    assert_eq!(printed.code, Some(0), "{}", printed.stderr);
    let printed: Value = serde_json::from_str(&printed.stdout).unwrap();
    assert_eq!(
        published, printed["items"][0]["spec"]["devices"],
        "the devices the API server holds differ from `dra slices`'s"
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
    assert_eq!(node.terminate(), Some(0));
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
/// strings, NUL-terminated) is sent to the uevent group. Every driver on
/// this machine hears it; only this node's tree changed.
#[test]
fn a_pci_uevent_is_published_at_once() {
    let cp = setup();
    let mut node = SimNode::start_with(cp, "api-c", NESTED, &[], &["--resync-ms", "600000"]);
    assert_eq!(names(&generation(cp, &node, 1)).len(), 3);
    unbind(&node, "0000:81:00.0", "nvme");
    let devpath = "/devices/pci0000:80/0000:80:00.0/0000:81:00.0";
    let msg = format!(
        "unbind@{devpath}\0ACTION=unbind\0DEVPATH={devpath}\0SUBSYSTEM=pci\0DRIVER=vfio-pci\0SEQNUM=4711\0"
    );
    let sent = Instant::now();
    send_uevent(msg.as_bytes());
    let s = generation(cp, &node, 2);
    assert!(
        sent.elapsed() < Duration::from_secs(10),
        "published {:?} after the uevent",
        sent.elapsed()
    );
    assert_eq!(names(&s), [device("0000:27:00.0"), device("0000:28:00.0")]);
    // A uevent of another subsystem wakes nothing: no third generation.
    unbind(&node, "0000:81:00.0", "vfio-pci");
    send_uevent(b"bind@/devices/usb1/1-1\0ACTION=bind\0SUBSYSTEM=usb\0SEQNUM=4712\0");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(node.slices(cp)[0]["spec"]["pool"]["generation"], 2);
    assert_eq!(node.terminate(), Some(0));
}

/// The kubelet's DRA manager deletes a node's slices when it starts
/// (k8s.io/kubernetes v1.37.2 pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go,
/// `wipeResourceSlices`), and an admin may edit one: at its next check (every
/// second here) the driver finds the API server no longer holds what it
/// published and publishes it again, at a new generation.
#[test]
fn slices_deleted_or_edited_from_outside_are_published_again() {
    let cp = setup();
    let mut node = SimNode::start(cp, "api-d", NESTED, &[]);
    let s = generation(cp, &node, 1);
    let name = s["metadata"]["name"].as_str().unwrap().to_string();
    let want = s["spec"]["devices"].clone();
    cp.kubectl(&["delete", "resourceslice", &name]);
    let back = generation(cp, &node, 2);
    assert_eq!(back["spec"]["devices"], want, "the same devices again");
    // An edit that drops a device from the slice.
    cp.kubectl(&[
        "patch",
        "resourceslice",
        &name,
        "--type=json",
        "-p",
        r#"[{"op": "remove", "path": "/spec/devices/2"}]"#,
    ]);
    let back = generation(cp, &node, 3);
    assert_eq!(back["spec"]["devices"], want, "the dropped device is back");
    assert!(node
        .driver_log()
        .contains("no longer holds the published slices"));
    assert_eq!(node.terminate(), Some(0));
}
