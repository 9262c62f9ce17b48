//! docs/deploy-on-a-cluster.md's sandbox walk-through ("Try it on a sandbox
//! node") runs verbatim from the repository's root: `kube-sandbox.sh up DIR
//! --node` boots the node, builds and imports the images and installs the
//! chart; the documented pod gets the two stand-ins below the switch, which
//! `p2p-host vfio-check` opens in the container; `down` stops it all.

use std::process::Command;

use p2p_tests::kube::kube_peers;
use p2p_tests::sandbox_node::one_node_at_a_time;
use p2p_tests::{binary, docs_sh_block, repo_root};

/// The `sh` block of the page's sandbox section, as the page shows it.
fn walkthrough() -> String {
    docs_sh_block("docs/deploy-on-a-cluster.md", "## Try it on a sandbox node")
}

/// Stops the sandbox when the walk-through failed before its own `down`
/// (after a `down`, one more finds nothing to stop), so a failure leaves no
/// control plane or QEMU node running.
struct SandboxDown;

impl Drop for SandboxDown {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .args(["scripts/kube-sandbox.sh", "down", "/tmp/kn"])
            .current_dir(repo_root())
            .output();
    }
}

#[test]
fn the_deploy_walkthrough_runs_verbatim_on_a_sandbox_node() {
    let _one = one_node_at_a_time();
    let block = walkthrough();
    assert!(block.starts_with("bash scripts/kube-sandbox.sh up /tmp/kn --node\n"));
    assert!(block.ends_with("bash scripts/kube-sandbox.sh down /tmp/kn\n"));
    let _ = std::fs::remove_dir_all("/tmp/kn");
    let _down = SandboxDown;
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &block])
        .current_dir(repo_root())
        .env("VP2P_KUBE_PEERS", kube_peers())
        .env("VP2P_P2P_HOST", binary("p2p-host"))
        .env_remove("KUBECONFIG")
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the walk-through failed:\n{stdout}\n{stderr}"
    );
    // The node, as kubectl shows it: Ready, the kubelet's own version, containerd 2.
    let node = stdout
        .lines()
        .find(|l| l.starts_with("vp2p-node "))
        .unwrap_or_else(|| panic!("no node line:\n{stdout}"));
    let cols: Vec<&str> = node.split_whitespace().collect();
    assert_eq!((cols[1], cols[4]), ("Ready", "v1.37.2"), "{node}");
    assert!(node.contains("containerd://2."), "{node}");
    // The container's report: two functions of the stand-ins' class, one
    // metadata file.
    let rows: Vec<&str> = stdout.lines().filter(|l| l.contains(" 1234 ")).collect();
    assert_eq!(rows.len(), 2, "two functions opened:\n{stdout}");
    for r in &rows {
        assert!(r.contains(" 1111 ") && r.contains(" 038000 "), "{r}");
    }
    assert_eq!(
        stdout
            .matches(" metadata /var/run/kubernetes.io/dra-device-attributes/")
            .count(),
        1,
        "{stdout}"
    );
    let leftover = Command::new("pgrep")
        .args(["-f", "/tmp/kn/nodes/"])
        .output()
        .unwrap();
    assert!(
        leftover.stdout.is_empty(),
        "QEMU still runs after down: {}",
        String::from_utf8_lossy(&leftover.stdout)
    );
}
