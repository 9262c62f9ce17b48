//! A DRA kubelet plugin, generic over the driver it serves (modelled on
//! Kubernetes' dra-example-driver over its kubeletplugin helper): it
//! registers with the kubelet's plugin watcher (a Registration service on a
//! socket in `plugins_registry/`), serves DRAPlugin v1 and v1beta1 on the
//! driver's socket under `plugins/`, and hands each claim of a call to the
//! driver ([`DraDriver`]) with the kubelet's deadline ([`deadline`]).
//!
//! With the API server ([`serve_cluster`]) it also publishes the node's
//! ResourceSlices, as the driver gives them, owned by its Node, and
//! publishes them again with a new pool generation when they change (asked
//! on a timer and at once when the driver says its devices changed) or when
//! the API server no longer holds them as published (watched); it reads the
//! claims there. Stopping leaves the slices: an upgrade or a restart does
//! not withdraw the node's devices, and the next start adopts them. The
//! kubelet deletes them when the driver stays unregistered (30 s in 1.37),
//! the garbage collector with the Node, and [`remove_slices`] on request.
//!
//! [`driver`] is what a driver implements, [`server`] the services,
//! [`claims`] where claims are read, [`api_server`] the API side
//! ([`objects`] the objects on the wire: vp2p's own `resource.k8s.io/v1`
//! types through kube's dynamic API), [`publisher`] the slices kept
//! published, [`leases`] and [`deadline`] who works on what and until when,
//! [`checkpoint`] the file a driver records its claims in, [`metrics`] and
//! [`events`] what it tells an operator beyond its log. The layer knows
//! nothing of the devices: vp2p's driver is [`crate::dra_driver`].

pub mod api_server;
pub mod checkpoint;
pub mod claims;
pub mod deadline;
pub mod device_health;
pub mod driver;
pub mod events;
pub mod health;
pub mod leases;
pub mod metrics;
pub mod objects;
pub mod publisher;
pub mod server;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::sync::Notify;
use tokio_stream::wrappers::UnixListenerStream;

pub use claims::{ClaimDir, ClaimRef, ClaimSource};
pub use deadline::Deadline;
pub use driver::{ClaimError, DraDriver, PreparedDevice};

/// What the plugin layer needs of its settings.
#[derive(Debug, Clone)]
pub struct PluginSettings {
    /// The node's name: the pool's name.
    pub node_name: String,
    /// The driver's name.
    pub driver_name: String,
    /// The checkpoint file the driver records its claims in.
    pub checkpoint: PathBuf,
    /// How long one API server request may take (a claim's read at prepare
    /// takes less when the kubelet's deadline is nearer).
    pub api_timeout: Duration,
    /// The registration socket (in the kubelet's plugins_registry).
    pub registration_socket: PathBuf,
    /// The DRA socket.
    pub dra_socket: PathBuf,
    /// The TCP port of the gRPC health service the kubelet's probes ask
    /// ([`health`]); None: no health service.
    pub healthcheck_port: Option<u16>,
    /// The TCP port `/metrics` is served on ([`metrics`]); None: none.
    pub metrics_port: Option<u16>,
    /// Where messages go (the library prints nothing itself).
    pub log: fn(&str),
}

/// What the plugin tells besides the kubelet's answers: its metrics, and
/// with the API server, an Event for each claim that fails.
#[derive(Debug, Clone)]
pub struct Report {
    /// The metrics every call and publication counts in.
    pub metrics: Arc<metrics::Metrics>,
    /// Where failures are told as Events (none without the API server).
    pub events: Option<events::ClaimEvents>,
}

impl Report {
    /// Metrics named after the driver (`gpu.vp2p.io` -> `gpu_vp2p_io_dra_...`
    /// would be unreadable: vp2p's are `vp2p_dra_...`), no Events.
    pub fn new() -> Self {
        Self {
            metrics: Arc::new(metrics::Metrics::new("vp2p_dra")),
            events: None,
        }
    }
}

impl Default for Report {
    fn default() -> Self {
        Self::new()
    }
}

impl PluginSettings {
    /// The defaults for a kubelet whose root directory is `kubelet_root`
    /// (`/var/lib/kubelet`): the registration socket
    /// `plugins_registry/<driver>-reg.sock`, the DRA socket and the checkpoint
    /// in `plugins/<driver>/`, API requests of 10 s, messages to stderr.
    pub fn new(node_name: &str, driver_name: &str, kubelet_root: &Path) -> Self {
        let dir = kubelet_root.join("plugins").join(driver_name);
        Self {
            node_name: node_name.to_string(),
            driver_name: driver_name.to_string(),
            checkpoint: dir.join("checkpoint.json"),
            api_timeout: Duration::from_secs(10),
            registration_socket: kubelet_root
                .join("plugins_registry")
                .join(format!("{driver_name}-reg.sock")),
            dra_socket: dir.join("dra.sock"),
            healthcheck_port: None,
            metrics_port: None,
            log: |m| eprintln!("{m}"),
        }
    }
}

/// Why the plugin stopped.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The driver could not be made (its checkpoint or devices unreadable),
    /// or the API server could not be reached.
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

fn listen(path: &Path) -> Result<UnixListener, PluginError> {
    let err = |source| PluginError::Listen {
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

/// How long calls in flight may take once the plugin is told to stop.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Serves `driver` on the DRA socket, then the registration socket (so the
/// kubelet, told of the plugin, finds its API up), and the health service
/// when asked for, until `shutdown` resolves; the sockets are removed on
/// the way out. `health` learns of the kubelet's registration here.
pub async fn serve<D: DraDriver>(
    settings: PluginSettings,
    driver: Arc<D>,
    health: Arc<health::Health>,
    report: Report,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), PluginError> {
    use crate::grpc::kubelet_pluginregistration_v1 as reg;
    use crate::grpc::uds_authority;
    use crate::grpc::{kubelet_dra_v1 as v1, kubelet_dra_v1beta1 as v1beta1};
    let dra = listen(&settings.dra_socket)?;
    let registration = listen(&settings.registration_socket)?;
    let health_port = match settings.healthcheck_port {
        Some(port) => Some(health::bind(port).await?),
        None => None,
    };
    let metrics_port = match settings.metrics_port {
        Some(port) => Some(health::bind(port).await?),
        None => None,
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let metrics_task = metrics_port.map(|listener| {
        tokio::spawn(metrics::serve(
            listener,
            report.metrics.clone(),
            stop_rx.clone(),
        ))
    });
    let health_stream = device_health::HealthStream::new(driver.clone());
    let service = server::DraService::new(driver, settings.log, report);
    let dra_server = tonic::transport::Server::builder()
        .add_service(v1::dra_plugin_server::DraPluginServer::new(service.clone()))
        .add_service(v1beta1::dra_plugin_server::DraPluginServer::new(service))
        .add_service(
            crate::grpc::kubelet_dra_health_v1::dra_resource_health_server::DraResourceHealthServer::new(
                health_stream,
            ),
        )
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
                health: health.clone(),
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
            stopped(stop_rx.clone()),
        );
    let health_task = health_port
        .map(|listener| tokio::spawn(health::serve(listener, settings.clone(), health, stop_rx)));
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
    if let Some(task) = metrics_task {
        if let Ok(Err(e)) = task.await {
            (settings.log)(&format!("metrics: {e}"));
        }
    }
    if let Some(task) = health_task {
        if let Ok(Err(e)) = task.await {
            (settings.log)(&format!("health service: {e}"));
        }
    }
    for p in [&settings.registration_socket, &settings.dra_socket] {
        let _ = std::fs::remove_file(p);
    }
    match result {
        Ok(r) => r.map_err(PluginError::from),
        Err(e) => Err(PluginError::Io(std::io::Error::other(e))),
    }
}

/// [`serve`] with the API server: the driver made by `driver` from the
/// claims read there, its slices published (every `resync`, at once when
/// `devices_changed` is notified, when the API server's copy differs) and
/// left published when `shutdown` resolves.
pub async fn serve_cluster<D: DraDriver>(
    settings: PluginSettings,
    api: api_server::ApiServer,
    cadence: publisher::Cadence,
    devices_changed: Arc<Notify>,
    driver: impl FnOnce(Box<dyn ClaimSource>) -> Result<D, String>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), PluginError> {
    let claims = api_server::ApiClaims {
        api: api.clone(),
        runtime: tokio::runtime::Handle::current(),
    };
    let driver = Arc::new(driver(Box::new(claims)).map_err(PluginError::Setup)?);
    // Before the kubelet is served: what the driver recorded for claims
    // deleted while it was away is let go (reads through the runtime, so on
    // a blocking thread).
    let d = driver.clone();
    if let Err(e) = tokio::task::spawn_blocking(move || d.reconcile()).await {
        (settings.log)(&format!("reconciling the checkpoint: {e}"));
    }
    let health = Arc::new(health::Health::new(true));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let api_changed = Arc::new(Notify::new());
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
    let report = Report {
        events: Some(events::ClaimEvents::new(
            api.clone(),
            &settings.driver_name,
            &settings.node_name,
            settings.log,
        )),
        ..Report::new()
    };
    let publisher = tokio::spawn(publisher::publish_loop(
        api.clone(),
        driver.clone(),
        publisher::Told {
            health: health.clone(),
            metrics: report.metrics.clone(),
        },
        settings.clone(),
        cadence,
        publisher::Wakers {
            devices_changed,
            api_changed,
        },
        stop_rx,
    ));
    let served = serve(settings.clone(), driver, health, report, async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    })
    .await;
    let _ = publisher.await;
    let _ = watcher.await;
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
) -> Result<usize, PluginError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let api = api_server::ApiServer::connect(kubeconfig, api_timeout)
            .await
            .map_err(|e| PluginError::Setup(e.to_string()))?;
        api.remove(node, driver)
            .await
            .map_err(|e| PluginError::Setup(e.to_string()))
    })
}

/// Where claims come from, and whether slices are published.
#[derive(Debug, Clone)]
pub enum Source {
    /// ResourceClaim objects in a directory; nothing published.
    Dir(PathBuf),
    /// The API server (in cluster, or this kubeconfig): claims read there,
    /// slices published, the devices checked for changes every `resync`,
    /// the API server's copy every `verify` (and at each watch event).
    Cluster {
        /// A kubeconfig, or none for the pod's own credentials.
        kubeconfig: Option<PathBuf>,
        /// How often the devices are checked for changes.
        resync: Duration,
        /// How often the API server's copy is compared without a watch
        /// event asking.
        verify: Duration,
    },
}

/// Serves the driver `driver` makes from the claims of `source` until
/// SIGTERM or SIGINT, on a runtime of its own (the one runtime of the
/// process); `devices_changed` wakes the publisher.
pub fn run<D: DraDriver>(
    settings: PluginSettings,
    source: Source,
    devices_changed: Arc<Notify>,
    driver: impl FnOnce(Box<dyn ClaimSource>) -> Result<D, String>,
) -> Result<(), PluginError> {
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
            Source::Dir(dir) => {
                let driver = driver(Box::new(ClaimDir(dir))).map_err(PluginError::Setup)?;
                let health = Arc::new(health::Health::new(false));
                serve(settings, Arc::new(driver), health, Report::new(), shutdown).await
            }
            Source::Cluster {
                kubeconfig,
                resync,
                verify,
            } => {
                let api =
                    api_server::ApiServer::connect(kubeconfig.as_deref(), settings.api_timeout)
                        .await
                        .map_err(|e| PluginError::Setup(e.to_string()))?;
                let cadence = publisher::Cadence { resync, verify };
                serve_cluster(settings, api, cadence, devices_changed, driver, shutdown).await
            }
        }
    })
}
