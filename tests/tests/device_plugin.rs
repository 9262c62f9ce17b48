//! `p2p-host device-plugin` against a kubelet stand-in speaking the real
//! v1beta1 protocol over unix sockets in a temporary directory: registration,
//! a kubelet restart, health when a GPU leaves vfio-pci, GetPreferredAllocation
//! (the same answer as `p2p-host allocate`), Allocate, and refused requests.
//!
//! The GPUs are the five emulated NVMe functions (1b36:0010) of the captured
//! nested-switch tree, copied and relinked to vfio-pci: 25:00.0 and 26:00.0
//! share IOMMU group 9, 27:00.0 is group 10, 28:00.0 group 11 (NUMA 0),
//! 81:00.0 group 5 on NUMA node 1 (the tree's `iommu_group` links).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use p2p_host::device_plugin::api::*;
use p2p_host::device_plugin::socket_name;
use p2p_tests::{binary, fixture_dir, run};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tonic::{Code, Request, Response, Status};

const RESOURCE: &str = "vp2p.io/nvme";
const GPUS: [&str; 5] = [
    "0000:25:00.0",
    "0000:26:00.0",
    "0000:27:00.0",
    "0000:28:00.0",
    "0000:81:00.0",
];
const WAIT: Duration = Duration::from_secs(20);

/// The kubelet's Registration service: passes each request to the test.
struct StandIn(mpsc::UnboundedSender<RegisterRequest>);

#[tonic::async_trait]
impl Registration for StandIn {
    async fn register(&self, req: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let _ = self.0.send(req.into_inner());
        Ok(Response::new(Empty {}))
    }
}

/// A running stand-in on DIR/kubelet.sock.
struct Kubelet {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
    registered: mpsc::UnboundedReceiver<RegisterRequest>,
}

fn start_kubelet(dir: &Path) -> Kubelet {
    let (tx, registered) = mpsc::unbounded_channel();
    let (stop, stopped) = oneshot::channel::<()>();
    let listener = tokio::net::UnixListener::bind(dir.join(KUBELET_SOCKET)).unwrap();
    let task = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(RegistrationServer::new(StandIn(tx)))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::UnixListenerStream::new(listener),
                async {
                    let _ = stopped.await;
                },
            )
            .await
            .unwrap();
    });
    Kubelet {
        stop,
        task,
        registered,
    }
}

impl Kubelet {
    async fn next_registration(&mut self) -> RegisterRequest {
        tokio::time::timeout(WAIT, self.registered.recv())
            .await
            .expect("the plugin registers within 20 s")
            .expect("stand-in running")
    }

    /// Stops as a kubelet does on restart and removes its socket.
    async fn stop(self, dir: &Path) {
        let _ = self.stop.send(());
        let _ = self.task.await;
        std::fs::remove_file(dir.join(KUBELET_SOCKET)).unwrap();
    }
}

/// A copy of the nested-switch tree with its NVMe functions bound to vfio-pci.
fn vfio_tree(dir: &Path) -> PathBuf {
    let src = fixture_dir("qemu-11.1-nested-switch-iommu-on").join("sysfs");
    let dst = dir.join("sysfs");
    let ok = Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(&dst)
        .status()
        .unwrap();
    assert!(ok.success());
    for gpu in GPUS {
        rebind(&dst, gpu, "vfio-pci");
    }
    dst
}

/// Points GPU's `driver` link at DRIVER, as a bind or unbind would.
fn rebind(tree: &Path, gpu: &str, driver: &str) {
    let dev = std::fs::canonicalize(tree.join("bus/pci/devices").join(gpu)).unwrap();
    let link = dev.join("driver");
    let old = std::fs::read_link(&link).unwrap();
    let new = old.parent().unwrap().join(driver);
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(new, &link).unwrap();
}

/// The plugin process, killed when dropped.
struct Plugin(Child);

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_plugin(dir: &Path, tree: &Path) -> Plugin {
    start_plugin_with(dir, tree, &[])
}

fn start_plugin_with(dir: &Path, tree: &Path, policy: &[&str]) -> Plugin {
    let child = Command::new(binary("p2p-host"))
        .args([
            "device-plugin",
            "--resource",
            RESOURCE,
            "--selector",
            "1b36:0010",
        ])
        .arg("--kubelet-dir")
        .arg(dir)
        .arg("--sysfs-root")
        .arg(tree)
        .args(["--poll-ms", "100"])
        .args(policy)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    Plugin(child)
}

/// A temporary directory with the tree, a stand-in and the plugin registered.
struct Setup {
    // Dropped first: the plugin stops before its directory goes.
    _plugin: Plugin,
    dir: tempfile::TempDir,
    tree: PathBuf,
    kubelet: Kubelet,
    first: RegisterRequest,
}

async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let tree = vfio_tree(dir.path());
    let mut kubelet = start_kubelet(dir.path());
    let plugin = start_plugin(dir.path(), &tree);
    let first = kubelet.next_registration().await;
    Setup {
        _plugin: plugin,
        dir,
        tree,
        kubelet,
        first,
    }
}

async fn client(dir: &Path, reg: &RegisterRequest) -> DevicePluginClient {
    let channel = connect_unix(&dir.join(&reg.endpoint)).await.unwrap();
    DevicePluginClient::new(channel)
}

fn ids(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn preferred_request(available: &[&str], must: &[&str], size: i32) -> PreferredAllocationRequest {
    PreferredAllocationRequest {
        container_requests: vec![ContainerPreferredAllocationRequest {
            available_device_ids: ids(available),
            must_include_device_ids: ids(must),
            allocation_size: size,
        }],
    }
}

#[tokio::test]
async fn registers_with_the_resource_version_endpoint_and_options() {
    let s = setup().await;
    assert_eq!(s.first.version, "v1beta1");
    assert_eq!(s.first.resource_name, RESOURCE);
    assert_eq!(s.first.endpoint, "vp2p-vp2p_io_nvme.sock");
    assert_eq!(s.first.endpoint, socket_name(RESOURCE));
    let want = DevicePluginOptions {
        pre_start_required: false,
        get_preferred_allocation_available: true,
    };
    assert_eq!(s.first.options, Some(want.clone()));
    // The kubelet then dials the endpoint and asks for the options.
    let mut c = client(s.dir.path(), &s.first).await;
    let got = c.get_device_plugin_options().await.unwrap().into_inner();
    assert_eq!(got, want);
}

#[tokio::test]
async fn registers_again_when_the_kubelet_restarts() {
    let s = setup().await;
    let dir = s.dir.path().to_path_buf();
    s.kubelet.stop(&dir).await;
    let mut again = start_kubelet(&dir);
    let second = again.next_registration().await;
    assert_eq!(second, s.first);
    // The new server answers on the endpoint.
    let mut c = client(&dir, &second).await;
    let mut stream = c.list_and_watch().await.unwrap().into_inner();
    let list = stream.message().await.unwrap().unwrap();
    assert_eq!(list.devices.len(), 5);
}

#[tokio::test]
async fn registers_again_when_the_kubelet_removes_the_plugin_socket() {
    // A restarting kubelet removes the plugins' sockets from its directory.
    let mut s = setup().await;
    std::fs::remove_file(s.dir.path().join(&s.first.endpoint)).unwrap();
    let second = s.kubelet.next_registration().await;
    assert_eq!(second, s.first);
    let mut c = client(s.dir.path(), &second).await;
    let got = c.get_device_plugin_options().await.unwrap().into_inner();
    assert_eq!(Some(got), s.first.options);
}

#[tokio::test]
async fn list_and_watch_marks_an_unbound_gpu_unhealthy() {
    let s = setup().await;
    let mut c = client(s.dir.path(), &s.first).await;
    let mut stream = c.list_and_watch().await.unwrap().into_inner();
    let first = stream.message().await.unwrap().unwrap();
    let got: Vec<(String, String, Option<TopologyInfo>)> = first
        .devices
        .into_iter()
        .map(|d| (d.id, d.health, d.topology))
        .collect();
    let numa = |n| {
        Some(TopologyInfo {
            nodes: vec![NumaNode { id: n }],
        })
    };
    let want: Vec<(String, String, Option<TopologyInfo>)> = GPUS
        .iter()
        .map(|g| {
            let node = if *g == "0000:81:00.0" { 1 } else { 0 };
            (g.to_string(), "Healthy".to_string(), numa(node))
        })
        .collect();
    assert_eq!(got, want);

    // 27:00.0 goes back to the nvme driver: the stream sends the new list.
    rebind(&s.tree, "0000:27:00.0", "nvme");
    let next = tokio::time::timeout(WAIT, stream.message())
        .await
        .expect("a new list within 20 s")
        .unwrap()
        .unwrap();
    let health: Vec<(&str, &str)> = next
        .devices
        .iter()
        .map(|d| (d.id.as_str(), d.health.as_str()))
        .collect();
    assert_eq!(
        health,
        [
            ("0000:25:00.0", "Healthy"),
            ("0000:26:00.0", "Healthy"),
            ("0000:27:00.0", "Unhealthy"),
            ("0000:28:00.0", "Healthy"),
            ("0000:81:00.0", "Healthy"),
        ]
    );
    // Allocating it now is refused.
    let err = c
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: ids(&["0000:27:00.0"]),
            }],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert_eq!(err.message(), "0000:27:00.0 is bound to nvme, not vfio-pci");
}

/// `p2p-host allocate`'s first line for the same question.
fn allocate_cli(tree: &Path, available: &[&str], must: &[&str], size: i32) -> Vec<String> {
    let tree = tree.to_str().unwrap();
    let avail = available.join(",");
    let size = size.to_string();
    let mut args = vec![
        "allocate",
        "--sysfs-root",
        tree,
        "--gpu-class",
        "0108",
        "--available",
        &avail,
        "--size",
        &size,
    ];
    let must = must.join(",");
    if !must.is_empty() {
        args.extend(["--must-include", &must]);
    }
    let r = run("p2p-host", &args);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let first = r.stdout.lines().next().unwrap();
    first.split(',').map(str::to_string).collect()
}

#[tokio::test]
async fn preferred_allocation_is_allocates_answer() {
    let s = setup().await;
    let mut c = client(s.dir.path(), &s.first).await;
    let cases: [(&[&str], &[&str], i32); 5] = [
        (&GPUS, &[], 1),
        (&GPUS, &[], 2),
        (&GPUS, &[], 4),
        (&GPUS, &["0000:81:00.0"], 2),
        (&["0000:27:00.0", "0000:28:00.0", "0000:81:00.0"], &[], 2),
    ];
    for (available, must, size) in cases {
        let got = c
            .get_preferred_allocation(preferred_request(available, must, size))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(got.container_responses.len(), 1);
        let want = allocate_cli(&s.tree, available, must, size);
        assert_eq!(
            got.container_responses[0].device_ids, want,
            "{available:?} {must:?} {size}"
        );
    }
    // By hand (docs/choosing.md): one GPU of five is 81:00.0, leaving the
    // other four one block.
    let one = c
        .get_preferred_allocation(preferred_request(&GPUS, &[], 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(one.container_responses[0].device_ids, ["0000:81:00.0"]);
}

#[tokio::test]
async fn allocate_gives_the_vfio_devices_and_kubevirts_variable() {
    let s = setup().await;
    let mut c = client(s.dir.path(), &s.first).await;
    let got = c
        .allocate(AllocateRequest {
            container_requests: vec![
                ContainerAllocateRequest {
                    devices_ids: ids(&["0000:25:00.0", "0000:26:00.0", "0000:28:00.0"]),
                },
                ContainerAllocateRequest {
                    devices_ids: ids(&["0000:81:00.0"]),
                },
            ],
        })
        .await
        .unwrap()
        .into_inner();
    let spec = |p: &str| DeviceSpec {
        container_path: p.to_string(),
        host_path: p.to_string(),
        permissions: "mrw".to_string(),
    };
    assert_eq!(got.container_responses.len(), 2);
    let a = &got.container_responses[0];
    assert_eq!(
        a.devices,
        [
            spec("/dev/vfio/vfio"),
            spec("/dev/vfio/9"),
            spec("/dev/vfio/11")
        ]
    );
    assert_eq!(a.envs.len(), 1);
    assert_eq!(
        a.envs["PCI_RESOURCE_VP2P_IO_NVME"],
        "0000:25:00.0,0000:26:00.0,0000:28:00.0"
    );
    let b = &got.container_responses[1];
    assert_eq!(b.devices, [spec("/dev/vfio/vfio"), spec("/dev/vfio/5")]);
    assert_eq!(b.envs["PCI_RESOURCE_VP2P_IO_NVME"], "0000:81:00.0");
    assert!(a.mounts.is_empty() && a.cdi_devices.is_empty());
}

#[tokio::test]
async fn bad_requests_get_errors_and_the_plugin_keeps_serving() {
    let s = setup().await;
    let mut c = client(s.dir.path(), &s.first).await;
    let refused = [
        (
            preferred_request(&["0000:25:00.0", "0000:99:00.0"], &[], 1),
            "unknown device id \"0000:99:00.0\": not a GPU of resource vp2p.io/nvme",
        ),
        (
            preferred_request(&["0000:27:00.0", "not-a-bdf"], &[], 1),
            "unknown device id \"not-a-bdf\": not a GPU of resource vp2p.io/nvme",
        ),
        (
            preferred_request(&GPUS, &[], -1),
            "allocation size -1 is negative",
        ),
    ];
    for (req, message) in refused {
        let err = c.get_preferred_allocation(req).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert_eq!(err.message(), message);
    }
    // The chooser's own refusals, in its words.
    let too_many = c
        .get_preferred_allocation(preferred_request(&["0000:27:00.0", "0000:28:00.0"], &[], 3))
        .await
        .unwrap_err();
    assert_eq!(too_many.code(), Code::InvalidArgument);
    assert_eq!(too_many.message(), "3 GPUs asked for, 2 available");
    let must = c
        .get_preferred_allocation(preferred_request(
            &["0000:27:00.0", "0000:28:00.0"],
            &["0000:81:00.0"],
            2,
        ))
        .await
        .unwrap_err();
    assert_eq!(must.code(), Code::InvalidArgument);
    assert_eq!(
        must.message(),
        "0000:81:00.0 must be included but is not available"
    );
    let alloc = c
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: ids(&["0000:00:01.0"]),
            }],
        })
        .await
        .unwrap_err();
    assert_eq!(alloc.code(), Code::InvalidArgument);
    assert_eq!(
        alloc.message(),
        "unknown device id \"0000:00:01.0\": not a GPU of resource vp2p.io/nvme"
    );
    // Still serving.
    let ok = c
        .get_preferred_allocation(preferred_request(&GPUS, &[], 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ok.container_responses[0].device_ids, ["0000:81:00.0"]);
}

/// The chooser's policy options reach GetPreferredAllocation: under
/// `--max-level pix --strict`, on the nested-switch tree (25 and 26 PIX under
/// the inner switch, 27 PXB to them, 28 PHB, 81 SYS: `p2p-host topo`), four
/// GPUs are no clique, so the plugin refuses as `allocate --max-level pix
/// --strict` does, and two are the one PIX pair.
#[tokio::test]
async fn policy_options_reach_preferred_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let tree = vfio_tree(dir.path());
    let mut kubelet = start_kubelet(dir.path());
    let _plugin = start_plugin_with(dir.path(), &tree, &["--max-level", "pix", "--strict"]);
    let reg = kubelet.next_registration().await;
    let mut c = client(dir.path(), &reg).await;
    let err = c
        .get_preferred_allocation(preferred_request(&GPUS, &[], 4))
        .await
        .unwrap_err();
    let t = tree.to_str().unwrap();
    let avail = GPUS.join(",");
    let cli = run(
        "p2p-host",
        &[
            "allocate",
            "--sysfs-root",
            t,
            "--gpu-class",
            "0108",
            "--available",
            &avail,
            "--size",
            "4",
            "--max-level",
            "pix",
            "--strict",
        ],
    );
    assert_eq!(cli.code, Some(3), "{}", cli.stdout);
    assert!(
        cli.stderr.contains(err.message()),
        "plugin: {} / allocate: {}",
        err.message(),
        cli.stderr
    );
    let two = c
        .get_preferred_allocation(preferred_request(&GPUS, &[], 2))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        two.container_responses[0].device_ids,
        ["0000:25:00.0", "0000:26:00.0"]
    );
}
