//! Small fleets on the real control plane and kube-scheduler.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use p2p_tests::repo_root;
use serde_json::Value;

/// A trees directory holding only `names` from tests/fixtures.
fn trees_of(dir: &Path, names: &[&str]) {
    for n in names {
        std::os::unix::fs::symlink(repo_root().join("tests/fixtures").join(n), dir.join(n))
            .unwrap();
    }
}

/// The fleet binary on the trees `names` of tests/fixtures with `args`,
/// on a control plane of its own: its stdout and its `--json` document.
fn fleet_on(names: &[&str], args: &[&str]) -> (String, Value) {
    let (stdout, doc, _) = fleet_in(names, args);
    (stdout, doc)
}

/// [`fleet_on`], and the directory its work (logs) went to.
fn fleet_in(names: &[&str], args: &[&str]) -> (String, Value, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let trees = tmp.path().join("trees");
    std::fs::create_dir_all(&trees).unwrap();
    trees_of(&trees, names);
    let json = tmp.path().join("fleet.json");
    let out = Command::new(env!("CARGO_BIN_EXE_fleet"))
        .current_dir(repo_root())
        .arg("--trees")
        .arg(&trees)
        .args(args)
        .arg("--work")
        .arg(tmp.path().join("work"))
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "fleet failed:\n{stdout}\n{stderr}");
    eprintln!("{stdout}");
    let doc = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (stdout, doc, tmp)
}

/// `--extender`: kube-scheduler, given vp2p's extender in its
/// KubeSchedulerConfiguration, calls `p2p-host dra extender`, which reads
/// the scheduler's ExtenderArgs (Go's field names), the claim and the
/// slices, and scores the nodes; every pod is still counted once.
#[test]
fn the_real_scheduler_calls_vp2ps_extender_and_gets_scores() {
    let (_, doc, work) = fleet_in(
        &["qemu-11.1-eight-gpu-iommu-on"],
        &[
            "--nodes",
            "4",
            "--regimes",
            "fill",
            "--policies",
            "vp2p,count",
            "--extender",
            "5",
        ],
    );
    assert_eq!(doc["extender"]["weight"], 5);
    // Room kept for every size of the default mix (2=60,4+nic=30,8=10).
    assert_eq!(
        doc["extender"]["keep"],
        serde_json::json!(["2", "4+nic", "8"])
    );
    let log = std::fs::read_to_string(work.path().join("work/extender.log")).unwrap();
    assert!(
        log.contains("scheduler extender on http://127.0.0.1:"),
        "{log}"
    );
    let first = log
        .lines()
        .find(|l| l.contains("extender: call 1: pod "))
        .unwrap_or_else(|| panic!("no call logged:\n{log}"));
    // Four empty eight-gpu nodes: the first VM fits a switch on each.
    assert!(first.contains("4 node(s), best score"), "{first}");
    assert!(!first.contains("best score 0 "), "{first}");
    assert!(
        !log.contains("extender: the request") && !log.contains("extender: pod "),
        "errors:\n{log}"
    );
    for r in doc["runs"].as_array().unwrap() {
        for s in r["sizes"].as_array().unwrap() {
            let n = |k: &str| s[k].as_u64().unwrap();
            assert_eq!(n("placed") + n("refused"), n("arrived"), "{s}");
        }
    }
}

#[test]
fn a_small_fleet_on_the_real_scheduler_counts_every_policy_on_the_same_arrivals() {
    let (stdout, doc) = fleet_on(
        &["qemu-11.1-eight-gpu-iommu-on"],
        &[
            "--nodes",
            "6",
            "--seeds",
            "1",
            "--churn-loads",
            "1.0",
            "--warmup",
            "0.5",
            "--window",
            "1",
        ],
    );
    assert_eq!(doc["schema"], "vp2p.fleet/2");
    let runs = doc["runs"].as_array().unwrap();
    let keys: BTreeSet<(&str, &str)> = runs
        .iter()
        .map(|r| (r["regime"].as_str().unwrap(), r["policy"].as_str().unwrap()))
        .collect();
    // The scheduled policies in both regimes; greedy and the two optima in fill.
    let mut want = BTreeSet::new();
    for p in ["vp2p", "nvidia", "count", "kubevirt"] {
        want.insert(("fill", p));
        want.insert(("churn-100", p));
    }
    for p in ["greedy", "optimum", "optimum-well"] {
        want.insert(("fill", p));
    }
    assert_eq!(keys, want);
    assert_eq!(runs.len(), want.len());
    let run = |regime: &str, policy: &str| {
        runs.iter()
            .find(|r| r["regime"] == regime && r["policy"] == policy)
            .unwrap()
    };
    let sizes = |r: &Value, key: &str| -> Vec<u64> {
        r["sizes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s[key].as_u64().unwrap())
            .collect()
    };
    // 6 eight-GPU nodes, 48 GPUs; fill asks 110 % of them: at least 53 GPUs.
    let fill_arrived = sizes(run("fill", "vp2p"), "arrived");
    let asked: u64 = fill_arrived.iter().zip([2, 4, 8]).map(|(n, g)| n * g).sum();
    assert!((53..53 + 8).contains(&asked), "{asked} GPUs asked");
    for regime in ["fill", "churn-100"] {
        let arrived = sizes(run(regime, "vp2p"), "arrived");
        for p in ["nvidia", "count", "kubevirt"] {
            assert_eq!(
                sizes(run(regime, p), "arrived"),
                arrived,
                "{regime} {p}: the same arrivals"
            );
        }
        for p in ["vp2p", "nvidia", "count", "kubevirt"] {
            let r = run(regime, p);
            let (placed, refused) = (sizes(r, "placed"), sizes(r, "refused"));
            for i in 0..3 {
                assert_eq!(
                    placed[i] + refused[i],
                    arrived[i],
                    "{regime} {p}: every arrival counted once"
                );
            }
        }
        assert!(run(regime, "vp2p")["gpu_hours_served"].is_null() == (regime == "fill"));
    }
    // Six nodes are few enough for branch and bound: both optima proven.
    for o in doc["optima"].as_array().unwrap() {
        if o["regime"] == "fill" {
            assert_eq!(o["exact"], true, "{o}");
        } else {
            assert!(o["exact"].is_null(), "{o}");
        }
    }
    // No policy beats the optimum: placed at most the optimum's, well
    // placed at most the well-placed optimum's.
    let total = |r: &Value, key: &str| sizes(r, key).iter().sum::<u64>();
    let (best_placed, best_well) = (
        total(run("fill", "optimum"), "placed"),
        total(run("fill", "optimum-well"), "well_placed"),
    );
    for p in ["vp2p", "nvidia", "count", "kubevirt", "greedy"] {
        let r = run("fill", p);
        assert!(
            total(r, "placed") <= best_placed,
            "{p} placed more than the optimum"
        );
        assert!(
            total(r, "well_placed") <= best_well,
            "{p} well placed more than the optimum"
        );
    }
    // On eight-gpu nodes only, every switch holds 4 GPUs, and vp2p's claims
    // take GPUs by twos (2-GPU VMs at the switch tier) or a whole switch
    // (4-GPU VMs, the switch tier) or a whole node: a switch's free count
    // stays even, so a 2-GPU VM always finds a free pair on one switch (PIX)
    // while nobody leaves.
    let two = &run("fill", "vp2p")["sizes"][0];
    assert!(two["placed"].as_u64().unwrap() > 0);
    assert_eq!(two["by_class"]["PIX"], two["placed"], "{two}");
    // An 8-GPU VM there can only be PHB (two switches below one root complex).
    let eight = &run("fill", "vp2p")["sizes"][2];
    for c in ["NV", "PIX", "PXB", "NODE", "SYS"] {
        assert_eq!(eight["by_class"][c], 0, "{eight}");
    }
    assert!(stdout.contains("DRA filter timeout (10 s)"), "{stdout}");
    assert!(stdout.contains("Goals, seed by seed:"), "{stdout}");
}

/// On partitioned NVSwitch nodes the real scheduler, given vp2p's shipped
/// tiered claims or NVIDIA's partition attributes, gives every VM a whole
/// Fabric Manager partition: the tier each allocation names is the
/// partition one, and the grader (which counts NVLink only inside one
/// partition) finds every placed VM on NVLink.
#[test]
fn on_partitioned_nodes_both_policies_take_whole_partitions() {
    let (_, doc) = fleet_on(
        &["fleet-nvswitch"],
        &[
            "--nodes",
            "4",
            "--regimes",
            "fill",
            "--policies",
            "vp2p,nvidia",
        ],
    );
    for r in doc["runs"].as_array().unwrap() {
        let tier = if r["policy"] == "vp2p" {
            "fm-partition"
        } else {
            "partition"
        };
        for s in r["sizes"].as_array().unwrap() {
            let placed = s["placed"].as_u64().unwrap();
            assert_eq!(s["by_class"]["NV"], placed, "{}: {s}", r["policy"]);
            let tiers = s["gpu_tiers"].as_object().unwrap();
            let on_tier = tiers.get(tier).and_then(Value::as_u64).unwrap_or(0);
            assert_eq!(on_tier, placed, "{}: {s}", r["policy"]);
        }
        let placed: u64 = r["sizes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["placed"].as_u64().unwrap())
            .sum();
        assert!(placed > 0, "{r}");
    }
}
