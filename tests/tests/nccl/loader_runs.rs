//! `p2p-guest nccl-topo explain` against NCCL 2.28.3's own loader on GPU
//! VMs: files NCCL refused or accepted, its output recorded beside each, and
//! explain's verdict on each (today's, and the one recorded beside NCCL's).

use std::path::PathBuf;

use p2p_tests::nccl_explain::{explain_file, nccl_warn};
use p2p_tests::{fixture_dir, repo_root, unpack_fixture};

/// NCCL 2.28.3 itself, on the one-H100 VM of 2026-11-28, given the file
/// `p2p-guest nccl-topo --hide-nvlink` wrote there and ten copies, nine
/// each missing what NCCL's reader or loader requires
/// (docs/results/h100x1-2026-11-28-nccl-loader/files, NCCL's output beside
/// each). On the captured tree of an H100 VM of the same kind (no driver):
/// where NCCL printed a WARN and failed, explain exits 1 and its first
/// refusal is that WARN, word for word; where NCCL initialised (the file as
/// written, and without the GPU's class and link attributes, which NCCL
/// fills), explain refuses nothing and exits 0.
#[test]
fn loader_refusals_are_what_nccl_printed_on_the_h100_vm() {
    let tree = unpack_fixture("h100x1-passthrough-guest");
    let dir = repo_root().join("docs/results/h100x1-2026-11-28-nccl-loader/files");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "xml"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 11, "{files:?}");
    let (mut refused, mut accepted) = (0, 0);
    for file in &files {
        let log = std::fs::read_to_string(file.with_extension("nccl.txt")).unwrap();
        let (code, report) = explain_file(
            &tree.path().join("sysfs"),
            &fixture_dir("h200x2-passthrough-guest").join("cpuinfo-identity.txt"),
            file,
        );
        let first = report["loader_refusals"][0]["nccl_prints"].as_str();
        match nccl_warn(&log) {
            Some(w) => {
                refused += 1;
                assert_eq!(code, Some(1), "{}", file.display());
                assert_eq!(first, Some(w.as_str()), "{}", file.display());
                assert!(
                    report["pairs"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .all(|p| p["transport"] == "ERROR"),
                    "{}",
                    file.display()
                );
            }
            None => {
                accepted += 1;
                assert!(log.contains("all-reduce verified"), "NCCL ran: {log}");
                assert_eq!(code, Some(0), "{}: {report:#}", file.display());
                assert_eq!(
                    report["loader_refusals"],
                    serde_json::json!([]),
                    "{}",
                    file.display()
                );
            }
        }
    }
    assert_eq!((refused, accepted), (9, 2));
}

const CPU_FILL: &str = "docs/results/h200x4-2026-11-28-nccl-cpu-fill";

/// Reads back the recorded run of 2026-11-28 on the 4x H200 VM
/// (docs/results/h200x4-2026-11-28-nccl-cpu-fill): for every file and GPU
/// set, explain's recorded JSON names NCCL's own WARN word for word where
/// NCCL failed, and refuses nothing where NCCL initialised (checks the
/// records' format and their agreement, not today's code).
#[test]
fn cpu_fill_predictions_recorded_on_the_h200x4_vm_are_what_nccl_printed() {
    let dir = repo_root().join(CPU_FILL).join("files");
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".nccl.txt"))
        .collect();
    logs.sort();
    assert_eq!(logs.len(), 6, "{logs:?}");
    let (mut refused, mut accepted) = (0, 0);
    for log_path in &logs {
        let log = std::fs::read_to_string(log_path).unwrap();
        let name = log_path.to_string_lossy().replace(".nccl.txt", "");
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(format!("{name}.explain.json")).unwrap())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(report["schema"], "vp2p.nccl-explain/1", "{name}");
        let first = report["loader_refusals"][0]["nccl_prints"].as_str();
        match nccl_warn(&log) {
            Some(w) => {
                refused += 1;
                assert!(log.trim_end().ends_with("rc=1"), "{name}: {log}");
                assert_eq!(first, Some(w.as_str()), "{name}");
            }
            None => {
                accepted += 1;
                assert!(log.contains("all-reduce verified"), "{name}: {log}");
                assert_eq!(report["loader_refusals"], serde_json::json!([]), "{name}");
            }
        }
    }
    assert_eq!((refused, accepted), (3, 3));
}

/// Today's explain on the four-GPU files of that run, in the captured tree
/// of a 4x H200 VM of the same kind with its one net as the run recorded it
/// (`class-net.txt`: `eth0`, a virtio interface, speed -1, added to the
/// copy of the tree): exit status and first refusal as NCCL's own.
#[test]
fn cpu_fill_files_explained_today_as_nccl_did_on_the_h200x4_vm() {
    let tree = unpack_fixture("h200x4-passthrough-guest");
    let sysfs = tree.path().join("sysfs");
    let recorded = std::fs::read_to_string(repo_root().join(CPU_FILL).join("class-net.txt"))
        .expect("the run's class-net.txt");
    assert!(recorded.contains(
        "/sys/class/net/eth0 -> /sys/devices/pci0000:00/0000:00:03.0/virtio2/net/eth0 speed=-1"
    ));
    let eth0 = sysfs.join("class/net/eth0");
    std::fs::create_dir_all(&eth0).unwrap();
    std::fs::write(eth0.join("speed"), "-1\n").unwrap();
    let dir = repo_root().join(CPU_FILL).join("files");
    let mut checked = 0;
    for name in [
        "cpu-per-gpu-absent-bridge",
        "cpu-per-gpu",
        "one-cpu-absent-bridge",
        "cpu-per-gpu-absent-bridge-family",
    ] {
        let log = std::fs::read_to_string(dir.join(format!("{name}.nccl.txt"))).unwrap();
        let (code, report) = explain_file(
            &sysfs,
            &repo_root().join(CPU_FILL).join("cpuinfo-identity.txt"),
            &dir.join(format!("{name}.xml")),
        );
        let first = report["loader_refusals"][0]["nccl_prints"].as_str();
        match nccl_warn(&log) {
            Some(w) => {
                assert_eq!(code, Some(1), "{name}");
                assert_eq!(first, Some(w.as_str()), "{name}");
            }
            None => {
                assert_eq!(code, Some(0), "{name}: {report:#}");
                assert_eq!(first, None, "{name}");
            }
        }
        checked += 1;
    }
    assert_eq!(checked, 4);
}
