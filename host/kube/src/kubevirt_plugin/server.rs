//! The DomainHookService vp2p serves: checks the request, answers each
//! invocation context, runs the patcher for a boot.

use std::sync::Arc;

use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::metadata::MetadataValue;
use tonic::{Code, Request, Response, Status};

use super::api::*;
use super::{prepare_socket, Config, DomainPatcher, KubevirtPluginError, Outcome, ERROR_METADATA};
use crate::grpc::{bounded, quote, refusal};

/// The DomainHookService vp2p serves: the patcher and the log.
pub struct Hook<P> {
    pub(crate) patcher: Arc<P>,
    pub(crate) log: fn(&str),
}

/// Serves until SIGTERM or SIGINT, then removes the socket.
pub(crate) async fn serve<P: DomainPatcher>(config: Config<P>) -> Result<(), KubevirtPluginError> {
    let Config {
        socket,
        patcher,
        log,
    } = config;
    prepare_socket(&socket)?;
    let listener = UnixListener::bind(&socket).map_err(|source| KubevirtPluginError::Bind {
        path: socket.clone(),
        source,
    })?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    log(&format!(
        "serving DomainHookService.MutateDomain on {}",
        socket.display()
    ));
    let hook = Hook {
        patcher: Arc::new(patcher),
        log,
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let mut server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(DomainHookServiceServer::new(hook))
            .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async move {
                let _ = stop_rx.await;
            }),
    );
    let ended = tokio::select! {
        r = &mut server => Some(r),
        _ = term.recv() => None,
        _ = tokio::signal::ctrl_c() => None,
    };
    let served = match ended {
        Some(r) => r,
        None => {
            // Calls in flight finish; an idle connection a client keeps open
            // must not hold the pod's termination.
            let _ = stop_tx.send(());
            match tokio::time::timeout(GRACE, &mut server).await {
                Ok(r) => r,
                Err(_) => {
                    server.abort();
                    Ok(Ok(()))
                }
            }
        }
    };
    let _ = std::fs::remove_file(&socket);
    log("stopped");
    served.map_err(|e| KubevirtPluginError::Io(std::io::Error::other(e)))??;
    Ok(())
}

/// How long calls in flight may take to finish after SIGTERM.
const GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// `metadata.namespace/metadata.name` of the VMI, for the log.
fn vmi_name(vmi: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(vmi).unwrap_or_default();
    let s = |p: &str| v.pointer(p).and_then(|x| x.as_str()).unwrap_or("?");
    bounded(&format!(
        "{}/{}",
        s("/metadata/namespace"),
        s("/metadata/name")
    ))
}

/// `bytes` as UTF-8, or why not (naming `field`).
fn text(bytes: Vec<u8>, field: &str) -> Result<String, String> {
    String::from_utf8(bytes).map_err(|e| format!("{field} is not UTF-8: {e}"))
}

/// A metadata value: `s` on one line of printable ASCII, bounded as a
/// status message is.
fn header(s: &str) -> Option<MetadataValue<tonic::metadata::Ascii>> {
    let line: String = bounded(s)
        .chars()
        .map(|c| if c.is_ascii_graphic() { c } else { ' ' })
        .collect();
    line.parse().ok()
}

#[tonic::async_trait]
impl<P: DomainPatcher> DomainHookService for Hook<P> {
    async fn mutate_domain(
        &self,
        req: Request<MutateDomainRequest>,
    ) -> Result<Response<MutateDomainResponse>, Status> {
        let log = self.log;
        let req = req.into_inner();
        if req.domain_type != DOMAIN_TYPE_LIBVIRT {
            let e = format!(
                "domain_type {} is not one vp2p patches (only {DOMAIN_TYPE_LIBVIRT:?})",
                quote(&req.domain_type)
            );
            log(&e);
            return Err(refusal(Code::InvalidArgument, &e));
        }
        let named = req
            .sidecar_context
            .as_ref()
            .map_or("", |c| c.invocation_context.as_str());
        let Some(context) = InvocationContext::parse(named) else {
            let e = format!(
                "sidecar_context.invocation_context {} is not one KubeVirt defines \
                 (Boot, MigrationSource, MigrationTarget)",
                quote(named)
            );
            log(&e);
            return Err(refusal(Code::InvalidArgument, &e));
        };
        let (domain, vmi) = match (text(req.domain, "domain"), text(req.vmi, "vmi")) {
            (Ok(d), Ok(v)) => (d, v),
            (Err(e), _) | (_, Err(e)) => {
                log(&e);
                return Err(refusal(Code::InvalidArgument, &e));
            }
        };
        let who = vmi_name(&vmi);
        if context != InvocationContext::Boot {
            // The guest's PCI layout and cliques were fixed when it booted and
            // travel with the running domain; a migration must not change them.
            log(&format!(
                "{who}: {}: the domain passes unchanged (cliques are set at boot)",
                context.as_str()
            ));
            return Ok(Response::new(MutateDomainResponse {
                domain: domain.into_bytes(),
            }));
        }
        let patcher = Arc::clone(&self.patcher);
        let given = domain.clone();
        let outcome = tokio::task::spawn_blocking(move || patcher.patch(&given, &vmi))
            .await
            .map_err(|e| Status::internal(format!("the patcher stopped: {e}")))?;
        match outcome {
            Outcome::Domain { xml, report } => {
                for line in report.lines() {
                    log(&format!("{who}: {line}"));
                }
                Ok(Response::new(MutateDomainResponse {
                    domain: xml.into_bytes(),
                }))
            }
            Outcome::Kept { reason } => {
                log(&format!(
                    "{who}: error: {}; the domain passes unchanged, without P2P cliques \
                     (annotate the VMI with vp2p.io/on-error: fail to stop it instead)",
                    bounded(&reason)
                ));
                let mut resp = Response::new(MutateDomainResponse {
                    domain: domain.into_bytes(),
                });
                if let Some(v) = header(&reason) {
                    resp.metadata_mut().insert(ERROR_METADATA, v);
                }
                Ok(resp)
            }
            Outcome::Refused { reason } => {
                log(&format!("{who}: error: {}", bounded(&reason)));
                Err(refusal(Code::FailedPrecondition, &reason))
            }
        }
    }
}
