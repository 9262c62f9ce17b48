//! `p2p-host dra driver`: the vp2p DRA driver's kubelet plugin. It registers
//! with the kubelet's plugin watcher (a Registration service on a socket in
//! `plugins_registry/`), serves DRAPlugin v1 and v1beta1 on `dra.sock` in its
//! own directory under `plugins/`, and prepares claims of its devices: the
//! IOMMU groups whole on vfio-pci, a CDI spec and the KEP-5304 device
//! metadata written atomically, a checkpoint so a restart neither loses nor
//! doubles a preparation.
//!
//! With the API server ([`serve_cluster`]) it also publishes the node's
//! ResourceSlices, owned by its Node, and publishes them again with a new
//! pool generation when the devices change (checked on a timer and at once on
//! a kernel uevent) or when the API server no longer holds them as published
//! (watched); it reads the claims there. Stopping leaves the slices: an
//! upgrade or a restart does not withdraw the node's devices, and the next
//! start adopts them. The kubelet deletes them when the driver stays
//! unregistered (30 s in 1.37), the garbage collector with the Node, and
//! [`remove_slices`] on request.
//!
//! [`prepare`] is the node side without gRPC ([`allocation`] a claim's
//! devices resolved, [`claim_files`] what it writes, [`leases`] and
//! [`deadline`] who works on what and until when, [`checkpoint`] what it
//! recorded), [`server`] the services, [`claims`] where claims are read,
//! [`api_server`] the API side, [`publisher`] the slices kept published,
//! [`vfio`] binding, [`cdi`] the spec, [`uevents`] the kernel's device
//! events.

pub mod allocation;
pub mod api_server;
pub mod cdi;
pub mod checkpoint;
pub mod claim_files;
pub mod claims;
pub mod deadline;
pub mod leases;
pub mod prepare;
pub mod publisher;
pub mod server;
pub mod uevents;
pub mod vfio;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use p2p_allocation::chooser::FmPartition;
use p2p_topology::{GpuSelector, Topology, TopologyReader};
use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;

pub use claims::{ClaimDir, ClaimRef, ClaimSource};
pub use prepare::{ClaimError, Driver};

/// What the driver was asked for.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The node's name: the pool's name.
    pub node_name: String,
    /// The driver's name.
    pub driver_name: String,
    /// The sysfs tree functions are read from and bound in.
    pub sysfs_root: PathBuf,
    /// How the tree is read (p2p-host's scan and NVLink discovery).
    pub reader: Arc<dyn TopologyReader>,
    /// Which functions are GPUs.
    pub selector: GpuSelector,
    /// Fabric Manager's partitions (an `fmPartition<N>` attribute per size).
    pub partitions: Option<Vec<FmPartition>>,
    /// Bind group endpoints to vfio-pci at prepare (otherwise refuse).
    pub bind: bool,
    /// Give containers `/dev/iommu` and the VFIO cdev instead of the group.
    pub iommufd: bool,
    /// Where CDI specs are written.
    pub cdi_dir: PathBuf,
    /// Where device metadata files are written on the host.
    pub metadata_dir: PathBuf,
    /// The checkpoint file.
    pub checkpoint: PathBuf,
    /// How long a bind may take to show.
    pub bind_timeout: Duration,
    /// How long one API server request may take (a claim's read at prepare
    /// takes less when the kubelet's deadline is nearer).
    pub api_timeout: Duration,
    /// The registration socket (in the kubelet's plugins_registry).
    pub registration_socket: PathBuf,
    /// The DRA socket.
    pub dra_socket: PathBuf,
    /// Where messages go (the library prints nothing itself).
    pub log: fn(&str),
}

impl Settings {
    /// The defaults for a kubelet whose root directory is `kubelet_root`
    /// (`/var/lib/kubelet`): the registration socket
    /// `plugins_registry/<driver>-reg.sock`, the DRA socket and the checkpoint
    /// in `plugins/<driver>/`, CDI specs in `/var/run/cdi`, metadata in
    /// `/var/run/vp2p/dra-metadata`; `/sys` read by `reader`, NVIDIA GPUs, no
    /// partitions.
    pub fn new(
        node_name: &str,
        driver_name: &str,
        kubelet_root: &Path,
        reader: Arc<dyn TopologyReader>,
    ) -> Self {
        let dir = kubelet_root.join("plugins").join(driver_name);
        Self {
            node_name: node_name.to_string(),
            driver_name: driver_name.to_string(),
            sysfs_root: PathBuf::from("/sys"),
            reader,
            selector: GpuSelector::Nvidia,
            partitions: None,
            bind: false,
            iommufd: false,
            cdi_dir: PathBuf::from("/var/run/cdi"),
            metadata_dir: PathBuf::from("/var/run/vp2p/dra-metadata"),
            checkpoint: dir.join("checkpoint.json"),
            bind_timeout: Duration::from_secs(10),
            api_timeout: Duration::from_secs(10),
            registration_socket: kubelet_root
                .join("plugins_registry")
                .join(format!("{driver_name}-reg.sock")),
            dra_socket: dir.join("dra.sock"),
            log: |m| eprintln!("p2p-host: {m}"),
        }
    }
}

/// Why the driver stopped.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The checkpoint or the sysfs root could not be read.
    #[error("{0}")]
    Setup(String),
    /// A socket could not be made.
    #[error("listening on {}: {source}", path.display())]
    Listen {
        /// The socket path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The runtime or a signal handler could not be set up.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A server failed.
    #[error("serving: {0}")]
    Serve(#[from] tonic::transport::Error),
}

fn listen(path: &Path) -> Result<UnixListener, DriverError> {
    let err = |source| DriverError::Listen {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    // A socket left by a run that died would make bind fail.
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    UnixListener::bind(path).map_err(err)
}

/// Serves the DRA socket, then the registration socket (so the kubelet,
/// told of the plugin, finds its API up), until `shutdown` resolves; the
/// sockets are removed on the way out.
pub async fn serve(
    settings: Settings,
    claims: Box<dyn ClaimSource>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), DriverError> {
    use crate::grpc::kubelet_pluginregistration_v1 as reg;
    use crate::grpc::uds_authority;
    use crate::grpc::{kubelet_dra_v1 as v1, kubelet_dra_v1beta1 as v1beta1};
    let driver = Arc::new(Driver::new(settings.clone(), claims).map_err(DriverError::Setup)?);
    let recorded = driver.recorded();
    if !recorded.claims.is_empty() {
        (settings.log)(&format!(
            "checkpoint {}: {} claim(s) recorded",
            settings.checkpoint.display(),
            recorded.claims.len()
        ));
    }
    let dra = listen(&settings.dra_socket)?;
    let registration = listen(&settings.registration_socket)?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let service = server::DraService { driver };
    let dra_server = tonic::transport::Server::builder()
        .add_service(v1::dra_plugin_server::DraPluginServer::new(service.clone()))
        .add_service(v1beta1::dra_plugin_server::DraPluginServer::new(service))
        .serve_with_incoming_shutdown(UnixListenerStream::new(dra), stopped(stop_rx.clone()));
    let info = reg::PluginInfo {
        r#type: server::PLUGIN_TYPE.to_string(),
        name: settings.driver_name.clone(),
        endpoint: settings.dra_socket.display().to_string(),
        supported_versions: server::SUPPORTED_VERSIONS.map(String::from).to_vec(),
    };
    let reg_server = tonic::transport::Server::builder()
        .add_service(reg::registration_server::RegistrationServer::new(
            server::Registration {
                info,
                log: settings.log,
            },
        ))
        // The kubelet's plugin watcher dials this socket by its path, and
        // its `:authority` (the path percent-encoded) passes h2 only through
        // the shim.
        .serve_with_incoming_shutdown(
            uds_authority::incoming(
                registration,
                settings.registration_socket.clone(),
                settings.log,
            ),
            stopped(stop_rx),
        );
    (settings.log)(&format!(
        "{} on node {}: DRA socket {}, registration socket {}",
        settings.driver_name,
        settings.node_name,
        settings.dra_socket.display(),
        settings.registration_socket.display()
    ));
    let mut dra_task = tokio::spawn(dra_server);
    let mut reg_task = tokio::spawn(reg_server);
    let early = tokio::select! {
        _ = shutdown => None,
        r = &mut dra_task => Some(r),
        r = &mut reg_task => Some(r),
    };
    let _ = stop_tx.send(true);
    // The kubelet keeps its connections open: the servers get a grace
    // period to finish the calls in flight, then are dropped, so that a
    // SIGTERM is followed by the slices' removal before the pod's own grace
    // period ends.
    let result = match early {
        Some(r) => r,
        None => {
            let both = async {
                let a = (&mut dra_task).await;
                let b = (&mut reg_task).await;
                a.and(b)
            };
            match tokio::time::timeout(SHUTDOWN_GRACE, both).await {
                Ok(r) => r,
                Err(_) => {
                    dra_task.abort();
                    reg_task.abort();
                    (settings.log)(&format!(
                        "connections still open {SHUTDOWN_GRACE:?} after the stop: closed"
                    ));
                    Ok(Ok(()))
                }
            }
        }
    };
    for p in [&settings.registration_socket, &settings.dra_socket] {
        let _ = std::fs::remove_file(p);
    }
    match result {
        Ok(r) => r.map_err(DriverError::from),
        Err(e) => Err(DriverError::Io(std::io::Error::other(e))),
    }
}

/// How long calls in flight may take once the driver is told to stop.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// The node's tree as read now, and its slices at pool generation
/// `generation` (the devices `dra slices` prints with the same options).
pub fn build(
    settings: &Settings,
    generation: i64,
) -> Result<(Topology, p2p_allocation::dra::Publication), String> {
    let topo = settings
        .reader
        .read(&settings.sysfs_root)
        .map_err(|e| format!("reading {}: {e}", settings.sysfs_root.display()))?;
    let mut opts = p2p_allocation::dra::SliceOptions::new(
        &settings.node_name,
        &settings.driver_name,
        &settings.selector,
    );
    opts.bind = settings.bind;
    opts.generation = generation;
    opts.partitions = settings.partitions.as_deref();
    let publication = p2p_allocation::dra::build_slices(&topo, &opts).map_err(|e| e.to_string())?;
    Ok((topo, publication))
}

/// [`serve`] with the API server: claims read there, the slices published
/// (every `resync`, when they change, when the API server's copy differs)
/// and left published when `shutdown` resolves.
pub async fn serve_cluster(
    settings: Settings,
    api: api_server::ApiServer,
    resync: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), DriverError> {
    let claims = api_server::ApiClaims {
        api: api.clone(),
        runtime: tokio::runtime::Handle::current(),
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let wake = Arc::new(tokio::sync::Notify::new());
    let uevents_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let notify = wake.clone();
    match uevents::watch(Duration::from_secs(1), uevents_stop.clone(), move || {
        notify.notify_one()
    }) {
        Ok(_) => (settings.log)(
            "watching kernel uevents: a PCI bind, unbind, add or remove is published at once",
        ),
        Err(e) => (settings.log)(&format!(
            "kernel uevents not available ({e}): device changes are checked every {resync:?} only"
        )),
    }
    let api_changed = Arc::new(tokio::sync::Notify::new());
    let notify = api_changed.clone();
    let watcher = {
        let (api, s, stop) = (api.clone(), settings.clone(), stop_rx.clone());
        tokio::spawn(async move {
            api.watch_slices(
                &s.node_name,
                &s.driver_name,
                move || notify.notify_one(),
                stop,
                s.log,
            )
            .await
        })
    };
    let publisher = tokio::spawn(publisher::publish_loop(
        api.clone(),
        settings.clone(),
        resync,
        wake,
        api_changed,
        stop_rx,
    ));
    let served = serve(settings.clone(), Box::new(claims), async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    })
    .await;
    let _ = publisher.await;
    let _ = watcher.await;
    uevents_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    (settings.log)(
        "the node's ResourceSlices stay published: the next start adopts them \
         (`dra driver --remove-slices` removes them at uninstall)",
    );
    served
}

/// Deletes the driver's ResourceSlices of the node (uninstall), with
/// `kubeconfig` or the pod's credentials; the number deleted.
pub fn remove_slices(
    kubeconfig: Option<&Path>,
    api_timeout: Duration,
    node: &str,
    driver: &str,
) -> Result<usize, DriverError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let api = api_server::ApiServer::connect(kubeconfig, api_timeout)
            .await
            .map_err(|e| DriverError::Setup(e.to_string()))?;
        api.remove(node, driver)
            .await
            .map_err(|e| DriverError::Setup(e.to_string()))
    })
}

/// Where claims come from, and whether slices are published.
#[derive(Debug, Clone)]
pub enum Source {
    /// ResourceClaim objects in a directory; nothing published.
    Dir(PathBuf),
    /// The API server (in cluster, or this kubeconfig): claims read there,
    /// slices published, checked for changes every `resync`.
    Cluster {
        /// A kubeconfig, or none for the pod's own credentials.
        kubeconfig: Option<PathBuf>,
        /// How often the devices are checked for changes.
        resync: Duration,
    },
}

/// Serves until SIGTERM or SIGINT, on a runtime of its own (the one
/// runtime of the process).
pub fn run(settings: Settings, source: Source) -> Result<(), DriverError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let shutdown = async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        };
        match source {
            Source::Dir(dir) => serve(settings, Box::new(ClaimDir(dir)), shutdown).await,
            Source::Cluster { kubeconfig, resync } => {
                let api =
                    api_server::ApiServer::connect(kubeconfig.as_deref(), settings.api_timeout)
                        .await
                        .map_err(|e| DriverError::Setup(e.to_string()))?;
                serve_cluster(settings, api, resync, shutdown).await
            }
        }
    })
}
