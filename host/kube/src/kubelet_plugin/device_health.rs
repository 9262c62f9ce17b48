//! The kubelet's DRA resource health stream (KEP-4680,
//! `v1.DRAResourceHealth/NodeWatchResources`, on the DRA socket): the health
//! of the devices the driver prepared, as the driver sees them
//! ([`DraDriver::device_health`]), sent when the stream opens, whenever it
//! changes (checked every [`CHECK_EVERY`]) and at least every
//! [`REPORT_EVERY`], well inside the timeout each report gives the kubelet
//! ([`TRUSTED_FOR`]). The kubelet writes it into the status of the pods
//! that use the devices (`allocatedResourcesStatus`).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::driver::{DeviceHealth, DraDriver, Health};
use crate::grpc::kubelet_dra_health_v1 as api;

/// The service's name as the registration names it (k8s.io/kubelet
/// v0.37.2, pkg/apis/dra-health/v1/types.go `DRAResourceHealthService`).
pub const SERVICE: &str = "v1.DRAResourceHealth";

/// How often the devices' health is looked at.
pub const CHECK_EVERY: Duration = Duration::from_secs(2);
/// How often it is sent unchanged.
pub const REPORT_EVERY: Duration = Duration::from_secs(10);
/// How long the kubelet may trust a report before the device is Unknown.
pub const TRUSTED_FOR: Duration = Duration::from_secs(30);

/// The service, over the driver.
#[derive(Debug)]
pub struct HealthStream<D> {
    driver: Arc<D>,
}

impl<D> HealthStream<D> {
    /// The stream of `driver`'s devices' health.
    pub fn new(driver: Arc<D>) -> Self {
        Self { driver }
    }
}

/// `health` as the API says it.
fn wire(health: &[DeviceHealth], now: i64) -> api::NodeWatchResourcesResponse {
    api::NodeWatchResourcesResponse {
        devices: health
            .iter()
            .map(|d| api::DeviceHealth {
                device: Some(api::DeviceIdentifier {
                    pool_name: d.pool.clone(),
                    device_name: d.device.clone(),
                }),
                health: match d.health {
                    Health::Healthy => api::HealthStatus::Healthy,
                    Health::Unhealthy => api::HealthStatus::Unhealthy,
                    Health::Unknown => api::HealthStatus::Unknown,
                } as i32,
                last_updated_time: now,
                health_check_timeout_seconds: TRUSTED_FOR.as_secs() as i64,
                message: crate::grpc::bounded(&d.message),
            })
            .collect(),
    }
}

#[tonic::async_trait]
impl<D: DraDriver> api::dra_resource_health_server::DraResourceHealth for HealthStream<D> {
    type NodeWatchResourcesStream = ReceiverStream<Result<api::NodeWatchResourcesResponse, Status>>;

    async fn node_watch_resources(
        &self,
        _req: Request<api::NodeWatchResourcesRequest>,
    ) -> Result<Response<Self::NodeWatchResourcesStream>, Status> {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let driver = self.driver.clone();
        tokio::spawn(async move {
            let mut sent: Option<(Vec<DeviceHealth>, tokio::time::Instant)> = None;
            loop {
                let d = driver.clone();
                let Ok(now) = tokio::task::spawn_blocking(move || d.device_health()).await else {
                    return;
                };
                let due = match &sent {
                    None => true,
                    Some((last, at)) => *last != now || at.elapsed() >= REPORT_EVERY,
                };
                if due {
                    let secs = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs() as i64);
                    if tx.send(Ok(wire(&now, secs))).await.is_err() {
                        return;
                    }
                    sent = Some((now, tokio::time::Instant::now()));
                }
                tokio::select! {
                    _ = tokio::time::sleep(CHECK_EVERY) => {}
                    _ = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}
