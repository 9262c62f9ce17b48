//! The end-to-end harness of vp2p's tests: the built binaries, the real
//! peers they meet (Kubernetes' control plane and kubelet clients, KubeVirt's
//! hook callers, QEMU guests, the VMMs' contracts), and the parser for real
//! `nvidia-smi topo -m` output. What lighter tests share too (fixture paths,
//! topologies, child processes ended with their test) is p2p-test-support's,
//! re-exported here.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub mod apiserver;
pub mod ch_contract;
pub mod ch_server;
pub mod dra_kubelet;
pub mod dra_model;
pub mod dra_node;
pub mod e2e;
pub mod emitted;
pub mod go_peer;
pub mod grpc_wire;
pub mod kube;
pub mod kube_claims;
pub mod kube_node;
pub mod kubelet;
pub mod kubernetes_validate;
pub mod kubevirt_case;
pub mod kubevirt_client;
pub mod libvirt;
pub mod nccl_explain;
pub mod packages;
pub mod proxmox;
pub mod qemu;
pub mod qemu_expect;
pub mod sandbox_node;
pub mod schemas;
pub mod topo_m;

pub use p2p_test_support::{fixture_dir, process, repo_root, target_dir, unpack_fixture};

/// The workspace binary `name` (`p2p-host` or `p2p-guest`), fresh: once
/// per test process, `cargo test --workspace --no-run` builds what the
/// suite builds, so the binaries are the very ones `cargo test --workspace`
/// (scripts/test.sh) made, with the same features. (A `cargo build -p` of
/// the binaries alone resolves features differently and would build every
/// dependency that differs a second time.) Run from the suite, it finds
/// everything built and returns at once.
pub fn binary(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .current_dir(repo_root())
            .args(["test", "-q", "--workspace", "--no-run"])
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the binaries failed");
        target_dir().join("debug")
    });
    dir.join(name)
}

/// Output of one run of a binary.
#[derive(Debug)]
pub struct Run {
    /// Exit code; None when a signal ended the process.
    pub code: Option<i32>,
    /// Everything it wrote to stdout (lossy UTF-8).
    pub stdout: String,
    /// Everything it wrote to stderr (lossy UTF-8).
    pub stderr: String,
}

/// Runs a workspace binary with `args`.
pub fn run(name: &str, args: &[&str]) -> Run {
    let out = Command::new(binary(name))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {name}: {e}"));
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The GPUs of tests/fixtures/qemu-11.1-two-socket-iommu-on in address
/// order, as its `topo.json` lists them.
pub const TWO_SOCKET_GPUS: [&str; 7] = [
    "0000:01:00.0",
    "0000:23:00.0",
    "0000:24:00.0",
    "0000:26:00.0",
    "0000:41:00.0",
    "0000:83:00.0",
    "0000:84:00.0",
];

/// The same GPUs as `dra slices --device-order nic-last` lists them when
/// 25:00.0 (on switch 21:00.0 with 23 and 24, NUMA node 0) is an RDMA NIC,
/// worked out by hand: the NUMA-less 01 and node 1's 83 and 84 hold no NIC
/// (first, in address order); in node 0, pci0000:40's 41 before
/// pci0000:20, where root port 20:01.0's 26 comes before the NIC's switch.
pub const TWO_SOCKET_GPUS_NIC_LAST: [&str; 7] = [
    "0000:01:00.0",
    "0000:83:00.0",
    "0000:84:00.0",
    "0000:41:00.0",
    "0000:26:00.0",
    "0000:23:00.0",
    "0000:24:00.0",
];

/// What `cmd` prints on stdout; it must exit 0, or the test fails with the
/// command line, its exit status and both outputs.
pub fn stdout_of(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?}: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `p2p-host plan --sysfs-root ROOT ARGS...`: its stdout; the run must succeed.
pub fn plan_stdout(sysfs_root: &Path, args: &[&str]) -> String {
    stdout_of(
        Command::new(binary("p2p-host"))
            .arg("plan")
            .arg("--sysfs-root")
            .arg(sysfs_root)
            .args(args),
    )
}

/// boot.sh's cliques at PHB for the six switch- and root-port GPUs of the
/// two-socket trees (the three below host bridge pci0000:20 share one, the
/// one on pci0000:40 has its own, the node-1 pair one more), by host address.
pub fn two_socket_cliques() -> Vec<(String, u8)> {
    [
        ("0000:23:00.0", 0),
        ("0000:24:00.0", 0),
        ("0000:26:00.0", 0),
        ("0000:41:00.0", 1),
        ("0000:83:00.0", 2),
        ("0000:84:00.0", 2),
    ]
    .into_iter()
    .map(|(b, c)| (b.to_string(), c))
    .collect()
}

/// The ROUTE cell of `pair` (`GPU0-GPU1`) in `p2p-host topo`'s routing table,
/// its wrapped lines joined with single spaces; panics when the table or the
/// pair is missing (a test helper).
pub fn topo_route_cell(out: &str, pair: &str) -> String {
    let lines: Vec<&str> = out.lines().collect();
    let head = lines
        .iter()
        .find(|l| l.contains("ROUTE") && l.contains("IOMMU"))
        .unwrap();
    let (from, to) = (head.find("ROUTE").unwrap(), head.find("IOMMU").unwrap());
    let cell = |l: &str| {
        l.get(from..to.min(l.len()))
            .unwrap_or("")
            .trim()
            .to_string()
    };
    let at = lines
        .iter()
        .position(|l| l.trim_start().starts_with(&format!("{pair} ")))
        .unwrap();
    let mut parts = vec![cell(lines[at])];
    for l in &lines[at + 1..] {
        if l.len() < from || !l[..from].trim().is_empty() || l.trim().is_empty() {
            break;
        }
        parts.push(cell(l));
    }
    parts.join(" ")
}

/// The first `sh` block after `heading` in the repository's `page`
/// (docs/...), as the page shows it: a walk-through a test runs verbatim.
pub fn docs_sh_block(page: &str, heading: &str) -> String {
    let text = std::fs::read_to_string(repo_root().join(page)).unwrap();
    let at = text
        .find(heading)
        .unwrap_or_else(|| panic!("{page} has the section {heading:?}"));
    let rest = &text[at..];
    let start = rest.find("```sh\n").expect("the section has an sh block") + 6;
    let len = rest[start..].find("\n```").expect("the block ends");
    rest[start..start + len + 1].to_string()
}

/// The YAML documents of a manifest, split at `---` lines (the manifests
/// quote every value YAML 1.1 would misread), comment-only documents left
/// out; panics on YAML that does not parse (a test helper).
pub fn yaml_documents(text: &str) -> Vec<serde_yaml::Value> {
    let mut docs = vec![String::new()];
    for line in text.lines() {
        if line == "---" {
            docs.push(String::new());
        } else {
            let last = docs.last_mut().unwrap();
            last.push_str(line);
            last.push('\n');
        }
    }
    docs.iter()
        .map(|d| serde_yaml::from_str::<serde_yaml::Value>(d).expect("YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

/// A TCP port free on loopback now (the OS's next ephemeral one).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("a loopback port")
        .local_addr()
        .expect("its address")
        .port()
}
