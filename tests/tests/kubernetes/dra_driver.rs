//! `p2p-host dra driver`, the DRA kubelet plugin, against a kubelet
//! stand-in (tests/src/dra_kubelet.rs) that registers over the plugin
//! watcher's protocol and calls NodePrepareResources /
//! NodeUnprepareResources with bytes encoded from the published API table,
//! on a copy of the captured nested-switch tree (its NVMe functions play
//! GPUs, `--gpu-class 0108`, all on vfio-pci). Only what the kubelet's own
//! code cannot be made to send stays here: a registration it refuses, a
//! NodePrepareResources or NodeUnprepareResources repeated for a claim it
//! already prepared or unprepared (the kubelet's DRA manager skips a claim
//! its own checkpoint says is prepared; a repeat comes only after it lost
//! that state or failed midway), and the v1beta1 API (kubelet 1.37 takes v1
//! when the driver offers it). No kubelet, API server or container runtime
//! runs here: the claims are ResourceClaim objects in a directory
//! (`--claims-dir`). Every happy path (registration, prepare, the CDI spec
//! and its injection, the device metadata, `--bind` and `--iommufd`,
//! unprepare) runs under the kubelet's own code against the real control
//! plane instead: tests/tests/kubernetes/kube_kubelet_dra.rs and
//! kube_kubelet_dra_bind.rs. Refusals, failed binds and restarts are
//! tests/tests/kubernetes/dra_driver_failures.rs; the node's scaffolding is
//! tests/src/dra_node.rs. The CDI spec's schema
//! (tests/contracts/cdi-spec.schema.json), which those tests validate specs
//! against, is shown to bite here.
//!
//! The tree's facts, read from the fixture (kernel/iommu_groups): 27:00.0 is
//! alone with its switch port 22:01.0 in group 10, 28:00.0 alone in group
//! 11.

use p2p_tests::dra_kubelet::{register, Dra};
use p2p_tests::dra_node::*;
use p2p_tests::grpc_wire::table::KUBELET_DRA_V1BETA1;
use p2p_tests::kubelet::vfio_tree;
use serde_json::{json, Value};

/// A registration the kubelet refuses (as one would over a version skew)
/// is answered, and the plugin keeps serving: registered again, it
/// prepares.
#[test]
fn a_refused_registration_is_answered_and_the_plugin_keeps_serving() {
    let d = Dirs::new();
    let tree = vfio_tree(&d.root);
    let uid = "5b0e2c7a-1f3d-4e6a-8b9c-0d1e2f3a4b5c";
    d.claim(
        "vms",
        "vm-gpu",
        uid,
        &[("gpu0", DRIVER, &device("0000:27:00.0"))],
    );
    let _p = start(&d, &tree, &[]);
    rt().block_on(async {
        register(&d.reg_socket(), Some("version skew")).await;
        let info = register(&d.reg_socket(), None).await;
        assert_eq!(info.kind, "DRAPlugin");
        assert_eq!(info.name, DRIVER);
        let mut dra = Dra::v1(&d.dra_socket()).await;
        let answer = dra.prepare(&[("vms", "vm-gpu", uid)]).await.unwrap();
        assert_eq!(answer[uid].error, "");
        assert_eq!(answer[uid].devices.len(), 1);
    });
}

/// A prepare repeated for a prepared claim, and the same call through
/// v1beta1, answer as the first v1 call did without preparing anything
/// again; an unprepare repeated is no error.
#[test]
fn a_repeated_prepare_or_unprepare_and_a_v1beta1_call_answer_as_the_first() {
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
        register(&d.reg_socket(), None).await;
        let mut dra = Dra::v1(&d.dra_socket()).await;
        let answer = dra.prepare(&[("vms", "vm-gpus", uid)]).await.unwrap();
        assert_eq!(answer[uid].error, "");
        assert_eq!(answer[uid].devices.len(), 2, "{answer:?}");
        let spec = std::fs::read(d.spec(uid)).unwrap();
        let metadata = d
            .metadata()
            .join(uid)
            .join("gpu0")
            .join(format!("{DRIVER}-metadata.json"));
        let written = std::fs::read(&metadata).unwrap();

        let again = dra.prepare(&[("vms", "vm-gpus", uid)]).await.unwrap();
        assert_eq!(again, answer);
        let mut beta = Dra::connect(&d.dra_socket(), &KUBELET_DRA_V1BETA1).await;
        assert_eq!(
            beta.prepare(&[("vms", "vm-gpus", uid)]).await.unwrap(),
            answer
        );
        assert_eq!(d.checkpoint()["claims"][uid]["state"], "prepared");
        assert_eq!(
            std::fs::read(d.spec(uid)).unwrap(),
            spec,
            "the spec unchanged"
        );
        assert_eq!(
            std::fs::read(&metadata).unwrap(),
            written,
            "the metadata unchanged"
        );

        for _ in 0..2 {
            let u = dra.unprepare(&[("vms", "vm-gpus", uid)]).await.unwrap();
            assert_eq!(u.get(uid).map(String::as_str), Some(""));
        }
        assert!(!d.spec(uid).exists());
        assert!(!d.metadata().join(uid).exists());
        assert_eq!(d.checkpoint()["claims"], json!({}));
    });
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
