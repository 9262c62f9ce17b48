//! `p2p-host dra driver`, the DRA kubelet plugin, against a kubelet
//! stand-in (tests/src/dra_kubelet.rs) that registers over the plugin
//! watcher's protocol and calls NodePrepareResources /
//! NodeUnprepareResources with bytes encoded from the published API table,
//! on copies of the captured nested-switch tree (its NVMe functions play
//! GPUs, `--gpu-class 0108`). Binding is the kernel's sysfs protocol played
//! by a stand-in on the copy (`driver_override`, `drivers_probe`). No
//! kubelet, API server or container runtime runs here: the claims are
//! ResourceClaim objects in a directory (`--claims-dir`), the CDI spec is
//! checked against vp2p's own schema of the CDI specification
//! (tests/contracts/cdi-spec.schema.json), and the device metadata against
//! the KEP-5304 protocol's layout as the Kubernetes documentation states it.
//!
//! The tree's facts, read from the fixture (kernel/iommu_groups): 27:00.0 is
//! alone with its switch port 22:01.0 in group 10, 28:00.0 alone in group
//! 11, 25:00.0 and 26:00.0 share group 9 (so neither is published).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use p2p_tests::dra_kubelet::{driver_of, function_dir, register, ClaimAnswer, Dra, Kernel};
use p2p_tests::grpc_wire::table::KUBELET_DRA_V1BETA1;
use p2p_tests::kubelet::vfio_tree;
use p2p_tests::{binary, fixture_dir, repo_root};
use serde_json::{json, Value};

const DRIVER: &str = "gpu.vp2p.io";
const NODE: &str = "node-a";

/// A device's name in the slices, derived by hand from its address:
/// `gpu-` and the address with `:` and `.` turned into `-`.
fn device(bdf: &str) -> String {
    format!("gpu-{}", bdf.replace([':', '.'], "-"))
}

/// A plain copy of the nested-switch tree (NVMe functions on nvme).
fn plain_tree(dir: &Path) -> PathBuf {
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
fn add_to_group(tree: &Path, group: u32, bdf: &str) {
    let link = tree.join(format!("kernel/iommu_groups/{group}/devices/{bdf}"));
    std::os::unix::fs::symlink(function_dir(tree, bdf), link).unwrap();
}

struct Dirs {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

impl Dirs {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        Self { _tmp: tmp, root }
    }
    fn kubelet(&self) -> PathBuf {
        self.root.join("kubelet")
    }
    fn reg_socket(&self) -> PathBuf {
        self.kubelet()
            .join(format!("plugins_registry/{DRIVER}-reg.sock"))
    }
    fn dra_socket(&self) -> PathBuf {
        self.kubelet().join(format!("plugins/{DRIVER}/dra.sock"))
    }
    fn checkpoint(&self) -> Value {
        let p = self
            .kubelet()
            .join(format!("plugins/{DRIVER}/checkpoint.json"));
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    }
    fn cdi(&self) -> PathBuf {
        self.root.join("cdi")
    }
    fn spec(&self, uid: &str) -> PathBuf {
        self.cdi().join(format!("{DRIVER}-{uid}.json"))
    }
    fn metadata(&self) -> PathBuf {
        self.root.join("metadata")
    }
    fn claims(&self) -> PathBuf {
        self.root.join("claims")
    }

    /// Writes the ResourceClaim `namespace/name` with `results`
    /// ((request, driver, device) in pool NODE).
    fn claim(&self, namespace: &str, name: &str, uid: &str, results: &[(&str, &str, &str)]) {
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
struct Plugin(Child);

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(d: &Dirs, tree: &Path, extra: &[&str]) -> Plugin {
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
        .spawn()
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

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn schema() -> jsonschema::Validator {
    let text =
        std::fs::read_to_string(repo_root().join("tests/contracts/cdi-spec.schema.json")).unwrap();
    jsonschema::draft202012::new(&serde_json::from_str::<Value>(&text).unwrap()).unwrap()
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
    )
    .unwrap()
}

/// The spec's devices as (name, device node paths, mount container paths).
fn spec_devices(spec: &Value) -> Vec<(String, Vec<String>, Vec<String>)> {
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

#[test]
fn registers_with_the_plugin_watcher_and_prepares_a_claim_idempotently() {
    let d = Dirs::new();
    let tree = vfio_tree(&d.root);
    let uid = "3f6c1a52-0d1e-4d6b-9a51-7c1d2e3f4a5b";
    d.claim(
        "vms",
        "vm-gpus",
        uid,
        &[
            ("gpu0", DRIVER, &device("0000:27:00.0")),
            ("gpu1", DRIVER, &device("0000:28:00.0")),
        ],
    );
    let _p = start(&d, &tree, &[]);
    rt().block_on(async {
        // The plugin watcher's two calls.
        let info = register(&d.reg_socket(), None).await;
        assert_eq!(info.kind, "DRAPlugin");
        assert_eq!(info.name, DRIVER);
        assert_eq!(Path::new(&info.endpoint), d.dra_socket());
        assert_eq!(info.versions, ["v1.DRAPlugin", "v1beta1.DRAPlugin"]);
        // A refusal is answered too (the plugin keeps serving).
        register(&d.reg_socket(), Some("version skew")).await;

        let mut dra = Dra::v1(&d.dra_socket()).await;
        let answer = dra.prepare(&[("vms", "vm-gpus", uid)]).await.unwrap();
        let got = &answer[uid];
        assert_eq!(got.error, "");
        let ids = |dev: &str, meta: &str| {
            vec![
                format!("{DRIVER}/vfio={uid}-{}", device(dev)),
                format!("{DRIVER}/vfio={uid}-{meta}-metadata"),
            ]
        };
        let names: Vec<(&[String], &str, &str, &[String])> = got
            .devices
            .iter()
            .map(|x| (&x.requests[..], x.pool.as_str(), x.name.as_str(), &x.cdi_ids[..]))
            .collect();
        assert_eq!(
            names,
            [
                (
                    &["gpu0".to_string()][..],
                    NODE,
                    device("0000:27:00.0").as_str(),
                    &ids("0000:27:00.0", "gpu0")[..]
                ),
                (
                    &["gpu1".to_string()][..],
                    NODE,
                    device("0000:28:00.0").as_str(),
                    &ids("0000:28:00.0", "gpu1")[..]
                ),
            ]
        );

        // The CDI spec: the CDI specification's rules, the VFIO nodes of
        // groups 10 and 11, the metadata mounted where the protocol says.
        let spec = read_json(&d.spec(uid));
        let errors: Vec<String> = schema().iter_errors(&spec).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{errors:?}\n{spec:#}");
        assert_eq!(spec["kind"], format!("{DRIVER}/vfio"));
        let meta = |req: &str| {
            format!("/var/run/kubernetes.io/dra-device-attributes/resourceclaims/vm-gpus/{req}/{DRIVER}-metadata.json")
        };
        assert_eq!(
            spec_devices(&spec),
            [
                (format!("{uid}-{}", device("0000:27:00.0")), vec!["/dev/vfio/vfio".to_string(), "/dev/vfio/10".to_string()], vec![]),
                (format!("{uid}-{}", device("0000:28:00.0")), vec!["/dev/vfio/vfio".to_string(), "/dev/vfio/11".to_string()], vec![]),
                (format!("{uid}-gpu0-metadata"), vec![], vec![meta("gpu0")]),
                (format!("{uid}-gpu1-metadata"), vec![], vec![meta("gpu1")]),
            ]
        );
        // Every id answered is a device of the spec.
        let spec_names: Vec<String> = spec_devices(&spec).into_iter().map(|x| x.0).collect();
        for id in got.devices.iter().flat_map(|x| &x.cdi_ids) {
            let name = id.strip_prefix(&format!("{DRIVER}/vfio=")).unwrap();
            assert!(spec_names.iter().any(|n| n == name), "{id}");
        }
        // The metadata: DeviceMetadata of metadata.resource.k8s.io/v1alpha1
        // with the device's pciBusID, in the file the spec mounts.
        let host = d.metadata().join(uid).join("gpu0").join(format!("{DRIVER}-metadata.json"));
        let m = read_json(&host);
        assert_eq!(m["kind"], "DeviceMetadata");
        assert_eq!(m["apiVersion"], "metadata.resource.k8s.io/v1alpha1");
        assert_eq!(m["metadata"]["uid"], uid);
        assert_eq!(m["metadata"]["generation"], 1);
        assert_eq!(m["requests"][0]["name"], "gpu0");
        let dev = &m["requests"][0]["devices"][0];
        assert_eq!(dev["driver"], DRIVER);
        assert_eq!(dev["pool"], NODE);
        assert_eq!(dev["name"], device("0000:27:00.0"));
        assert_eq!(dev["attributes"]["resource.kubernetes.io/pciBusID"], json!({"string": "0000:27:00.0"}));
        let mount = &spec["devices"][2]["containerEdits"]["mounts"][0];
        assert_eq!(Path::new(mount["hostPath"].as_str().unwrap()), host);
        assert_eq!(mount["options"], json!(["ro", "bind"]));

        // Idempotent, and the same through v1beta1.
        let again = dra.prepare(&[("vms", "vm-gpus", uid)]).await.unwrap();
        assert_eq!(again, answer);
        let mut beta = Dra::connect(&d.dra_socket(), &KUBELET_DRA_V1BETA1).await;
        assert_eq!(beta.prepare(&[("vms", "vm-gpus", uid)]).await.unwrap(), answer);
        assert_eq!(d.checkpoint()["claims"][uid]["state"], "prepared");

        // Unprepare undoes it: no spec, no metadata, no record; twice is no error.
        for _ in 0..2 {
            let u = dra.unprepare(&[("vms", "vm-gpus", uid)]).await.unwrap();
            assert_eq!(u.get(uid).map(String::as_str), Some(""));
        }
        assert!(!d.spec(uid).exists());
        assert!(!d.metadata().join(uid).exists());
        assert_eq!(d.checkpoint()["claims"], json!({}));
        // Nothing was bound by the driver, so nothing is given back.
        assert_eq!(driver_of(&tree, "0000:27:00.0").as_deref(), Some("vfio-pci"));
    });
}

#[test]
fn bind_makes_the_group_whole_and_unprepare_gives_it_back_iommufd() {
    let d = Dirs::new();
    let tree = plain_tree(&d.root);
    let kernel = Kernel::start(&tree);
    let uid = "a1";
    d.claim(
        "vms",
        "one",
        uid,
        &[("gpu", DRIVER, &device("0000:27:00.0"))],
    );
    let _p = start(&d, &tree, &["--bind", "--iommufd"]);
    rt().block_on(async {
        register(&d.reg_socket(), None).await;
        let mut dra = Dra::v1(&d.dra_socket()).await;
        let a = dra.prepare(&[("vms", "one", uid)]).await.unwrap();
        assert_eq!(a[uid].error, "");
        // Bound through driver_override; the switch port of the group is a
        // bridge and left alone.
        assert_eq!(
            driver_of(&tree, "0000:27:00.0").as_deref(),
            Some("vfio-pci")
        );
        assert_eq!(
            driver_of(&tree, "0000:22:01.0").as_deref(),
            Some("pcieport")
        );
        let over =
            std::fs::read_to_string(function_dir(&tree, "0000:27:00.0").join("driver_override"))
                .unwrap();
        assert_eq!(over, "vfio-pci");
        // iommufd: /dev/iommu and the function's cdev (the stand-in kernel's vfio0).
        let spec = read_json(&d.spec(uid));
        assert!(schema().is_valid(&spec), "{spec:#}");
        assert_eq!(
            spec_devices(&spec)[0].1,
            ["/dev/iommu", "/dev/vfio/devices/vfio0"]
        );
        let cp = d.checkpoint();
        assert_eq!(
            cp["claims"][uid]["bound"],
            json!([{"bdf": "0000:27:00.0", "driver": "nvme"}])
        );

        let u = dra.unprepare(&[("vms", "one", uid)]).await.unwrap();
        assert_eq!(u[uid], "");
        assert_eq!(driver_of(&tree, "0000:27:00.0").as_deref(), Some("nvme"));
        let over =
            std::fs::read_to_string(function_dir(&tree, "0000:27:00.0").join("driver_override"))
                .unwrap();
        assert_eq!(over.trim(), "", "driver_override cleared");
        assert!(!d.spec(uid).exists());
    });
    let probes = kernel.probes.lock().unwrap().clone();
    assert_eq!(
        probes,
        [
            ("0000:27:00.0".to_string(), "vfio-pci".to_string()),
            ("0000:27:00.0".to_string(), "nvme".to_string())
        ]
    );
}

#[test]
fn bad_claims_are_refused_naming_the_device_and_the_driver_keeps_serving() {
    let d = Dirs::new();
    let tree = vfio_tree(&d.root);
    // Group 10 (27:00.0's) also lists 81:00.0, given back to nvme.
    add_to_group(&tree, 10, "0000:81:00.0");
    p2p_tests::kubelet::rebind(&tree, "0000:81:00.0", "nvme");
    d.claim(
        "vms",
        "unknown",
        "u1",
        &[("gpu", DRIVER, "gpu-0000-99-00-0")],
    );
    d.claim("vms", "nvidia", "u2", &[("gpu", "gpu.nvidia.com", "gpu-0")]);
    d.claim(
        "vms",
        "shared",
        "u3",
        &[("gpu", DRIVER, &device("0000:25:00.0"))],
    );
    d.claim(
        "vms",
        "unviable",
        "u4",
        &[("gpu", DRIVER, &device("0000:27:00.0"))],
    );
    d.claim(
        "vms",
        "good",
        "u6",
        &[("gpu", DRIVER, &device("0000:28:00.0"))],
    );
    let _p = start(&d, &tree, &[]);
    rt().block_on(async {
        register(&d.reg_socket(), None).await;
        let mut dra = Dra::v1(&d.dra_socket()).await;
        let cases: [(&str, &str, &[&str]); 5] = [
            (
                "unknown",
                "u1",
                &["claim vms/unknown", "unknown device \"gpu-0000-99-00-0\""],
            ),
            (
                "nvidia",
                "u2",
                &[
                    "claim vms/nvidia",
                    "no device of driver gpu.vp2p.io",
                    "gpu.nvidia.com",
                ],
            ),
            (
                "shared",
                "u3",
                &[
                    "claim vms/shared",
                    &device("0000:25:00.0"),
                    "0000:25:00.0 is left out",
                ],
            ),
            (
                "unviable",
                "u4",
                &[
                    "claim vms/unviable",
                    "IOMMU group 10 is not viable",
                    "0000:81:00.0 is bound to nvme",
                    "--bind",
                ],
            ),
            ("absent", "u5", &["claim vms/absent", "reading the claim"]),
        ];
        for (name, uid, words) in cases {
            let a = dra.prepare(&[("vms", name, uid)]).await.unwrap();
            let e = &a[uid].error;
            for w in words {
                assert!(e.contains(w), "{name}: {e:?} lacks {w:?}");
            }
            assert!(a[uid].devices.is_empty(), "{name}");
            assert!(!d.spec(uid).exists(), "{name}: no spec");
            assert!(!d.metadata().join(uid).exists(), "{name}: no metadata");
            // Still serving: a good claim prepares after each refusal.
            let ok = dra.prepare(&[("vms", "good", "u6")]).await.unwrap();
            assert_eq!(ok["u6"].error, "", "after {name}");
        }
        assert_eq!(
            driver_of(&tree, "0000:81:00.0").as_deref(),
            Some("nvme"),
            "nothing bound"
        );
        // A claim without a uid is a malformed call: a gRPC error.
        let st = dra.prepare(&[("vms", "good", "")]).await.unwrap_err();
        assert_eq!(st.code(), tonic::Code::InvalidArgument, "{st:?}");
        // Names Kubernetes never hands out (RFC 1123 for namespaces and
        // names, a UUID's characters for uids), each of which would be part
        // of a path read or written as root: refused by name, nothing written.
        let bad: [(&str, &str, &str, &str); 4] = [
            ("..", "good", "u7", "the namespace is not a DNS label"),
            ("vms", "../../good", "u7", "the name is not a DNS subdomain"),
            ("vms", "good", "../../../etc/x", "is not a UID"),
            ("Vms", "good", "u7", "the namespace is not a DNS label"),
        ];
        for (ns, name, uid, why) in bad {
            let st = dra.prepare(&[(ns, name, uid)]).await.unwrap_err();
            assert_eq!(st.code(), tonic::Code::InvalidArgument, "{st:?}");
            assert!(st.message().contains(why), "{ns}/{name} {uid}: {st:?}");
            let st = dra.unprepare(&[(ns, name, uid)]).await.unwrap_err();
            assert_eq!(st.code(), tonic::Code::InvalidArgument, "{st:?}");
        }
        assert!(!d.spec("u7").exists());
        // Several claims at once: each answered, the bad one with its error.
        let a = dra
            .prepare(&[("vms", "good", "u6"), ("vms", "unknown", "u1")])
            .await
            .unwrap();
        assert_eq!(a["u6"].error, "");
        assert!(a["u1"].error.contains("gpu-0000-99-00-0"));
        let cp = d.checkpoint();
        let recorded: Vec<&String> = cp["claims"].as_object().unwrap().keys().collect();
        assert_eq!(recorded, ["u6"]);
    });
}

#[test]
fn a_bind_that_fails_midway_leaves_nothing_half_bound() {
    let d = Dirs::new();
    let tree = plain_tree(&d.root);
    // 81:00.0 listed in group 10 too, and the kernel never lets it go.
    add_to_group(&tree, 10, "0000:81:00.0");
    let kernel = Kernel::start(&tree);
    kernel
        .refused
        .lock()
        .unwrap()
        .insert("0000:81:00.0".to_string());
    d.claim(
        "vms",
        "stuck",
        "s1",
        &[("gpu", DRIVER, &device("0000:27:00.0"))],
    );
    d.claim(
        "vms",
        "good",
        "s2",
        &[("gpu", DRIVER, &device("0000:28:00.0"))],
    );
    let _p = start(&d, &tree, &["--bind", "--bind-timeout-ms", "300"]);
    rt().block_on(async {
        register(&d.reg_socket(), None).await;
        let mut dra = Dra::v1(&d.dra_socket()).await;
        let a = dra.prepare(&[("vms", "stuck", "s1")]).await.unwrap();
        let e = &a["s1"].error;
        assert!(
            e.contains("claim vms/stuck") && e.contains("binding 0000:81:00.0 to vfio-pci"),
            "{e}"
        );
        // 27:00.0 was bound first, then given back.
        assert_eq!(driver_of(&tree, "0000:27:00.0").as_deref(), Some("nvme"));
        assert_eq!(driver_of(&tree, "0000:81:00.0").as_deref(), Some("nvme"));
        for f in ["0000:27:00.0", "0000:81:00.0"] {
            let over = std::fs::read_to_string(function_dir(&tree, f).join("driver_override"))
                .unwrap_or_default();
            assert_eq!(over.trim(), "", "{f}: driver_override cleared");
        }
        assert!(!d.spec("s1").exists());
        assert_eq!(d.checkpoint()["claims"], json!({}));
        let ok = dra.prepare(&[("vms", "good", "s2")]).await.unwrap();
        assert_eq!(ok["s2"].error, "");
        assert_eq!(
            driver_of(&tree, "0000:28:00.0").as_deref(),
            Some("vfio-pci")
        );
    });
    let probes = kernel.probes.lock().unwrap().clone();
    assert!(
        probes.contains(&("0000:27:00.0".to_string(), "vfio-pci".to_string())),
        "{probes:?}"
    );
    assert!(
        probes.contains(&("0000:27:00.0".to_string(), "nvme".to_string())),
        "{probes:?}"
    );
}

#[test]
fn a_restart_mid_prepare_neither_loses_nor_doubles_the_preparation() {
    let d = Dirs::new();
    let tree = plain_tree(&d.root);
    let kernel = Kernel::start(&tree);
    kernel
        .held
        .lock()
        .unwrap()
        .insert("0000:28:00.0".to_string());
    let uid = "r1";
    d.claim(
        "vms",
        "pair",
        uid,
        &[
            ("a", DRIVER, &device("0000:27:00.0")),
            ("b", DRIVER, &device("0000:28:00.0")),
        ],
    );
    let mut first = start(&d, &tree, &["--bind", "--bind-timeout-ms", "60000"]);
    let rt = rt();
    rt.block_on(async {
        register(&d.reg_socket(), None).await;
        let sock = d.dra_socket();
        let call = tokio::spawn(async move {
            let mut dra = Dra::v1(&sock).await;
            dra.prepare(&[("vms", "pair", "r1")]).await
        });
        // Wait until 27:00.0 is bound and 28:00.0's bind has begun.
        let start = Instant::now();
        loop {
            let over = std::fs::read_to_string(
                function_dir(&tree, "0000:28:00.0").join("driver_override"),
            )
            .unwrap_or_default();
            if over == "vfio-pci" && driver_of(&tree, "0000:27:00.0").as_deref() == Some("vfio-pci")
            {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "the bind begins");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The driver dies mid-prepare.
        first.0.kill().unwrap();
        first.0.wait().unwrap();
        let r: Result<BTreeAnswer, _> = call.await.unwrap();
        assert!(r.is_err(), "the call in flight fails with the driver");
    });
    let cp = d.checkpoint();
    assert_eq!(cp["claims"][uid]["state"], "preparing");
    assert_eq!(
        cp["claims"][uid]["bound"],
        json!([{"bdf": "0000:27:00.0", "driver": "nvme"}, {"bdf": "0000:28:00.0", "driver": "nvme"}])
    );
    assert!(!d.spec(uid).exists());
    // Restarted; the kernel gets on with the bind.
    kernel.held.lock().unwrap().clear();
    let _second = start(&d, &tree, &["--bind", "--bind-timeout-ms", "60000"]);
    rt.block_on(async {
        register(&d.reg_socket(), None).await;
        let mut dra = Dra::v1(&d.dra_socket()).await;
        let a = dra.prepare(&[("vms", "pair", uid)]).await.unwrap();
        assert_eq!(a[uid].error, "");
        assert_eq!(a[uid].devices.len(), 2);
        let cp = d.checkpoint();
        assert_eq!(cp["claims"][uid]["state"], "prepared");
        // Not doubled: each function recorded once, with the driver it had
        // before the first run bound it.
        assert_eq!(
            cp["claims"][uid]["bound"],
            json!([{"bdf": "0000:27:00.0", "driver": "nvme"}, {"bdf": "0000:28:00.0", "driver": "nvme"}])
        );
        assert_eq!(spec_devices(&read_json(&d.spec(uid))).len(), 4);
        // Not lost: unprepare gives back both, including the one the first run bound.
        let u = dra.unprepare(&[("vms", "pair", uid)]).await.unwrap();
        assert_eq!(u[uid], "");
        assert_eq!(driver_of(&tree, "0000:27:00.0").as_deref(), Some("nvme"));
        assert_eq!(driver_of(&tree, "0000:28:00.0").as_deref(), Some("nvme"));
        assert!(!d.spec(uid).exists());
        assert_eq!(d.checkpoint()["claims"], json!({}));
    });
}

type BTreeAnswer = std::collections::BTreeMap<String, ClaimAnswer>;

#[test]
fn the_cdi_schema_refuses_specs_that_break_the_specification() {
    // The schema is vp2p's own reading of SPEC.md; each rule must bite.
    let v = schema();
    let good = json!({"cdiVersion": "0.6.0", "kind": "gpu.vp2p.io/vfio",
        "devices": [{"name": "3f6c-gpu-0000-27-00-0",
                     "containerEdits": {"deviceNodes": [{"path": "/dev/vfio/10"}]}}]});
    assert!(v.is_valid(&good));
    let bad = |edit: &dyn Fn(&mut Value)| {
        let mut s = good.clone();
        edit(&mut s);
        s
    };
    let cases: Vec<(&str, Value)> = vec![
        (
            "version not semver",
            bad(&|s| s["cdiVersion"] = json!("0.6")),
        ),
        ("kind without a prefix", bad(&|s| s["kind"] = json!("vfio"))),
        (
            "kind with two slashes",
            bad(&|s| s["kind"] = json!("vendor.com/foo/bar")),
        ),
        (
            "kind name ending in a dash",
            bad(&|s| s["kind"] = json!("vendor.com/foo-")),
        ),
        ("no devices", bad(&|s| s["devices"] = json!([]))),
        (
            "device name with a slash",
            bad(&|s| s["devices"][0]["name"] = json!("a/b")),
        ),
        (
            "device node without a path",
            bad(&|s| {
                s["devices"][0]["containerEdits"]["deviceNodes"] = json!([{"hostPath": "/dev/x"}])
            }),
        ),
        (
            "mount without containerPath",
            bad(&|s| s["devices"][0]["containerEdits"]["mounts"] = json!([{"hostPath": "/x"}])),
        ),
        (
            "unknown field",
            bad(&|s| s["devices"][0]["containerEdits"]["devices"] = json!([])),
        ),
        (
            "hook with a relative path",
            bad(&|s| {
                s["containerEdits"] =
                    json!({"hooks": [{"hookName": "createContainer", "path": "bin/x"}]})
            }),
        ),
    ];
    for (what, spec) in cases {
        assert!(!v.is_valid(&spec), "{what}: {spec}");
    }
}
