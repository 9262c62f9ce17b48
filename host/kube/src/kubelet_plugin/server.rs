//! The plugin's two gRPC services: Registration (the kubelet's plugin
//! watcher asks who we are) and DRAPlugin v1 and v1beta1 (the kubelet
//! prepares and unprepares claims), the latter answering from a
//! [`DraDriver`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use tonic::{Request, Response, Status};

use p2p_allocation::dra::names::{is_dns_label, is_dns_subdomain};

use super::claims::ClaimRef;
use super::deadline::Deadline;
use super::driver::{ClaimError, DraDriver};
use super::metrics::Call;
use super::Report;
use crate::grpc::kubelet_pluginregistration_v1 as reg;
use crate::grpc::{kubelet_dra_v1 as v1, kubelet_dra_v1beta1 as v1beta1, quote, refusal};

/// The plugin type the kubelet's plugin watcher knows DRA drivers by.
pub const PLUGIN_TYPE: &str = "DRAPlugin";

/// The services the driver serves on its DRA socket, newest first, as
/// `PluginInfo.supported_versions` names them (k8s.io/kubelet v0.36.3,
/// pkg/apis/dra/v1/types.go `DRAPluginService`, and v1beta1's), and the
/// optional health stream (v0.37.2, pkg/apis/dra-health/v1/types.go).
pub const SUPPORTED_VERSIONS: [&str; 3] = [
    "v1.DRAPlugin",
    "v1beta1.DRAPlugin",
    super::device_health::SERVICE,
];

/// The Registration service.
#[derive(Debug, Clone)]
pub struct Registration {
    /// What GetInfo answers.
    pub info: reg::PluginInfo,
    /// Told whether the kubelet registered the plugin.
    pub health: Arc<super::health::Health>,
    /// Where the kubelet's verdict is told.
    pub log: fn(&str),
}

#[tonic::async_trait]
impl reg::registration_server::Registration for Registration {
    async fn get_info(
        &self,
        _: Request<reg::InfoRequest>,
    ) -> Result<Response<reg::PluginInfo>, Status> {
        Ok(Response::new(self.info.clone()))
    }

    async fn notify_registration_status(
        &self,
        req: Request<reg::RegistrationStatus>,
    ) -> Result<Response<reg::RegistrationStatusResponse>, Status> {
        let s = req.into_inner();
        self.health.set_registered(s.plugin_registered);
        if s.plugin_registered {
            (self.log)(&format!("the kubelet registered {}", self.info.name));
        } else {
            (self.log)(&format!(
                "the kubelet refused {}: {}",
                self.info.name,
                quote(&s.error)
            ));
        }
        Ok(Response::new(reg::RegistrationStatusResponse {}))
    }
}

/// DRAPlugin, v1 and v1beta1, answering from the driver `D`.
#[derive(Debug)]
pub struct DraService<D> {
    /// The node side.
    pub driver: Arc<D>,
    /// Where each claim's error is told.
    pub log: fn(&str),
    /// The metrics each call counts in, and the Events a failure makes.
    pub report: Report,
}

impl<D> Clone for DraService<D> {
    fn clone(&self) -> Self {
        Self {
            driver: self.driver.clone(),
            log: self.log,
            report: self.report.clone(),
        }
    }
}

impl<D: DraDriver> DraService<D> {
    /// The service of `driver`, its claims' errors told to `log` and
    /// `report`.
    pub fn new(driver: Arc<D>, log: fn(&str), report: Report) -> Self {
        Self {
            driver,
            log,
            report,
        }
    }
}

/// The claim the kubelet names. A claim without a uid makes the whole call
/// malformed (its answer could not be keyed), and so does a namespace, name
/// or uid Kubernetes would never hand out: the namespace a DNS label, the
/// name a DNS subdomain (RFC 1123, as the API server validates them), the
/// uid letters, digits and `-` (a UUID), at most 128. Each of them becomes
/// part of a path the driver reads or writes as root (`--claims-dir`, the
/// CDI spec's file name), so `../` never gets that far. Refused as
/// INVALID_ARGUMENT.
fn claim_ref(namespace: String, name: String, uid: String) -> Result<ClaimRef, Box<Status>> {
    let said = || format!("claim {}/{}", quote(&namespace), quote(&name));
    let why = if uid.is_empty() {
        Some("no uid".to_string())
    } else if !is_dns_label(&namespace, 63) {
        Some("the namespace is not a DNS label (RFC 1123)".to_string())
    } else if !is_dns_subdomain(&name, 253) {
        Some("the name is not a DNS subdomain (RFC 1123)".to_string())
    } else if uid.len() > 128 || !uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        Some(format!(
            "uid {} is not a UID (letters, digits and -)",
            quote(&uid)
        ))
    } else {
        None
    };
    if let Some(why) = why {
        return Err(Box::new(refusal(
            tonic::Code::InvalidArgument,
            &format!("{}: {why}", said()),
        )));
    }
    Ok(ClaimRef {
        namespace,
        name,
        uid,
    })
}

/// The kubelet's deadline for a call: its `grpc-timeout`, counted from now.
fn deadline<T>(req: &Request<T>) -> Deadline {
    req.metadata()
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| Deadline::from_grpc_timeout(v, Instant::now()))
        .unwrap_or(Deadline::NONE)
}

/// One of the driver's calls on a claim, and which it is.
type ClaimCall<D, T> = (Call, fn(&D, &ClaimRef, Deadline) -> Result<T, ClaimError>);

/// The word the log says a call's success with.
fn done(call: Call) -> &'static str {
    match call {
        Call::Prepare => "prepared",
        Call::Unprepare => "unprepared",
    }
}

/// Runs `f` on every claim at once, each on a blocking thread of its own
/// (sysfs writes and waits, an API read): one slow claim holds up no other.
/// Each is logged and counted; each failure is told as Events, which the
/// answer does not wait for.
async fn each<D: DraDriver, T: Send + 'static>(
    service: &DraService<D>,
    claims: Vec<ClaimRef>,
    deadline: Deadline,
    (call, f): ClaimCall<D, T>,
) -> Result<Vec<(ClaimRef, Result<T, ClaimError>)>, Status> {
    let tasks: Vec<_> = claims
        .into_iter()
        .map(|c| {
            let (driver, log) = (service.driver.clone(), service.log);
            let metrics = service.report.metrics.clone();
            tokio::task::spawn_blocking(move || {
                let started = std::time::Instant::now();
                let r = f(&driver, &c, deadline);
                let took = started.elapsed();
                metrics.claim_call(call, r.is_ok(), took);
                // Each call said, as the kubelet made it: an operator reads
                // which claims the node prepared, and when, here.
                match &r {
                    Ok(_) => log(&format!("{} {c} in {} ms", done(call), took.as_millis())),
                    Err(e) => log(&e.0),
                }
                (c, r)
            })
        })
        .collect();
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(
            t.await
                .map_err(|e| Status::internal(format!("the preparing task failed: {e}")))?,
        );
    }
    if let Some(events) = &service.report.events {
        for (c, r) in &out {
            if let Err(e) = r {
                let (events, c, note) = (events.clone(), c.clone(), e.0.clone());
                tokio::spawn(async move { events.failed(&c, call, &note).await });
            }
        }
    }
    Ok(out)
}

macro_rules! dra_service {
    ($m:ident, { $($extra:tt)* }) => {
        #[tonic::async_trait]
        impl<D: DraDriver> $m::dra_plugin_server::DraPlugin for DraService<D> {
            async fn node_prepare_resources(
                &self,
                req: Request<$m::NodePrepareResourcesRequest>,
            ) -> Result<Response<$m::NodePrepareResourcesResponse>, Status> {
                let deadline = deadline(&req);
                let claims = req
                    .into_inner()
                    .claims
                    .into_iter()
                    .map(|c| claim_ref(c.namespace, c.name, c.uid))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| *e)?;
                let mut out = HashMap::new();
                for (c, r) in each(self, claims, deadline, (Call::Prepare, D::prepare)).await? {
                    let entry = match r {
                        Ok(devices) => $m::NodePrepareResourceResponse {
                            devices: devices
                                .into_iter()
                                .map(|d| $m::Device {
                                    request_names: vec![d.request],
                                    pool_name: d.pool,
                                    device_name: d.device,
                                    cdi_device_ids: d.cdi_ids,
                                    $($extra)*
                                })
                                .collect(),
                            error: String::new(),
                        },
                        Err(e) => $m::NodePrepareResourceResponse {
                            devices: Vec::new(),
                            error: crate::grpc::bounded(&e.0),
                        },
                    };
                    out.insert(c.uid, entry);
                }
                Ok(Response::new($m::NodePrepareResourcesResponse { claims: out }))
            }

            async fn node_unprepare_resources(
                &self,
                req: Request<$m::NodeUnprepareResourcesRequest>,
            ) -> Result<Response<$m::NodeUnprepareResourcesResponse>, Status> {
                let deadline = deadline(&req);
                let claims = req
                    .into_inner()
                    .claims
                    .into_iter()
                    .map(|c| claim_ref(c.namespace, c.name, c.uid))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| *e)?;
                let mut out = HashMap::new();
                for (c, r) in each(self, claims, deadline, (Call::Unprepare, D::unprepare)).await? {
                    let error = r.err().map(|e| crate::grpc::bounded(&e.0)).unwrap_or_default();
                    out.insert(c.uid, $m::NodeUnprepareResourceResponse { error });
                }
                Ok(Response::new($m::NodeUnprepareResourcesResponse { claims: out }))
            }
        }
    };
}

dra_service!(v1, { share_id: None, });
dra_service!(v1beta1, {});
