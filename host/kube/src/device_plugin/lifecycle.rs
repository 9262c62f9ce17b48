//! The plugin's life with the kubelet: serve on our socket, register on
//! kubelet.sock, and when the kubelet starts or restarts (kubelet.sock
//! created or replaced, or our socket removed, as a starting kubelet does),
//! serve on our socket again and register: whether or not we had registered
//! yet, so a plugin started before its kubelet registers too.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio_stream::wrappers::UnixListenerStream;

use super::api::*;
use super::inventory::{socket_name, Inventory};
use super::plugin::{options, Plugin, Seen};
use super::restart::RestartWatch;
use super::{Config, DevicePluginError};

/// What ended a server generation.
enum Next {
    /// The kubelet started or restarted: serve and register again.
    Restart,
    /// SIGTERM or SIGINT.
    Stop,
}

/// Serves until SIGTERM or SIGINT.
pub(crate) async fn serve(config: Config, inventory: Inventory) -> Result<(), DevicePluginError> {
    let inventory = Arc::new(inventory);
    let topo = Arc::new(inventory.scan()?);
    let devices = inventory.devices(&topo);
    let (health_tx, health_rx) = watch::channel(Seen { topo, devices });
    tokio::spawn(poll_health(
        Arc::clone(&inventory),
        health_tx,
        config.poll,
        config.log,
    ));
    let (quit_tx, quit_rx) = watch::channel(false);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        let _ = quit_tx.send(true);
        // Keep the sender: a dropped one would read as a quit again.
        std::future::pending::<()>().await;
    });
    loop {
        match generation(&config, &inventory, &health_rx, quit_rx.clone()).await? {
            Next::Restart => continue,
            Next::Stop => return Ok(()),
        }
    }
}

/// Rescans sysfs every `poll` (off the runtime's thread), keeps the tree for
/// the kubelet's calls and wakes ListAndWatch when a health changes.
async fn poll_health(
    inventory: Arc<Inventory>,
    tx: watch::Sender<Seen>,
    poll: Duration,
    log: fn(&str),
) {
    loop {
        tokio::time::sleep(poll).await;
        let inv = Arc::clone(&inventory);
        let topo = match tokio::task::spawn_blocking(move || inv.scan()).await {
            Ok(Ok(topo)) => Arc::new(topo),
            Ok(Err(e)) => {
                log(&format!("reading sysfs: {e}"));
                continue;
            }
            Err(e) => {
                log(&format!("reading sysfs: {e}"));
                continue;
            }
        };
        let devices = inventory.devices(&topo);
        tx.send_if_modified(|seen| {
            seen.topo = topo;
            if seen.devices == devices {
                return false;
            }
            for d in &devices {
                log(&format!("{} {}", d.id, d.health));
            }
            seen.devices = devices;
            true
        });
    }
}

/// One server on our socket and one registration, until the kubelet restarts
/// or we are told to stop.
async fn generation(
    config: &Config,
    inventory: &Arc<Inventory>,
    health: &watch::Receiver<Seen>,
    mut quit: watch::Receiver<bool>,
) -> Result<Next, DevicePluginError> {
    let log = config.log;
    let endpoint = socket_name(&config.resource);
    let sock = config.kubelet_dir.join(&endpoint);
    // A socket left by an earlier run refuses the bind.
    let _ = std::fs::remove_file(&sock);
    let listener = UnixListener::bind(&sock).map_err(|source| DevicePluginError::Bind {
        path: sock.clone(),
        source,
    })?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let plugin = Plugin {
        inventory: Arc::clone(inventory),
        health: health.clone(),
        stop: stop_rx.clone(),
    };
    let mut stopped = stop_rx;
    let mut server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(DevicePluginServer::new(plugin))
            .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async move {
                let _ = stopped.changed().await;
            }),
    );
    let kubelet = config.kubelet_dir.join(KUBELET_SOCKET);
    let (mut restart, no_inotify) = RestartWatch::new(&config.kubelet_dir, &endpoint);
    if let Some(e) = no_inotify {
        log(&format!(
            "no inotify ({e}): checking kubelet.sock by polling alone"
        ));
    }
    let mut registered = false;
    let mut last_error = String::new();
    let next = loop {
        // Checked before every registration attempt as well as after one: a
        // starting kubelet removes our socket, so registering an endpoint
        // that no longer exists would be refused forever.
        if restart.restarted() {
            log(if registered {
                "the kubelet restarted; serving and registering again"
            } else {
                "the kubelet started (kubelet.sock created or our socket removed); \
                 serving and registering again"
            });
            break Next::Restart;
        }
        if !registered {
            match register(&kubelet, &endpoint, &config.resource).await {
                Ok(()) => {
                    registered = true;
                    restart.registered();
                    log(&format!(
                        "registered {} at {} with {}",
                        config.resource,
                        sock.display(),
                        kubelet.display()
                    ));
                }
                Err(e) if e != last_error => {
                    log(&format!(
                        "registering with {}: {e}; retrying",
                        kubelet.display()
                    ));
                    last_error = e;
                }
                Err(_) => {}
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(config.poll) => {}
            _ = quit.changed() => break Next::Stop,
        }
    };
    let _ = stop_tx.send(true);
    tokio::select! {
        r = &mut server => match r {
            Ok(Err(e)) => log(&format!("server: {e}")),
            Err(e) => log(&format!("server task: {e}")),
            Ok(Ok(())) => {}
        },
        _ = tokio::time::sleep(Duration::from_secs(2)) => server.abort(),
    }
    if matches!(next, Next::Stop) {
        let _ = std::fs::remove_file(&sock);
    }
    Ok(next)
}

/// How long a registration may take: longer than the kubelet's own dial of
/// our endpoint within Register (10 s, k8s.io/kubernetes v1.37.2
/// pkg/kubelet/cm/devicemanager/plugin/v1beta1/client.go:133), so that a
/// failed dial comes back as the kubelet's error rather than our timeout.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(15);

/// Register on kubelet.sock; the error as text.
async fn register(kubelet: &Path, endpoint: &str, resource: &str) -> Result<(), String> {
    let call = async {
        let channel = connect_unix(kubelet).await.map_err(|e| format!("{e}"))?;
        RegistrationClient::new(channel)
            .register(RegisterRequest {
                version: VERSION.to_string(),
                endpoint: endpoint.to_string(),
                resource_name: resource.to_string(),
                options: Some(options()),
            })
            .await
            .map_err(|s| format!("refused: {}", s.message()))?;
        Ok(())
    };
    tokio::time::timeout(REGISTER_TIMEOUT, call)
        .await
        .map_err(|_| format!("no answer in {} s", REGISTER_TIMEOUT.as_secs()))?
}
