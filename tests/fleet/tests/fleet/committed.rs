//! The counted runs committed under docs/results.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

use p2p_tests::{repo_root, stdout_of};
use serde_json::Value;

/// The result directories holding counted fleet runs (schema vp2p.fleet/2).
const COUNTED: &[&str] = &[
    "dev-2vcpu-2026-11-29-fleet-counts",
    "dev-2vcpu-2026-11-29-fleet-extender",
    "dev-2vcpu-2026-11-29-fleet-nic-last",
    "dev-2vcpu-2026-11-29-fleet-pick",
    "dev-2vcpu-2026-11-29-fleet-seed12",
];

/// Tables of several committed runs counted together: (directory, the
/// files `--report` is given from it, the table holding what it prints).
const TOGETHER: &[(&str, &[&str], &str)] = &[(
    "dev-2vcpu-2026-11-29-fleet-seed12",
    &[
        "../dev-2vcpu-2026-11-29-fleet-counts/fleet.json",
        "fleet.json",
    ],
    "test-seeds-table.txt",
)];

/// docs/results' tables over several runs (the test seeds, each run on its
/// own) hold what `fleet --report FILE..` prints of those files (the format).
#[test]
fn the_committed_tables_over_several_runs_format_is_their_report() {
    for (name, files, table) in TOGETHER {
        let dir = repo_root().join("docs/results").join(name);
        let args: Vec<&OsStr> = std::iter::once(OsStr::new("--report"))
            .chain(files.iter().map(OsStr::new))
            .collect();
        let report = fleet(&dir, &args);
        let text = std::fs::read_to_string(dir.join(table)).unwrap();
        assert!(
            text.contains(&report),
            "{name}/{table} does not hold `fleet --report`'s output:\n{report}"
        );
    }
}

/// docs/results' counted fleet runs: the format of their counts (one run per
/// policy, regime and seed; per size, placed and refused add up to arrived,
/// and so do the placed VMs by shape; the same arrivals for every policy of
/// a regime and seed; the optima only in fill, proven or marked not), and
/// the tables and goals `--report` prints of each `NAME.json` are the ones
/// in its table (`table.txt` for fleet.json, `NAME-table.txt` for the
/// others).
#[test]
fn the_committed_fleet_counts_format_adds_up_and_each_table_is_their_report() {
    for name in COUNTED {
        let dir = repo_root().join("docs/results").join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        assert!(files.iter().any(|f| f.ends_with("fleet.json")), "{files:?}");
        for json in &files {
            committed_counts_add_up(json);
        }
    }
}

/// `--report` over several files refuses a seed, regime and policy counted
/// in two of them (their mean would count it twice), naming both files.
#[test]
fn report_refuses_a_run_counted_in_two_files() {
    let dir = repo_root().join("docs/results/dev-2vcpu-2026-11-29-fleet-counts");
    let out = Command::new(env!("CARGO_BIN_EXE_fleet"))
        .current_dir(&dir)
        .args(["--report", "fleet.json", "fleet.json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("seed 11 "), "{err}");
    assert!(
        err.contains(" is in both fleet.json and fleet.json"),
        "{err}"
    );
}

/// The template searches committed under docs/results.
const TUNING: &[&str] = &[
    "dev-2vcpu-2026-11-29-fleet-tuning",
    "dev-2vcpu-2026-11-29-fleet-churn-tuning",
];

/// docs/results' template searches: each candidate's counts add up as a
/// counted run's do, and `tuning.txt` is what `fleet --tuning` prints of the
/// files its FILE column names, in that order (the format, picks included).
#[test]
fn the_committed_template_search_format_adds_up_and_its_table_is_fleet_tuning() {
    for name in TUNING {
        let dir = repo_root().join("docs/results").join(name);
        let table = std::fs::read_to_string(dir.join("tuning.txt")).unwrap();
        let mut files: Vec<&str> = table
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        files.dedup();
        assert!(files.len() >= 2, "{table}");
        for f in &files {
            committed_counts_add_up(&dir.join(f));
        }
        let args: Vec<&OsStr> = std::iter::once(OsStr::new("--tuning"))
            .chain(files.iter().map(OsStr::new))
            .collect();
        assert_eq!(fleet(&dir, &args), table, "{name}");
    }
}

/// What the fleet binary prints with `args`, run in `dir`; it must succeed.
fn fleet(dir: &Path, args: &[&OsStr]) -> String {
    stdout_of(
        Command::new(env!("CARGO_BIN_EXE_fleet"))
            .current_dir(dir)
            .args(args),
    )
}

fn committed_counts_add_up(json: &Path) {
    let dir = json.parent().unwrap();
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    assert_eq!(doc["schema"], "vp2p.fleet/2");
    let runs = doc["runs"].as_array().unwrap();
    let mut keys = BTreeSet::new();
    for r in runs {
        let (policy, regime) = (r["policy"].as_str().unwrap(), r["regime"].as_str().unwrap());
        keys.insert((policy, regime, r["seed"].as_u64().unwrap()));
        if policy.starts_with("optimum") || policy == "greedy" {
            assert_eq!(regime, "fill", "{policy} runs only in fill");
        }
        assert!(doc["seeds"].as_array().unwrap().contains(&r["seed"]), "{r}");
        for s in r["sizes"].as_array().unwrap() {
            let n = |k: &str| s[k].as_u64().unwrap();
            assert_eq!(
                n("placed") + n("refused"),
                n("arrived"),
                "{policy} {regime}: {s}"
            );
            assert!(n("well_placed") <= n("placed"), "{s}");
            if let Some(by) = s["by_shape"].as_object().filter(|b| !b.is_empty()) {
                let sum: u64 = by.values().map(|v| v.as_u64().unwrap()).sum();
                assert_eq!(sum, n("placed"), "{policy} {regime}: by_shape {s}");
            }
            if let Some(by) = s["by_class"].as_object() {
                assert_eq!(by.len(), 6, "{s}");
                assert_eq!(
                    by.values().map(|v| v.as_u64().unwrap()).sum::<u64>(),
                    n("placed")
                );
            }
        }
        // A tuning run may hold one policy: the first run of the regime and
        // seed stands for the arrivals.
        let same = runs
            .iter()
            .find(|o| o["regime"] == r["regime"] && o["seed"] == r["seed"])
            .unwrap();
        let arrived = |x: &Value| -> Vec<u64> {
            x["sizes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["arrived"].as_u64().unwrap())
                .collect()
        };
        assert_eq!(
            arrived(r),
            arrived(same),
            "{policy} {regime}: the same arrivals as {}",
            same["policy"]
        );
    }
    assert_eq!(
        keys.len(),
        runs.len(),
        "one run per policy, regime and seed"
    );
    for o in doc["optima"].as_array().unwrap() {
        let fill = o["regime"] == "fill";
        assert_eq!(o["count"].is_u64(), fill, "{o}");
        assert_eq!(o["exact"].is_boolean(), fill, "{o}");
        if let Some(c) = o["count"].as_u64() {
            assert!(c as f64 <= o["bound"].as_f64().unwrap() + 1e-6, "{o}");
        }
    }
    let report = fleet(dir, &[OsStr::new("--report"), json.as_os_str()]);
    let stem = json.file_stem().unwrap().to_string_lossy();
    let table_file = if stem == "fleet" {
        dir.join("table.txt")
    } else {
        dir.join(format!("{stem}-table.txt"))
    };
    let table = std::fs::read_to_string(&table_file).unwrap();
    assert!(
        table.contains(&report),
        "{} does not hold `fleet --report`'s output:\n{report}",
        table_file.display()
    );
}
