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
//! Refusals, failed binds and restarts are tests/tests/dra_driver_failures.rs;
//! the node's scaffolding is tests/src/dra_node.rs.
//!
//! The tree's facts, read from the fixture (kernel/iommu_groups): 27:00.0 is
//! alone with its switch port 22:01.0 in group 10, 28:00.0 alone in group
//! 11, 25:00.0 and 26:00.0 share group 9 (so neither is published).

use std::path::Path;

use p2p_tests::dra_kubelet::{driver_of, function_dir, register, Dra, Kernel};
use p2p_tests::dra_node::*;
use p2p_tests::grpc_wire::table::KUBELET_DRA_V1BETA1;
use p2p_tests::kubelet::vfio_tree;
use serde_json::{json, Value};

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
