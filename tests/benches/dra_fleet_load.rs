//! What a fleet of DRA drivers costs the API server while nothing changes:
//! `VP2P_FLEET_NODES` nodes (default 1,000), each a real `p2p-host dra
//! driver` process with the shipped RBAC and admission policy and a token
//! bound to a Pod on its Node (as the DaemonSet runs), all publishing the
//! same captured tree (the nested-switch QEMU capture, 3 devices in 1 slice)
//! to kube-apiserver and etcd of `kube-peers control-plane` on this machine.
//! Once every node's slice is published and a minute has passed, it samples
//! for `VP2P_FLEET_WINDOW_S` seconds (default 600): the API server's own
//! `apiserver_request_total` by resource and verb (its /metrics, read with
//! Prometheus' parser), and the CPU time and memory of the API server, etcd
//! and the drivers (/proc/<pid>/stat and status). Prints figures; asserts
//! nothing about them.
//!
//!     cargo build --release --bin p2p-host
//!     VP2P_FLEET_DRIVER=target/release/p2p-host VP2P_FLEET_LABEL=now \
//!         cargo bench -p p2p-tests --bench dra_fleet_load
//!
//! `VP2P_FLEET_DRIVER` is the driver binary to run (another commit's build
//! compares; each runs with its own defaults, as an operator gets them).
//! Drivers are started while the machine has 2 GiB available: the run
//! says how many fit.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use p2p_tests::kube::{metrics_parse, ControlPlane};
use p2p_tests::kube_node::{dra_manifests, vfio_tree, DRIVER};
use p2p_tests::process::{SpawnOwned, Spawned};
use p2p_tests::target_dir;
use serde_json::{json, Value};

const FIXTURE: &str = "qemu-11.1-nested-switch-iommu-on";
/// Memory left for the control plane when starting drivers.
const KEEP_AVAILABLE_KIB: u64 = 2 * 1024 * 1024;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// CPU time (user + system) of a process, and its resident memory: all of
/// it, and its own (anonymous: not the binary's pages, which processes of
/// one binary share).
#[derive(Debug, Clone, Copy, Default)]
struct Usage {
    cpu: Duration,
    rss_kib: u64,
    anon_kib: u64,
}

fn usage(pid: u32) -> Usage {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis, from field 3 (state):
    // utime is field 14 and stime 15 (proc(5)), in clock ticks.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        f.get(i - 3)
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // SAFETY: sysconf reads a constant of the system; no memory is passed.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let t = ticks(14) + ticks(15);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    Usage {
        cpu: Duration::from_millis(t * 1000 / hz),
        rss_kib: kib("VmRSS:"),
        anon_kib: kib("RssAnon:"),
    }
}

fn sum(pids: &[u32]) -> Usage {
    pids.iter()
        .map(|p| usage(*p))
        .fold(Usage::default(), |a, u| Usage {
            cpu: a.cpu + u.cpu,
            rss_kib: a.rss_kib + u.rss_kib,
            anon_kib: a.anon_kib + u.anon_kib,
        })
}

fn mem_available_kib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The API server's request counts by (resource, verb), from its /metrics.
fn requests(cp: &ControlPlane) -> BTreeMap<(String, String), f64> {
    let families = metrics_parse(&cp.kubectl(&["get", "--raw", "/metrics"]));
    let mut out = BTreeMap::new();
    for s in families["apiserver_request_total"]["samples"]
        .as_array()
        .expect("apiserver_request_total")
    {
        let l = &s["labels"];
        let resource = l["resource"].as_str().unwrap_or("").to_string();
        let resource = if resource.is_empty() {
            "(non-resource)".to_string()
        } else {
            resource
        };
        let verb = l["verb"].as_str().unwrap_or("").to_string();
        *out.entry((resource, verb)).or_insert(0.0) += s["value"].as_f64().unwrap_or(0.0);
    }
    out
}

fn delta(
    a: &BTreeMap<(String, String), f64>,
    b: &BTreeMap<(String, String), f64>,
) -> BTreeMap<(String, String), f64> {
    b.iter()
        .map(|(k, v)| (k.clone(), v - a.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

/// The pids of the control plane's components (its state.json).
fn component_pid(cp: &ControlPlane, name: &str) -> u32 {
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(cp.dir().join("state.json")).expect("the control plane's state"),
    )
    .expect("state.json is JSON");
    state["pids"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no pid of {name} in state.json")) as u32
}

/// Creates `items` (a List) in one call.
fn create_list(cp: &ControlPlane, items: Vec<Value>) {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    cp.create(&list.to_string())
        .unwrap_or_else(|e| panic!("kubectl create: {e}"));
}

fn published_nodes(cp: &ControlPlane) -> usize {
    let out = cp.kubectl(&[
        "get",
        "resourceslices",
        "--no-headers",
        "-o",
        "custom-columns=N:.spec.nodeName",
    ]);
    out.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

fn node_name(i: usize) -> String {
    format!("fleet-{i:04}")
}

/// Nodes, the driver's Pods on them and a Pod-bound token for each.
fn nodes_and_tokens(cp: &ControlPlane, n: usize, dir: &Path) -> Vec<PathBuf> {
    let t = Instant::now();
    create_list(
        cp,
        (0..n)
            .map(|i| {
                json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name(i),
                    "labels": {"vp2p.io/gpu-passthrough": "true", "kubernetes.io/hostname": node_name(i)}}})
            })
            .collect(),
    );
    create_list(
        cp,
        (0..n)
            .map(|i| {
                json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("vp2p-dra-driver-{}", node_name(i)), "namespace": "kube-system"},
                    "spec": {"nodeName": node_name(i), "serviceAccountName": "vp2p-dra-driver",
                             "containers": [{"name": "driver", "image": "localhost/vp2p/p2p-host:0.1.0"}]}})
            })
            .collect(),
    );
    eprintln!(
        "dra_fleet_load: {n} Nodes and driver Pods created in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let configs: Vec<PathBuf> = (0..n)
        .map(|i| dir.join(format!("{}.kubeconfig", node_name(i))))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if i >= n {
                    break;
                }
                let pod = format!("vp2p-dra-driver-{}", node_name(i));
                let token = cp.pod_token("kube-system", "vp2p-dra-driver", &pod);
                cp.token_kubeconfig(&token, &configs[i]);
                if (i + 1) % 100 == 0 {
                    eprintln!("dra_fleet_load: {} tokens", i + 1);
                }
            });
        }
    });
    eprintln!(
        "dra_fleet_load: {n} tokens in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    configs
}

fn start_driver(driver: &Path, tree: &Path, dir: &Path, node: &str, kubeconfig: &Path) -> Spawned {
    let own = dir.join(node);
    std::fs::create_dir_all(&own).expect("the node's directory");
    let log = std::fs::File::create(own.join("driver.log")).expect("a log");
    Command::new(driver)
        .args(["dra", "driver", "--node-name", node, "--gpu-class", "0108"])
        .arg("--sysfs-root")
        .arg(tree)
        .arg("--kubelet-root")
        .arg(own.join("kubelet"))
        .arg("--cdi-dir")
        .arg(own.join("cdi"))
        .arg("--metadata-dir")
        .arg(own.join("metadata"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn_owned()
        .expect("p2p-host dra driver starts")
}

fn main() {
    let n: usize = env_or("VP2P_FLEET_NODES", 1000);
    let window = Duration::from_secs(env_or("VP2P_FLEET_WINDOW_S", 600));
    let label: String = env_or("VP2P_FLEET_LABEL", "run".to_string());
    let driver = PathBuf::from(env_or(
        "VP2P_FLEET_DRIVER",
        target_dir()
            .join("release/p2p-host")
            .to_string_lossy()
            .into_owned(),
    ));
    // cargo runs a bench in its package's directory: a relative path is the
    // repository's.
    let driver = std::fs::canonicalize(p2p_tests::repo_root().join(&driver))
        .unwrap_or_else(|e| panic!("the driver {}: {e}", driver.display()));
    let runs = target_dir().join("kube-peers/runs");
    let _ = std::fs::remove_dir_all(runs.join(format!("dra-fleet-load-{label}")));
    let cp = ControlPlane::start_at(&runs.join(format!("dra-fleet-load-{label}/cp")));
    // The nodes' files (the plugin sockets among them) under a short path:
    // a socket's path must fit sockaddr_un (108 bytes).
    let dir = std::env::temp_dir().join(format!("vp2p-fleet-{label}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the nodes' directory");
    dra_manifests(&cp);
    let tree = vfio_tree(FIXTURE, &dir, &[]);
    let configs = nodes_and_tokens(&cp, n, &dir);

    let t = Instant::now();
    let mut drivers = Vec::new();
    for (i, kc) in configs.iter().enumerate() {
        if mem_available_kib() < KEEP_AVAILABLE_KIB {
            eprintln!(
                "dra_fleet_load: {} KiB available: {i} drivers started, no more fit",
                mem_available_kib()
            );
            break;
        }
        drivers.push(start_driver(&driver, &tree, &dir, &node_name(i), kc));
        std::thread::sleep(Duration::from_millis(10));
        if (i + 1) % 100 == 0 {
            eprintln!("dra_fleet_load: {} drivers started", i + 1);
        }
    }
    let started = drivers.len();
    loop {
        let p = published_nodes(&cp);
        eprintln!(
            "dra_fleet_load: {p} of {started} nodes published ({:.0} s)",
            t.elapsed().as_secs_f64()
        );
        if p >= started {
            break;
        }
        let dead = drivers
            .iter_mut()
            .map(|d| matches!(d.try_wait(), Ok(Some(_))))
            .filter(|ended| *ended)
            .count();
        assert!(dead == 0, "{dead} drivers exited; see {}", dir.display());
        assert!(
            t.elapsed() < Duration::from_secs(900),
            "not all published in 15 minutes"
        );
        std::thread::sleep(Duration::from_secs(5));
    }
    let published_in = t.elapsed();
    let ended = drivers
        .iter_mut()
        .map(|d| matches!(d.try_wait(), Ok(Some(_))))
        .filter(|ended| *ended)
        .count();
    assert!(ended == 0, "{ended} drivers exited; see {}", dir.display());
    std::thread::sleep(Duration::from_secs(60));

    let apiserver = component_pid(&cp, "apiserver");
    let etcd = component_pid(&cp, "etcd");
    let pids: Vec<u32> = drivers.iter().map(|d| d.id()).collect();
    let (r0, a0, e0, d0) = (requests(&cp), usage(apiserver), usage(etcd), sum(&pids));
    let t0 = Instant::now();
    let mut last = (r0.clone(), a0, t0);
    while t0.elapsed() < window {
        std::thread::sleep(Duration::from_secs(60).min(window.saturating_sub(t0.elapsed())));
        let (r, a, now) = (requests(&cp), usage(apiserver), Instant::now());
        let secs = (now - last.2).as_secs_f64();
        let d = delta(&last.0, &r);
        let slices: f64 = d
            .iter()
            .filter(|((res, _), _)| res == "resourceslices")
            .map(|(_, v)| v)
            .sum::<f64>()
            + 0.0;
        eprintln!(
            "dra_fleet_load: {:>4.0} s: {:.1} requests/s ({:.1} of ResourceSlices), API server {:.2} cores",
            t0.elapsed().as_secs_f64(),
            d.values().sum::<f64>() / secs,
            slices / secs,
            (a.cpu - last.1.cpu).as_secs_f64() / secs
        );
        last = (r, a, now);
    }
    let secs = t0.elapsed().as_secs_f64();
    let (r1, a1, e1, d1) = (requests(&cp), usage(apiserver), usage(etcd), sum(&pids));
    let alive = drivers
        .iter_mut()
        .map(|d| matches!(d.try_wait(), Ok(None)))
        .filter(|running| *running)
        .count();
    let d = delta(&r0, &r1);
    let total: f64 = d.values().sum();

    println!("dra_fleet_load {label}: {}", driver.display());
    println!(
        "{started} drivers ({alive} alive at the end), every node's slice published {:.0} s after the first start; window {secs:.0} s, a minute after",
        published_in.as_secs_f64()
    );
    println!(
        "API server requests: {total:.0} in all, {:.2}/s",
        total / secs
    );
    let mut rows: Vec<_> = d.iter().collect();
    rows.sort_by(|a, b| b.1.total_cmp(a.1));
    for ((res, verb), v) in rows {
        println!("  {res:<24} {verb:<8} {v:>8.0}  {:>8.3}/s", v / secs);
    }
    let cores = |a: Usage, b: Usage| (b.cpu - a.cpu).as_secs_f64() / secs;
    println!(
        "CPU, cores on average: API server {:.3}, etcd {:.3}, the {started} drivers {:.3}",
        cores(a0, a1),
        cores(e0, e1),
        cores(d0, d1)
    );
    println!(
        "memory at the end (resident): API server {} MiB, etcd {} MiB; a driver {} KiB on average, {} KiB of it its own (not the binary's shared pages), {} MiB own in all",
        a1.rss_kib / 1024,
        e1.rss_kib / 1024,
        d1.rss_kib / started.max(1) as u64,
        d1.anon_kib / started.max(1) as u64,
        d1.anon_kib / 1024
    );
    // Every driver at once, then each guard finds its child ended.
    for p in &pids {
        // SAFETY: kill(2) on a child this process started and holds.
        unsafe {
            libc::kill(*p as i32, libc::SIGTERM);
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    drop(drivers);
    eprintln!("dra_fleet_load: {DRIVER} drivers stopped");
}
