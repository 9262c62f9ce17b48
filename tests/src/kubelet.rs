//! The kubelet's side of the device plugin API v1beta1, for tests and
//! benchmarks of `p2p-host device-plugin`: a stand-in Registration service
//! speaking bytes decoded by the published table ([`crate::grpc_wire`]), not
//! the product's generated code; the tree whose NVMe functions play GPUs,
//! relinked to vfio-pci; the plugin process.
//!
//! The GPUs are the five emulated NVMe functions (1b36:0010) of the captured
//! nested-switch tree, copied and relinked to vfio-pci: 25:00.0 and 26:00.0
//! share IOMMU group 9, 27:00.0 is group 10, 28:00.0 group 11 (NUMA 0),
//! 81:00.0 group 5 on NUMA node 1 (the tree's `iommu_group` links).

use crate::process::{SpawnOwned, Spawned};
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tonic::body::BoxBody;
use tonic::codegen::{http, Body, BoxFuture, StdError};
use tonic::{Request, Response};

use crate::grpc_wire::protobuf::Decoded;
use crate::grpc_wire::raw;
use crate::grpc_wire::table::KUBELET_V1BETA1;
use crate::{binary, fixture_dir};
use p2p_host_kube::device_plugin::api::{
    ContainerPreferredAllocationRequest, DevicePluginClient, PreferredAllocationRequest,
};
use p2p_host_kube::grpc::connect_unix;

/// The kubelet's registration socket's name (the API's).
pub const KUBELET_SOCKET: &str = "kubelet.sock";

/// The resource the tests offer.
pub const RESOURCE: &str = "vp2p.io/nvme";
/// The "GPUs": the tree's five NVMe functions.
pub const GPUS: [&str; 5] = [
    "0000:25:00.0",
    "0000:26:00.0",
    "0000:27:00.0",
    "0000:28:00.0",
    "0000:81:00.0",
];
/// How long a registration may take.
pub const WAIT: Duration = Duration::from_secs(20);

/// The kubelet's Registration service, speaking bytes: the stand-in serves
/// `/v1beta1.Registration/Register` (the table's path, not the product's),
/// passes each request's bytes to the test and answers with an encoded
/// `Empty`, which has no fields: zero bytes.
#[derive(Clone)]
pub struct StandIn(mpsc::UnboundedSender<Vec<u8>>);

impl tonic::server::NamedService for StandIn {
    const NAME: &'static str = "v1beta1.Registration";
}

impl<B> tower::Service<http::Request<B>> for StandIn
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<BoxBody>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != KUBELET_V1BETA1.method("Registration", "Register").path {
            return raw::unimplemented(req.uri().path());
        }
        let tx = self.0.clone();
        raw::serve_unary(req, move |r: Request<Vec<u8>>| {
            let _ = tx.send(r.into_inner());
            async { Ok(Response::new(Vec::new())) }
        })
    }
}

/// A RegisterRequest as the stand-in decoded it, by the table's field numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    /// The request's bytes.
    pub raw: Vec<u8>,
    /// The API version.
    pub version: String,
    /// The plugin's socket name.
    pub endpoint: String,
    /// The resource.
    pub resource_name: String,
    /// (pre_start_required, get_preferred_allocation_available), if sent.
    pub options: Option<(bool, bool)>,
}

/// Decodes a RegisterRequest by the table.
pub fn registered(raw: Vec<u8>) -> Registered {
    let t = &KUBELET_V1BETA1;
    let d = Decoded::parse(&raw).expect("a RegisterRequest");
    let rr = |name| t.field("RegisterRequest", name);
    let opt = |name| t.field("DevicePluginOptions", name);
    let options = d.messages(rr("options")).pop().map(|o| {
        (
            o.varint(opt("pre_start_required")) != 0,
            o.varint(opt("get_preferred_allocation_available")) != 0,
        )
    });
    Registered {
        version: d.string(rr("version")),
        endpoint: d.string(rr("endpoint")),
        resource_name: d.string(rr("resource_name")),
        options,
        raw,
    }
}

/// A running stand-in on DIR/kubelet.sock.
pub struct Kubelet {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
    registered: mpsc::UnboundedReceiver<Vec<u8>>,
}

/// Starts a stand-in on DIR/kubelet.sock (within a tokio runtime).
pub fn start_kubelet(dir: &Path) -> Kubelet {
    let (tx, registered) = mpsc::unbounded_channel();
    let (stop, stopped) = oneshot::channel::<()>();
    let listener = tokio::net::UnixListener::bind(dir.join(KUBELET_SOCKET)).unwrap();
    let task = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(StandIn(tx))
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
    /// The next RegisterRequest, within [`WAIT`].
    pub async fn next_registration(&mut self) -> Registered {
        let raw = tokio::time::timeout(WAIT, self.registered.recv())
            .await
            .expect("the plugin registers within 20 s")
            .expect("stand-in running");
        registered(raw)
    }

    /// Stops as a kubelet does on restart and removes its socket.
    pub async fn stop(self, dir: &Path) {
        let _ = self.stop.send(());
        let _ = self.task.await;
        std::fs::remove_file(dir.join(KUBELET_SOCKET)).unwrap();
    }
}

/// A copy of the nested-switch tree with its NVMe functions bound to vfio-pci.
pub fn vfio_tree(dir: &Path) -> PathBuf {
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
pub fn rebind(tree: &Path, gpu: &str, driver: &str) {
    let dev = std::fs::canonicalize(tree.join("bus/pci/devices").join(gpu)).unwrap();
    let link = dev.join("driver");
    let old = std::fs::read_link(&link).unwrap();
    let new = old.parent().unwrap().join(driver);
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(new, &link).unwrap();
}

/// The plugin process, killed when dropped.
pub struct Plugin(pub Spawned);

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the plugin with the default policy.
pub fn start_plugin(dir: &Path, tree: &Path) -> Plugin {
    start_plugin_with(dir, tree, &[])
}

/// Starts the plugin with `policy`'s extra options.
pub fn start_plugin_with(dir: &Path, tree: &Path, policy: &[&str]) -> Plugin {
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
        .spawn_owned()
        .unwrap();
    Plugin(child)
}

/// A temporary directory with the tree, a stand-in kubelet and the plugin
/// registered (default policy), for the device plugin's tests.
pub struct Setup {
    // Dropped first: the plugin stops before its directory goes.
    _plugin: Plugin,
    /// The directory: the kubelet's device-plugins directory.
    pub dir: tempfile::TempDir,
    /// The copied tree the plugin reads.
    pub tree: PathBuf,
    /// The kubelet stand-in.
    pub kubelet: Kubelet,
    /// The plugin's first registration.
    pub first: Registered,
}

/// Copies the tree, starts the stand-in and the plugin, waits for the
/// registration.
pub async fn setup() -> Setup {
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

/// A DevicePlugin client of the plugin `reg` registered, in `dir`.
pub async fn client(dir: &Path, reg: &Registered) -> DevicePluginClient<tonic::transport::Channel> {
    let channel = connect_unix(&dir.join(&reg.endpoint)).await.unwrap();
    DevicePluginClient::new(channel)
}

/// Owned ids.
pub fn ids(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// One container's GetPreferredAllocation request.
pub fn preferred_request(
    available: &[&str],
    must: &[&str],
    size: i32,
) -> PreferredAllocationRequest {
    PreferredAllocationRequest {
        container_requests: vec![ContainerPreferredAllocationRequest {
            available_device_i_ds: ids(available),
            must_include_device_i_ds: ids(must),
            allocation_size: size,
        }],
    }
}
