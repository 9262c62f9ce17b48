//! The plugin's health, for the kubelet's gRPC probes (`grpc.health.v1`,
//! served by tonic-health on a TCP port of the pod): service `liveness` is
//! SERVING while both of the plugin's sockets answer a call (GetInfo on the
//! registration socket, an empty NodePrepareResources on the DRA socket),
//! asked every [`CHECK_EVERY`]; service `readiness` is SERVING once the
//! kubelet has registered the plugin and, with the API server, the node's
//! slices have been published; the empty service name is both. A probe then
//! means what an operator asks of it: the kubelet can reach the driver, and
//! the scheduler can see its devices.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tonic_health::ServingStatus;

use super::{PluginError, PluginSettings};
use crate::grpc::connect_unix;
use crate::grpc::kubelet_dra_v1 as v1;
use crate::grpc::kubelet_pluginregistration_v1 as reg;

/// How often the sockets are asked.
pub const CHECK_EVERY: Duration = Duration::from_secs(2);

/// How long one call to a socket may take before it counts as no answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// What the plugin has reached, set as it happens.
#[derive(Debug)]
pub struct Health {
    registered: AtomicBool,
    published: AtomicBool,
    needs_publication: bool,
}

impl Health {
    /// Nothing reached yet; `needs_publication` when the plugin publishes
    /// slices (with the API server), so readiness waits for them.
    pub fn new(needs_publication: bool) -> Self {
        Self {
            registered: AtomicBool::new(false),
            published: AtomicBool::new(false),
            needs_publication,
        }
    }

    /// The kubelet registered the plugin (NotifyRegistrationStatus, true).
    pub fn set_registered(&self, registered: bool) {
        self.registered.store(registered, Ordering::Relaxed);
    }

    /// The node's slices are on the API server as built.
    pub fn set_published(&self) {
        self.published.store(true, Ordering::Relaxed);
    }

    /// Registered, and published where the plugin publishes.
    pub fn ready(&self) -> bool {
        self.registered.load(Ordering::Relaxed)
            && (!self.needs_publication || self.published.load(Ordering::Relaxed))
    }
}

/// Whether the registration socket answers GetInfo and the DRA socket an
/// empty NodePrepareResources (a call that touches no claim).
pub async fn sockets_answer(registration: &Path, dra: &Path) -> bool {
    let reg_ok = async {
        let channel = connect_unix(registration).await.ok()?;
        reg::registration_client::RegistrationClient::new(channel)
            .get_info(reg::InfoRequest {})
            .await
            .ok()
    };
    let dra_ok = async {
        let channel = connect_unix(dra).await.ok()?;
        v1::dra_plugin_client::DraPluginClient::new(channel)
            .node_prepare_resources(v1::NodePrepareResourcesRequest { claims: Vec::new() })
            .await
            .ok()
    };
    matches!(
        tokio::time::timeout(CALL_TIMEOUT, reg_ok).await,
        Ok(Some(_))
    ) && matches!(
        tokio::time::timeout(CALL_TIMEOUT, dra_ok).await,
        Ok(Some(_))
    )
}

fn status(ok: bool) -> ServingStatus {
    if ok {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    }
}

/// The health port, bound on every address of the pod (a port in use is
/// an error at start, not later).
pub async fn bind(port: u16) -> Result<tokio::net::TcpListener, PluginError> {
    let addr = std::net::SocketAddr::from(([0, 0, 0, 0], port));
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| PluginError::Listen {
            path: format!("tcp port {port}").into(),
            source,
        })
}

/// Serves `grpc.health.v1` on `listener` until `stop`, the statuses asked
/// every [`CHECK_EVERY`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    settings: PluginSettings,
    health: Arc<Health>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), PluginError> {
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    let (mut reporter, service) = tonic_health::server::health_reporter();
    // Known before the first check: a probe that comes first reads
    // NOT_SERVING, not "service not registered".
    for name in ["liveness", "readiness", ""] {
        reporter.set_service_status(name, status(false)).await;
    }
    let mut rx = stop.clone();
    let server = tonic::transport::Server::builder()
        .add_service(service)
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::TcpListenerStream::new(listener),
            async move {
                let _ = rx.wait_for(|s| *s).await;
            },
        );
    let server = tokio::spawn(server);
    (settings.log)(&format!(
        "health (grpc.health.v1: liveness, readiness) on tcp port {port}"
    ));
    loop {
        let live = sockets_answer(&settings.registration_socket, &settings.dra_socket).await;
        let ready = health.ready();
        reporter.set_service_status("liveness", status(live)).await;
        reporter
            .set_service_status("readiness", status(ready))
            .await;
        reporter.set_service_status("", status(live && ready)).await;
        tokio::select! {
            _ = tokio::time::sleep(CHECK_EVERY) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    match server.await {
        Ok(r) => r.map_err(PluginError::from),
        Err(e) => Err(PluginError::Io(std::io::Error::other(e))),
    }
}
