//! The DevicePlugin service: the kubelet's calls answered from the
//! [`Inventory`], the health list from the poller.

use std::sync::Arc;

use p2p_topology::Topology;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Request, Response, Status};

use crate::grpc::refusal;

use super::api::*;
use super::inventory::{Inventory, RequestError};

/// What the poller saw last: the tree and the device list with health.
pub(crate) struct Seen {
    /// The tree, at most one poll old: the kubelet's calls read it, so they
    /// answer within GetPreferredAllocation's time without a scan of their own.
    pub(crate) topo: Arc<Topology>,
    /// Every GPU with its health.
    pub(crate) devices: Vec<Device>,
}

/// One server generation's DevicePlugin service (what [`super::service`]
/// makes without a server).
pub struct Plugin {
    pub(crate) inventory: Arc<Inventory>,
    /// What the poller saw last; changed (and notified) when a health changes.
    pub(crate) health: watch::Receiver<Seen>,
    /// Set when this generation's server stops: open streams end.
    pub(crate) stop: watch::Receiver<bool>,
}

/// The options vp2p registers with: preferred allocation, no PreStartContainer.
pub fn options() -> DevicePluginOptions {
    DevicePluginOptions {
        pre_start_required: false,
        get_preferred_allocation_available: true,
    }
}

fn status(e: RequestError) -> Status {
    let code = match e {
        RequestError::UnknownId(..) | RequestError::Size(_) | RequestError::Choose(_) => {
            Code::InvalidArgument
        }
        RequestError::Gone(_) | RequestError::NotVfio(..) | RequestError::NoGroup(_) => {
            Code::FailedPrecondition
        }
    };
    refusal(code, &e.to_string())
}

impl Plugin {
    fn topology(&self) -> Arc<Topology> {
        Arc::clone(&self.health.borrow().topo)
    }
}

#[tonic::async_trait]
impl DevicePlugin for Plugin {
    type ListAndWatchStream = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<ListAndWatchResponse, Status>> + Send>,
    >;

    async fn get_device_plugin_options(
        &self,
        _req: Request<Empty>,
    ) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(options()))
    }

    async fn list_and_watch(
        &self,
        _req: Request<Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let mut health = self.health.clone();
        let mut stop = self.stop.clone();
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            let mut devices = health.borrow_and_update().devices.clone();
            loop {
                if tx.send(Ok(ListAndWatchResponse { devices })).await.is_err() {
                    return;
                }
                tokio::select! {
                    changed = health.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        devices = health.borrow_and_update().devices.clone();
                    }
                    _ = stop.changed() => return,
                    _ = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn get_preferred_allocation(
        &self,
        req: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        let topo = self.topology();
        let mut container_responses = Vec::new();
        for c in &req.get_ref().container_requests {
            let device_ids = self
                .inventory
                .preferred(
                    &topo,
                    &c.available_device_i_ds,
                    &c.must_include_device_i_ds,
                    c.allocation_size,
                )
                .map_err(status)?;
            container_responses.push(ContainerPreferredAllocationResponse {
                device_i_ds: device_ids,
            });
        }
        Ok(Response::new(PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        req: Request<AllocateRequest>,
    ) -> Result<Response<AllocateResponse>, Status> {
        let topo = self.topology();
        let container_responses = req
            .get_ref()
            .container_requests
            .iter()
            .map(|c| self.inventory.allocate(&topo, &c.devices_ids))
            .collect::<Result<_, _>>()
            .map_err(status)?;
        Ok(Response::new(AllocateResponse {
            container_responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _req: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        Ok(Response::new(PreStartContainerResponse {}))
    }
}
