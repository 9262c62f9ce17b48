//! `p2p-host dra driver` preparing claims at once, on the node of
//! tests/tests/kubernetes/dra_driver.rs (tests/src/dra_node.rs: a copy of the captured
//! nested-switch tree, the kernel stand-in binding by `drivers_probe`, a
//! kubelet stand-in): a claim whose bind hangs holds up no other claim, in
//! its own call or another; a prepare that would outlive the kubelet's
//! deadline is rolled back and answered before the kubelet gives up; and a
//! driver killed with SIGKILL at any point mid-work leaves a checkpoint from
//! which unprepare gives every function back.
//!
//! The tree's facts, read from the fixture (kernel/iommu_groups): 27:00.0 is
//! alone with its switch port 22:01.0 in group 10, 28:00.0 alone in group
//! 11, 81:00.0 alone in group 5; all three on nvme.

use std::time::{Duration, Instant};

use p2p_tests::dra_kubelet::{driver_of, function_dir, register, Dra, Kernel};
use p2p_tests::dra_node::*;
use serde_json::json;

const SLOW: &str = "0000:27:00.0";
const FAST: &str = "0000:28:00.0";
const THIRD: &str = "0000:81:00.0";

/// Every function back on nvme with no override, no CDI spec or metadata
/// left, no claim recorded.
fn assert_all_given_back(d: &Dirs, tree: &std::path::Path) {
    for f in [SLOW, FAST, THIRD] {
        assert_eq!(
            driver_of(tree, f).as_deref(),
            Some("nvme"),
            "{f} given back"
        );
        let over = std::fs::read_to_string(function_dir(tree, f).join("driver_override"))
            .unwrap_or_default();
        assert_eq!(over.trim(), "", "{f}: driver_override cleared");
    }
    let left = |dir: std::path::PathBuf| -> Vec<String> {
        std::fs::read_dir(&dir)
            .map(|r| {
                r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(left(d.cdi()), Vec::<String>::new(), "no CDI spec left");
    assert_eq!(left(d.metadata()), Vec::<String>::new(), "no metadata left");
    assert_eq!(recorded(d), json!({}), "no claim recorded");
    let plugin_dir = d.kubelet().join(format!("plugins/{DRIVER}"));
    let temporaries: Vec<String> = left(plugin_dir)
        .into_iter()
        .filter(|n| n.contains(".tmp-"))
        .collect();
    assert_eq!(
        temporaries,
        Vec::<String>::new(),
        "no temporary checkpoint left"
    );
}

/// The checkpoint's claims; none before the driver first saved it.
fn recorded(d: &Dirs) -> serde_json::Value {
    let p = d
        .kubelet()
        .join(format!("plugins/{DRIVER}/checkpoint.json"));
    if !p.exists() {
        return json!({});
    }
    d.checkpoint()["claims"].clone()
}

#[test]
fn a_claim_whose_bind_hangs_holds_up_no_other_claim() {
    let d = Dirs::new();
    let tree = plain_tree(&d.root);
    let kernel = Kernel::start(&tree);
    kernel.held.lock().unwrap().insert(SLOW.to_string());
    d.claim("vms", "slow", "s1", &[("gpu", DRIVER, &device(SLOW))]);
    d.claim("vms", "fast", "f1", &[("gpu", DRIVER, &device(FAST))]);
    d.claim("vms", "other", "o1", &[("gpu", DRIVER, &device(THIRD))]);
    let _p = start(&d, &tree, &["--bind", "--bind-timeout-ms", "60000"]);
    let rt = rt();
    rt.block_on(async {
        register(&d.reg_socket(), None).await;
        // One call with both claims: the fast one's spec is written while
        // the slow one still waits for its bind.
        let sock = d.dra_socket();
        let both = tokio::spawn(async move {
            let mut dra = Dra::v1(&sock).await;
            dra.prepare(&[("vms", "slow", "s1"), ("vms", "fast", "f1")])
                .await
        });
        let t0 = Instant::now();
        while !d.spec("f1").exists() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the fast claim of the call is prepared while the slow one waits"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            driver_of(&tree, SLOW).as_deref(),
            Some("nvme"),
            "still waiting"
        );
        // Another call meanwhile: answered at once.
        let mut dra = Dra::v1(&d.dra_socket()).await;
        let t1 = Instant::now();
        let other = dra.prepare(&[("vms", "other", "o1")]).await.unwrap();
        assert_eq!(other["o1"].error, "");
        assert!(
            t1.elapsed() < Duration::from_secs(10),
            "another call is not held up: {:?}",
            t1.elapsed()
        );
        assert!(!both.is_finished(), "the slow claim still waits");
        kernel.held.lock().unwrap().clear();
        let a = both.await.unwrap().unwrap();
        assert_eq!(a["s1"].error, "");
        assert_eq!(a["f1"].error, "");
        assert_eq!(driver_of(&tree, SLOW).as_deref(), Some("vfio-pci"));
        let cp = d.checkpoint();
        for uid in ["s1", "f1", "o1"] {
            assert_eq!(cp["claims"][uid]["state"], "prepared", "{uid}");
        }
        let u = dra
            .unprepare(&[
                ("vms", "slow", "s1"),
                ("vms", "fast", "f1"),
                ("vms", "other", "o1"),
            ])
            .await
            .unwrap();
        assert!(u.values().all(|e| e.is_empty()), "{u:?}");
    });
    assert_all_given_back(&d, &tree);
}

#[test]
fn a_prepare_that_would_outlive_the_kubelets_deadline_is_rolled_back_in_time() {
    let d = Dirs::new();
    let tree = plain_tree(&d.root);
    let kernel = Kernel::start(&tree);
    kernel.held.lock().unwrap().insert(FAST.to_string());
    // Two devices: 27:00.0 binds, 28:00.0's bind hangs past the deadline.
    d.claim(
        "vms",
        "late",
        "l1",
        &[("a", DRIVER, &device(SLOW)), ("b", DRIVER, &device(FAST))],
    );
    let _p = start(&d, &tree, &["--bind", "--bind-timeout-ms", "60000"]);
    rt().block_on(async {
        register(&d.reg_socket(), None).await;
        let mut dra = Dra::v1(&d.dra_socket()).await;
        dra.timeout = Some(Duration::from_secs(3));
        let t0 = Instant::now();
        let a = dra.prepare(&[("vms", "late", "l1")]).await;
        let took = t0.elapsed();
        // Answered before the kubelet gives up, naming the claim and why.
        let a =
            a.unwrap_or_else(|s| panic!("answered within the deadline, got {s:?} after {took:?}"));
        assert!(took < Duration::from_secs(3), "{took:?}");
        let e = &a["l1"].error;
        assert!(
            e.contains("claim vms/late")
                && e.contains("binding 0000:28:00.0 to vfio-pci")
                && e.contains("the kubelet's deadline (3s) would pass"),
            "{e}"
        );
        // Nothing half done: 27:00.0, bound first, is given back.
        assert_all_given_back(&d, &tree);
        // The kubelet's retry, once the kernel gets on: prepared whole.
        kernel.held.lock().unwrap().clear();
        dra.timeout = Some(Duration::from_secs(45));
        let a = dra.prepare(&[("vms", "late", "l1")]).await.unwrap();
        assert_eq!(a["l1"].error, "");
        assert_eq!(a["l1"].devices.len(), 2);
        assert_eq!(driver_of(&tree, FAST).as_deref(), Some("vfio-pci"));
        let u = dra.unprepare(&[("vms", "late", "l1")]).await.unwrap();
        assert_eq!(u["l1"], "");
    });
    assert_all_given_back(&d, &tree);
}

/// SIGKILL at points spread over the work of three claims prepared at once
/// (reading, recording, binding, writing, saving): each time the checkpoint
/// reads back, and the restarted driver's unprepare of every claim leaves
/// nothing bound, written or recorded; a prepare after that succeeds whole.
#[test]
fn sigkill_at_any_point_leaves_a_checkpoint_unprepare_undoes() {
    let d = Dirs::new();
    let tree = plain_tree(&d.root);
    let _kernel = Kernel::start(&tree);
    let claims = [("c1", SLOW), ("c2", FAST), ("c3", THIRD)];
    for (uid, f) in claims {
        d.claim("vms", uid, uid, &[("gpu", DRIVER, &device(f))]);
    }
    let ids: Vec<(&'static str, &'static str, &'static str)> =
        claims.iter().map(|(u, _)| ("vms", *u, *u)).collect();
    let rt = rt();
    let args = ["--bind", "--bind-timeout-ms", "10000"];
    // How long the whole call takes here, unkilled: the kill points spread
    // over it and a little past.
    let whole = {
        let _p = start(&d, &tree, &args);
        rt.block_on(async {
            register(&d.reg_socket(), None).await;
            let mut dra = Dra::v1(&d.dra_socket()).await;
            let t0 = Instant::now();
            let a = dra.prepare(&ids).await.unwrap();
            let whole = t0.elapsed();
            assert!(a.values().all(|c| c.error.is_empty()), "{a:?}");
            let u = dra.unprepare(&ids).await.unwrap();
            assert!(u.values().all(|e| e.is_empty()), "{u:?}");
            whole
        })
    };
    assert_all_given_back(&d, &tree);
    const KILLS: u32 = 20;
    let mut mid_work = 0;
    for step in 0..KILLS {
        let at = whole * step / (KILLS - 4);
        let mut p = start(&d, &tree, &args);
        rt.block_on(async {
            register(&d.reg_socket(), None).await;
            let mut dra = Dra::v1(&d.dra_socket()).await;
            let call = dra.prepare(&ids);
            // The call runs until the kill; its answer (if any) is not looked at.
            let _ = tokio::time::timeout(at, call).await;
            p.0.kill().unwrap();
            p.0.wait().unwrap();
        });
        // The checkpoint reads back (d.checkpoint() panics if it does not).
        let cp = recorded(&d);
        if cp
            .as_object()
            .is_some_and(|c| c.values().any(|e| e["state"] == "preparing"))
        {
            mid_work += 1;
        }
        let _p = start(&d, &tree, &args);
        rt.block_on(async {
            register(&d.reg_socket(), None).await;
            let mut dra = Dra::v1(&d.dra_socket()).await;
            let u = dra.unprepare(&ids).await.unwrap();
            assert!(u.values().all(|e| e.is_empty()), "kill at {at:?}: {u:?}");
        });
        assert_all_given_back(&d, &tree);
    }
    eprintln!(
        "a whole prepare took {whole:?}; {mid_work} of {KILLS} kills left a claim mid-preparation"
    );
    assert!(mid_work > 0, "some kill landed mid-preparation");
    let _p = start(&d, &tree, &args);
    rt.block_on(async {
        register(&d.reg_socket(), None).await;
        let mut dra = Dra::v1(&d.dra_socket()).await;
        let a = dra.prepare(&ids).await.unwrap();
        assert!(a.values().all(|c| c.error.is_empty()), "{a:?}");
        let u = dra.unprepare(&ids).await.unwrap();
        assert!(u.values().all(|e| e.is_empty()), "{u:?}");
    });
    assert_all_given_back(&d, &tree);
}
