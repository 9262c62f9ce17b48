//! `scripts/kube-sandbox.sh` as a user runs it: docs/kubevirt.md's
//! walk-through ("A real control plane without a cluster") runs verbatim
//! from the repository's root, and the real scheduler gives the VM's pod two
//! GPUs below one switch of the captured two-socket tree; `up` on a running
//! directory says so and exits 3.

use std::process::Command;

use p2p_tests::kube::kube_peers;
use p2p_tests::{docs_sh_block, repo_root};

/// The `sh` block of the page's sandbox section, as the page shows it.
fn walkthrough() -> String {
    docs_sh_block(
        "docs/kubevirt.md",
        "### A real control plane without a cluster",
    )
}

#[test]
fn the_docs_sandbox_walkthrough_runs_verbatim_and_places_two_gpus_below_one_switch() {
    let block = walkthrough();
    assert!(block.starts_with("bash scripts/kube-sandbox.sh up /tmp/k\n"));
    assert!(block.ends_with("bash scripts/kube-sandbox.sh down /tmp/k\n"));
    let _ = kube_peers(); // built (once) before the clock of the block starts
    let _ = std::fs::remove_dir_all("/tmp/k");
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &block])
        .current_dir(repo_root())
        .env("VP2P_KUBE_PEERS", kube_peers())
        .env_remove("KUBECONFIG")
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        // Leave nothing running behind a failed block.
        let _ = Command::new(kube_peers()).args(["down", "/tmp/k"]).status();
    }
    assert!(
        out.status.success(),
        "the walk-through failed:\n{stdout}\n{stderr}"
    );
    // By hand from the tree: the GPU pairs below one switch.
    let pairs = [
        "gpu-0 gpu-0000-23-00-0\ngpu-1 gpu-0000-24-00-0\n",
        "gpu-0 gpu-0000-24-00-0\ngpu-1 gpu-0000-23-00-0\n",
        "gpu-0 gpu-0000-83-00-0\ngpu-1 gpu-0000-84-00-0\n",
        "gpu-0 gpu-0000-84-00-0\ngpu-1 gpu-0000-83-00-0\n",
    ];
    assert!(
        pairs.iter().any(|p| stdout.contains(p)),
        "the allocation is a pair below one switch:\n{stdout}"
    );
    assert!(
        stdout.contains("stopped the control plane of /tmp/k"),
        "{stdout}"
    );
}

#[test]
fn up_on_a_running_directory_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("k");
    let up = |d: &std::path::Path| {
        Command::new("bash")
            .arg(repo_root().join("scripts/kube-sandbox.sh"))
            .arg("up")
            .arg(d)
            .env("VP2P_KUBE_PEERS", kube_peers())
            .output()
            .unwrap()
    };
    let first = up(&d);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let second = up(&d);
    let down = Command::new("bash")
        .arg(repo_root().join("scripts/kube-sandbox.sh"))
        .arg("down")
        .arg(&d)
        .env("VP2P_KUBE_PEERS", kube_peers())
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(3));
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(err.contains("already running"), "{err}");
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    // Down means down: the supervisor and its components are gone.
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("state.json")).unwrap()).unwrap();
    let pid = state["supervisor_pid"].as_i64().unwrap() as i32;
    // SAFETY: kill(2) with signal 0 only asks whether the process exists.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    assert!(!alive, "the supervisor {pid} still runs after down");
}
