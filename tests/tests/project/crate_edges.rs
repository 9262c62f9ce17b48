//! Where the Kubernetes edge may be reached from, and that the commands that
//! need no cluster start no async runtime (issue: "the Kubernetes edge moves
//! into a crate of its own under host/ that the p2p-host binary links and
//! nothing else imports; commands that need no cluster start no runtime").
//!
//! The dependency graph is cargo's own (`cargo metadata`'s resolve); the
//! runtime is seen from outside the process: tokio's I/O driver is an epoll
//! instance (mio creates one per runtime, `epoll_create1(2)`), so a command
//! under `strace -f` that never calls epoll_create1 started no runtime. The
//! device plugin, which does start one, is the control that shows the probe
//! sees a runtime when there is one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use p2p_tests::{binary, fixture_dir, repo_root};
use serde_json::Value;

/// The crates the edge brings: an async runtime, gRPC, a Kubernetes client.
const EDGE_CRATES: &[&str] = &[
    "tokio",
    "tonic",
    "hyper",
    "kube",
    "kube-client",
    "k8s-openapi",
];

/// Cargo's resolved graph of the workspace for this machine's target:
/// package name -> (dependency name, the kinds it is a dependency of).
struct Graph {
    deps: BTreeMap<String, Vec<(String, BTreeSet<String>)>>,
}

impl Graph {
    fn load() -> Graph {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let host = rustc_host();
        let out = Command::new(cargo)
            .current_dir(repo_root())
            .args(["metadata", "--format-version", "1", "--locked"])
            .args(["--filter-platform", &host])
            .output()
            .expect("cargo metadata runs");
        assert!(
            out.status.success(),
            "cargo metadata failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
        let name_of: BTreeMap<&str, &str> = meta["packages"]
            .as_array()
            .expect("packages")
            .iter()
            .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
            .collect();
        let mut deps = BTreeMap::new();
        for node in meta["resolve"]["nodes"].as_array().expect("resolve.nodes") {
            let from = name_of[node["id"].as_str().unwrap()].to_string();
            let edges = node["deps"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| {
                    let to = name_of[d["pkg"].as_str().unwrap()].to_string();
                    // A null kind is a normal dependency.
                    let kinds = d["dep_kinds"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|k| k["kind"].as_str().unwrap_or("normal").to_string())
                        .collect();
                    (to, kinds)
                })
                .collect();
            deps.insert(from, edges);
        }
        Graph { deps }
    }

    /// Everything `root` links: its normal dependencies, transitively.
    fn linked(&self, root: &str) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![root.to_string()];
        while let Some(p) = todo.pop() {
            for (to, kinds) in self.deps.get(&p).into_iter().flatten() {
                if kinds.contains("normal") && seen.insert(to.clone()) {
                    todo.push(to.clone());
                }
            }
        }
        seen
    }

    /// The packages that depend on `name` directly, with how.
    fn dependents(&self, name: &str) -> BTreeMap<String, BTreeSet<String>> {
        self.deps
            .iter()
            .filter_map(|(from, edges)| {
                edges
                    .iter()
                    .find(|(to, _)| to == name)
                    .map(|(_, kinds)| (from.clone(), kinds.clone()))
            })
            .collect()
    }
}

fn rustc_host() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(rustc)
        .arg("-vV")
        .output()
        .expect("rustc -vV runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .to_string()
}

#[test]
fn only_the_binary_links_the_kubernetes_edge() {
    let g = Graph::load();
    for lib in [
        "p2p-host",
        "p2p-topology",
        "p2p-nccl",
        "p2p-allocation",
        "p2p-report",
        "p2p-guest",
    ] {
        let linked = g.linked(lib);
        let edge: Vec<&&str> = EDGE_CRATES
            .iter()
            .filter(|c| linked.contains(**c))
            .collect();
        assert!(
            edge.is_empty() && !linked.contains("p2p-host-kube"),
            "{lib} links the Kubernetes edge: {edge:?}{}",
            if linked.contains("p2p-host-kube") {
                " and p2p-host-kube"
            } else {
                ""
            }
        );
    }
    // The edge itself brings them (so the check above can fail), and reads
    // the host through p2p-topology's trait, not through the library.
    let kube = g.linked("p2p-host-kube");
    for c in ["tokio", "tonic", "kube", "k8s-openapi"] {
        assert!(kube.contains(c), "p2p-host-kube does not link {c}");
    }
    assert!(
        !kube.contains("p2p-host"),
        "p2p-host-kube links the p2p-host library"
    );
    // Who imports it: the binary, and the tests that test it (normal
    // dependency of the tests crate, whose harnesses call its handlers, and
    // of the fleet bench, which reads Fabric Manager's partition list with
    // the driver's own reader so that it grades what the driver publishes).
    let dependents = g.dependents("p2p-host-kube");
    let names: BTreeSet<&str> = dependents.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        BTreeSet::from(["p2p-host-cli", "p2p-tests", "p2p-fleet"]),
        "p2p-host-kube's dependents: {dependents:?}"
    );
}

/// The pure crates under shared/, from the ground up: each may link only the
/// crates listed before it here, and the front ends only the domains they
/// serve (docs/DESIGN.md "Architecture").
const DOMAIN_CRATES: &[&str] = &["p2p-topology", "p2p-nccl", "p2p-allocation", "p2p-report"];

#[test]
fn the_domain_crates_depend_only_downward() {
    let g = Graph::load();
    let vp2p = |p: &str| -> BTreeSet<String> {
        g.linked(p)
            .into_iter()
            .filter(|d| d.starts_with("p2p-"))
            .collect()
    };
    let want: &[(&str, &[&str])] = &[
        ("p2p-topology", &[]),
        ("p2p-nccl", &["p2p-topology"]),
        ("p2p-allocation", &["p2p-topology"]),
        ("p2p-report", &["p2p-topology", "p2p-allocation"]),
        // The host never reads NCCL's behaviour, only writes its file
        // (p2p_topology::nccl_topo); the Kubernetes edge publishes
        // allocations and renders nothing; the guest reaches the allocation
        // model only through the reports it renders.
        (
            "p2p-host",
            &[
                "p2p-topology",
                "p2p-allocation",
                "p2p-report",
                "p2p-host-io",
            ],
        ),
        (
            "p2p-host-kube",
            &["p2p-topology", "p2p-allocation", "p2p-host-io"],
        ),
        (
            "p2p-guest",
            &[
                "p2p-topology",
                "p2p-nccl",
                "p2p-report",
                "p2p-allocation",
                "p2p-kernels",
            ],
        ),
    ];
    for (krate, allowed) in want {
        let allowed: BTreeSet<String> = allowed.iter().map(|s| s.to_string()).collect();
        let linked = vp2p(krate);
        assert!(
            linked.is_subset(&allowed),
            "{krate} links {:?}, outside what it may: {allowed:?}",
            linked.difference(&allowed).collect::<Vec<_>>()
        );
    }
    // The check can fail: the ground is linked by every other domain crate.
    for krate in &DOMAIN_CRATES[1..] {
        assert!(
            vp2p(krate).contains("p2p-topology"),
            "{krate} lost its ground"
        );
    }
}

/// `epoll_create1` calls of one run of `p2p-host ARGS` and its threads, and
/// whether the command succeeded.
fn epoll_instances(args: &[&str], scratch: &Path) -> (usize, bool) {
    let log = scratch.join(format!("strace-{}.txt", args[0]));
    let status = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=epoll_create,epoll_create1", "-o"])
        .arg(&log)
        .arg(binary("p2p-host"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap_or_else(|e| {
            panic!("strace could not run ({e}): scripts/setup.sh installs it (Debian's strace)")
        });
    // strace exits with the command's status.
    let text = std::fs::read_to_string(&log)
        .unwrap_or_else(|e| panic!("strace wrote no log {}: {e}", log.display()));
    let count = text.lines().filter(|l| l.contains("epoll_create")).count();
    (count, status.success())
}

#[test]
fn commands_without_a_cluster_start_no_runtime() {
    let scratch = tempfile::tempdir().unwrap();
    let tree = fixture_dir("qemu-11.1-two-socket-iommu-on").join("sysfs");
    let tree = tree.to_str().unwrap();
    let common = ["--sysfs-root", tree, "--no-nvml", "--gpu-class", "0108"];
    let with = |head: &[&str], tail: &[&str]| -> Vec<String> {
        head.iter()
            .chain(common.iter())
            .chain(tail.iter())
            .map(|s| s.to_string())
            .collect()
    };
    let quiet: Vec<Vec<String>> = vec![
        with(&["topo"], &[]),
        with(&["plan"], &["--json"]),
        with(
            &["allocate"],
            &[
                "--available",
                "0000:23:00.0,0000:24:00.0,0000:83:00.0",
                "--size",
                "2",
            ],
        ),
        with(&["dra", "slices"], &["--node-name", "n1", "--json"]),
    ];
    for args in &quiet {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (epolls, ok) = epoll_instances(&args, scratch.path());
        // A command that failed at once would prove nothing.
        assert!(ok, "p2p-host {} failed", args.join(" "));
        assert_eq!(
            epolls,
            0,
            "p2p-host {} created an epoll instance (an async runtime)",
            args.join(" ")
        );
    }
    // The control: the device plugin starts its runtime, then fails to reach
    // a kubelet directory that does not exist.
    let missing = scratch.path().join("no-kubelet");
    let control = [
        "device-plugin",
        "--resource",
        "vp2p.io/gpu",
        "--sysfs-root",
        tree,
        "--kubelet-dir",
        missing.to_str().unwrap(),
    ];
    let (epolls, ok) = epoll_instances(&control, scratch.path());
    assert!(
        !ok,
        "the device plugin found a kubelet in {}",
        missing.display()
    );
    assert!(
        epolls >= 1,
        "the device plugin's runtime was not seen: the probe sees nothing"
    );
}
