//! The real Kubernetes as a test peer: `kube-peers` (the Go module in
//! tests/kube, built from k8s.io/kubernetes v1.37 by scripts/setup.sh) runs
//! etcd, kube-apiserver, kube-controller-manager and kube-scheduler on
//! loopback, and kubectl and the kubelet's plugin clients on demand. No
//! kubelet with a container runtime runs: nodes are API objects.

use crate::process::{SpawnOwned, Spawned};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::go_peer::GoPeer;
use crate::{repo_root, target_dir};

/// The `kube-peers` binary, built from tests/kube when it is missing or
/// older than a file of that module (scripts/setup.sh builds it first, so
/// this only rebuilds after the Go code changed); `VP2P_KUBE_PEERS` names
/// another build to use as it is.
pub fn kube_peers() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            GoPeer {
                dir: "kube-peers",
                bins: &["kube-peers", "helm"],
                module: "tests/kube",
                script: "scripts/build-kube-peers.sh",
                env: "VP2P_KUBE_PEERS",
            }
            .binary()
        })
        .clone()
}

/// Helm's own CLI (helm.sh/helm/v3 at tests/kube/go.mod's version), built
/// with kube-peers by scripts/build-kube-peers.sh.
pub fn helm() -> PathBuf {
    kube_peers()
        .parent()
        .expect("kube-peers' directory")
        .join("helm")
}

/// Helm's CLI with its cache, config and data under `home` (none of the
/// user's own).
pub fn helm_command(home: &Path) -> Command {
    let mut cmd = Command::new(helm());
    cmd.env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"));
    cmd
}

/// A control plane of `kube-peers control-plane DIR`, stopped when dropped
/// (and, through `--watch-pid`, when the test process ends).
pub struct ControlPlane {
    child: Option<Spawned>,
    dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl ControlPlane {
    /// A control plane of its own in a fresh directory.
    pub fn start() -> Self {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let dir = tmp.path().join("k");
        let mut cp = Self::start_at(&dir);
        cp._tmp = Some(tmp);
        cp
    }

    /// One control plane for every test of this test binary that names the
    /// same `key` (a test module passes `module_path!()`), in
    /// `target/kube-peers/runs/<binary>-<key>` (made anew at each start):
    /// the modules of one binary keep the clusters they had as binaries of
    /// their own, and their tests keep apart by names (nodes, namespaces) of
    /// their own.
    pub fn shared(key: &str) -> &'static Self {
        type Slot = &'static OnceLock<ControlPlane>;
        static SLOTS: Mutex<BTreeMap<String, Slot>> = Mutex::new(BTreeMap::new());
        // The map is held only to find the key's slot: clusters of other
        // keys start at the same time.
        let slot: Slot = *SLOTS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.to_string())
            .or_insert_with(|| Box::leak(Box::new(OnceLock::new())));
        slot.get_or_init(|| {
            let exe = std::env::current_exe().expect("the test binary's path");
            let name = exe
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "tests".into());
            let dir = target_dir()
                .join("kube-peers/runs")
                .join(format!("{name}-{}", key.replace("::", "-")));
            let _ = std::fs::remove_dir_all(&dir);
            Self::start_at(&dir)
        })
    }

    /// A control plane in `dir` (made anew) that booted nodes join: it
    /// advertises QEMU's user-network address of the host's loopback and
    /// runs the controllers a node's pods need (tests/kube's `NodeNetwork`).
    pub fn start_for_nodes(dir: &Path) -> Self {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).expect("the control plane's directory");
        std::fs::write(dir.join("node-network"), "10.0.2.2\n").expect("writing node-network");
        Self::start_at(dir)
    }

    /// A control plane in `dir` (made if missing), for a run that keeps its logs.
    pub fn start_at(dir: &Path) -> Self {
        std::fs::create_dir_all(dir).expect("the control plane's directory");
        let log = std::fs::File::create(dir.join("supervisor.log")).expect("a log file");
        let started = Instant::now();
        let child = Command::new(kube_peers())
            .arg("control-plane")
            .arg(dir)
            .arg("--watch-pid")
            .arg(std::process::id().to_string())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn_owned()
            .expect("kube-peers control-plane starts");
        let mut cp = Self {
            child: Some(child),
            dir: dir.to_path_buf(),
            _tmp: None,
        };
        let ready = dir.join("ready");
        while !ready.exists() {
            if let Some(status) = cp.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!(
                    "the control plane stopped while starting ({status}):\n{}",
                    cp.log_tail("supervisor.log")
                );
            }
            assert!(
                started.elapsed() < Duration::from_secs(600),
                "the control plane was not ready within 10 minutes:\n{}",
                cp.log_tail("supervisor.log")
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        eprintln!(
            "kube-peers: control plane ready in {:.1} s ({})",
            started.elapsed().as_secs_f64(),
            dir.display()
        );
        cp
    }

    /// The last lines of `DIR/<file>` (or `DIR/logs/<file>`), for a failure message.
    pub fn log_tail(&self, file: &str) -> String {
        let p = [self.dir.join(file), self.dir.join("logs").join(file)]
            .into_iter()
            .find(|p| p.exists());
        let text = p
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// The control plane's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The admin kubeconfig (system:masters).
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    /// Runs the real kubectl as admin; Ok(stdout) or Err(stderr).
    pub fn try_kubectl(&self, args: &[&str]) -> Result<String, String> {
        self.try_kubectl_as(&self.kubeconfig(), args, None)
    }

    /// Runs the real kubectl with `kubeconfig`, `stdin` piped in.
    pub fn try_kubectl_as(
        &self,
        kubeconfig: &Path,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<String, String> {
        use std::io::Write;
        let mut child = Command::new(kube_peers())
            .arg("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn_owned()
            .expect("kubectl runs");
        if let Some(s) = stdin {
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(s.as_bytes())
                .expect("writing kubectl's stdin");
        }
        let out = child.wait_with_output().expect("kubectl ends");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if out.status.success() {
            Ok(stdout)
        } else {
            Err(format!("{stderr}{stdout}"))
        }
    }

    /// Runs kubectl as admin and returns stdout; panics with kubectl's
    /// error when it fails.
    pub fn kubectl(&self, args: &[&str]) -> String {
        self.try_kubectl(args)
            .unwrap_or_else(|e| panic!("kubectl {}: {e}", args.join(" ")))
    }

    /// `kubectl ... -o json`, parsed.
    pub fn get_json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        serde_json::from_str(&self.kubectl(&a)).expect("kubectl printed JSON")
    }

    /// `kubectl apply -f -` of `yaml` as admin (server-side validation).
    pub fn apply(&self, yaml: &str) -> Result<String, String> {
        self.try_kubectl_as(&self.kubeconfig(), &["apply", "-f", "-"], Some(yaml))
    }

    /// `kubectl create -f -` of `yaml` as admin.
    pub fn create(&self, yaml: &str) -> Result<String, String> {
        self.try_kubectl_as(&self.kubeconfig(), &["create", "-f", "-"], Some(yaml))
    }

    /// A Node object `name` with `labels`, Ready, with room for pods (what a
    /// kubelet would report; none runs here).
    pub fn add_node(&self, name: &str, labels: &[(&str, &str)]) {
        let labels: serde_json::Map<String, Value> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), Value::from(*v)))
            .collect();
        let node = serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels},
        });
        self.create(&node.to_string())
            .unwrap_or_else(|e| panic!("creating node {name}: {e}"));
        let status = serde_json::json!({"status": {
            "capacity": {"cpu": "128", "memory": "1Ti", "pods": "250"},
            "allocatable": {"cpu": "128", "memory": "1Ti", "pods": "250"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "a Node object of the test (no kubelet runs)"}],
        }});
        self.kubectl(&[
            "patch",
            "node",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ]);
        // Admission taints a new node not-ready until the node lifecycle
        // controller sees its kubelet; neither runs here.
        self.kubectl(&[
            "taint",
            "node",
            name,
            "node.kubernetes.io/not-ready:NoSchedule-",
        ]);
    }

    /// A token the API server issues (TokenRequest) for ServiceAccount
    /// `namespace/name`, bound to Node `node` when given.
    pub fn token(&self, namespace: &str, name: &str, node: Option<&str>) -> String {
        let mut args = vec!["create", "token", name, "-n", namespace, "--duration", "2h"];
        if let Some(n) = node {
            args.extend(["--bound-object-kind", "Node", "--bound-object-name", n]);
        }
        self.kubectl(&args).trim().to_string()
    }

    /// A token the API server issues for ServiceAccount `namespace/name`,
    /// bound to Pod `pod` of that namespace, as the kubelet gives a pod's
    /// projected token (it carries the pod's node to admission).
    pub fn pod_token(&self, namespace: &str, name: &str, pod: &str) -> String {
        self.kubectl(&[
            "create",
            "token",
            name,
            "-n",
            namespace,
            "--duration",
            "3h",
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            pod,
        ])
        .trim()
        .to_string()
    }

    /// Writes a kubeconfig for this API server that authenticates with `token`.
    pub fn token_kubeconfig(&self, token: &str, path: &Path) {
        let admin: serde_yaml::Value = serde_yaml::from_str(
            &std::fs::read_to_string(self.kubeconfig()).expect("the admin kubeconfig"),
        )
        .expect("the admin kubeconfig is YAML");
        let cluster = admin["clusters"][0]["cluster"].clone();
        let kc = serde_json::json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "vp2p", "cluster": serde_json::to_value(cluster).unwrap()}],
            "users": [{"name": "token", "user": {"token": token}}],
            "contexts": [{"name": "vp2p", "context": {"cluster": "vp2p", "user": "token"}}],
            "current-context": "vp2p",
        });
        std::fs::write(path, kc.to_string()).expect("writing a kubeconfig");
    }

    /// Writes a kubeconfig as `system:node:<node>` (a client certificate
    /// from the control plane's CA), as the node's kubelet authenticates.
    pub fn node_kubeconfig(&self, node: &str, path: &Path) {
        let out = Command::new(kube_peers())
            .arg("node-kubeconfig")
            .arg(&self.dir)
            .arg(node)
            .arg(path)
            .output()
            .expect("kube-peers runs");
        assert!(
            out.status.success(),
            "node-kubeconfig: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Stops `component` (etcd and the rest stay up) until
    /// [`Self::start_component`]: gracefully (SIGTERM; the API server then
    /// waits up to 60 s for its watches), or as a crash (SIGKILL) with `kill`.
    pub fn stop_component(&self, component: &str, kill: bool) {
        self.component("stop-component", component, kill);
    }

    /// Starts `component` again and waits until it is healthy.
    pub fn start_component(&self, component: &str) {
        self.component("start-component", component, false);
    }

    fn component(&self, verb: &str, component: &str, kill: bool) {
        let out = Command::new(kube_peers())
            .arg(verb)
            .arg(&self.dir)
            .arg(component)
            .args(kill.then_some("--kill"))
            .output()
            .expect("kube-peers runs");
        assert!(
            out.status.success(),
            "{verb} {component}: {}\nsupervisor.log:\n{}\n{component}.log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log_tail("supervisor.log"),
            self.log_tail(&format!("{component}.log"))
        );
    }

    /// Waits until `f` returns Some, polling every 100 ms, at most `limit`.
    pub fn wait_for<T>(&self, what: &str, limit: Duration, f: impl FnMut() -> Option<T>) -> T {
        poll_every(what, limit, Duration::from_millis(100), f, || {
            format!("scheduler log:\n{}", self.log_tail("scheduler.log"))
        })
    }
}

/// Polls `f` every `every` until it returns Some, at most `limit`; panics
/// with `what` and `context()` after.
pub fn poll_every<T>(
    what: &str,
    limit: Duration,
    every: Duration,
    mut f: impl FnMut() -> Option<T>,
    context: impl Fn() -> String,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "{what} within {limit:?}:\n{}",
            context()
        );
        std::thread::sleep(every);
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on the pid of a child this process started and has not reaped.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let start = Instant::now();
            while c.try_wait().ok().flatten().is_none() && start.elapsed() < Duration::from_secs(60)
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The `yaml` blocks of docs/kubevirt.md's DRA section (`## DRA` to the next
/// `## `), as the page shows them.
pub fn docs_dra_yaml_blocks() -> Vec<String> {
    let page =
        std::fs::read_to_string(repo_root().join("docs/kubevirt.md")).expect("docs/kubevirt.md");
    let start = page
        .find("\n## DRA")
        .expect("docs/kubevirt.md has a DRA section");
    let section = &page[start + 1..];
    let section = match section[3..].find("\n## ") {
        Some(end) => &section[..end + 3],
        None => section,
    };
    section
        .split("```yaml\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .map(str::to_string)
        .collect()
}

/// A Prometheus text scrape read by Prometheus' own parser (`kube-peers
/// metrics-parse`, expfmt's TextParser): the families by name, each with
/// its type, help and samples (labels, value or a histogram's count, sum and
/// buckets). A scrape the parser refuses fails the test, with the scrape.
pub fn metrics_parse(scrape: &str) -> Value {
    use std::io::Write;
    let mut parse = Command::new(kube_peers())
        .arg("metrics-parse")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kube-peers runs");
    parse
        .stdin
        .take()
        .expect("stdin")
        .write_all(scrape.as_bytes())
        .expect("the scrape written");
    let out = parse.wait_with_output().expect("kube-peers metrics-parse");
    assert!(
        out.status.success(),
        "Prometheus' parser refused the scrape: {}\n{scrape}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("metrics-parse prints JSON")
}
