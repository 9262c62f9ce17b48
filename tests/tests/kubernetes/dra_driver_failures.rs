//! `p2p-host dra driver` when things go wrong, on the same node as
//! tests/tests/kubernetes/dra_driver.rs (tests/src/dra_node.rs: copies of the captured
//! nested-switch tree, a kubelet stand-in, ResourceClaim files): bad claims
//! refused by name while the driver keeps serving, names that would be
//! paths refused before anything is written, a bind that fails midway
//! rolled back, and a driver killed mid-prepare that neither loses nor
//! doubles the preparation when it comes back.
//!
//! The tree's facts, read from the fixture (kernel/iommu_groups): 27:00.0 is
//! alone with its switch port 22:01.0 in group 10, 28:00.0 alone in group
//! 11, 25:00.0 and 26:00.0 share group 9 (so neither is published).

use std::time::{Duration, Instant};

use p2p_tests::dra_kubelet::{driver_of, function_dir, register, ClaimAnswer, Dra, Kernel};
use p2p_tests::dra_node::*;
use p2p_tests::kubelet::vfio_tree;
use serde_json::json;

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

/// A claim whose request name would climb out of the metadata directory
/// (`../../escaped`: the API server refuses such a name, so only a stand-in
/// claim can carry it) is refused naming the request, and nothing is
/// written anywhere, inside the metadata directory or beside it; a claim
/// with Kubernetes' names is prepared after it.
#[test]
fn a_request_name_that_would_climb_out_of_its_directory_is_refused() {
    let d = Dirs::new();
    let tree = vfio_tree(&d.root);
    let dev = device("0000:28:00.0");
    d.claim("vms", "climb", "u7", &[("../../escaped", DRIVER, &dev)]);
    d.claim("vms", "good", "u8", &[("gpu-0", DRIVER, &dev)]);
    let _p = start(&d, &tree, &[]);
    rt().block_on(async {
        register(&d.reg_socket(), None).await;
        let mut dra = Dra::v1(&d.dra_socket()).await;
        let a = dra.prepare(&[("vms", "climb", "u7")]).await.unwrap();
        assert!(
            a["u7"].error.contains("request name \"../../escaped\""),
            "{}",
            a["u7"].error
        );
        let a = dra.prepare(&[("vms", "good", "u8")]).await.unwrap();
        assert_eq!(a["u8"].error, "");
    });
    let escaped: Vec<_> = walk(&d.root)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("escaped"))
        .collect();
    assert!(escaped.is_empty(), "written outside: {escaped:?}");
}

/// Every path below `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

/// One viability rule for one group (the kernel's: a function with no
/// driver, or bound to vfio-pci, pci-stub or pcieport, leaves its group
/// viable; any other driver does not): `check --serve-vfio` and the DRA
/// driver (without --bind) give the same verdict on 27:00.0, whose group 10
/// is made to hold 81:00.0 too, as 81:00.0 moves from no driver to
/// pci-stub to nvme.
#[test]
fn check_and_the_driver_apply_one_viability_rule() {
    let d = Dirs::new();
    let tree = vfio_tree(&d.root);
    add_to_group(&tree, 10, "0000:81:00.0");
    d.claim(
        "vms",
        "g",
        "v1",
        &[("gpu", DRIVER, &device("0000:27:00.0"))],
    );
    let _p = start(&d, &tree, &[]);
    let check = |tree: &std::path::Path| -> (String, String) {
        let out = std::process::Command::new(p2p_tests::binary("p2p-host"))
            .args([
                "check",
                "--gpu-class",
                "0108",
                "--serve-vfio",
                "--json",
                "--sysfs-root",
            ])
            .arg(tree)
            .output()
            .unwrap();
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        let item = report["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["check"] == "serve-vfio" && i["scope"] == "0000:27:00.0")
            .cloned()
            .unwrap_or_else(|| panic!("no serve-vfio item for 27:00.0: {report}"));
        (
            item["verdict"].as_str().unwrap().to_string(),
            item["evidence"].as_str().unwrap().to_string(),
        )
    };
    let link = function_dir(&tree, "0000:81:00.0").join("driver");
    rt().block_on(async {
        register(&d.reg_socket(), None).await;
        let mut dra = Dra::v1(&d.dra_socket()).await;
        for (driver, viable) in [
            (None, true),
            (Some("pci-stub"), true),
            (Some("nvme"), false),
        ] {
            let _ = std::fs::remove_file(&link);
            if let Some(drv) = driver {
                std::fs::create_dir_all(tree.join("bus/pci/drivers").join(drv)).unwrap();
                std::os::unix::fs::symlink(tree.join("bus/pci/drivers").join(drv), &link).unwrap();
            }
            let (verdict, evidence) = check(&tree);
            let a = dra.prepare(&[("vms", "g", "v1")]).await.unwrap();
            let e = a["v1"].error.clone();
            if viable {
                assert_eq!(verdict, "pass", "check, 81:00.0 on {driver:?}: {evidence}");
                assert_eq!(e, "", "the driver, 81:00.0 on {driver:?}");
                let u = dra.unprepare(&[("vms", "g", "v1")]).await.unwrap();
                assert_eq!(u["v1"], "");
            } else {
                assert_eq!(verdict, "fail", "check, 81:00.0 on {driver:?}");
                for (who, text) in [("check", &evidence), ("the driver", &e)] {
                    assert!(
                        text.contains(
                            "IOMMU group 10 is not viable: 0000:81:00.0 is bound to nvme"
                        ),
                        "{who}: {text}"
                    );
                }
            }
        }
    });
}
