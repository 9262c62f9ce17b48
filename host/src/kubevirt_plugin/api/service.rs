//! DomainHookService (the plugin sidecar's service, virt-launcher its
//! client), written by hand on tonic's generic client and server as
//! `device_plugin::api` writes the kubelet's: a trait, a server that routes
//! `/kubevirt.hooks.plugins.v1alpha1.DomainHookService/MutateDomain` to it,
//! and a client, so that tests can play virt-launcher.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::body::BoxBody;
use tonic::codec::ProstCodec;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::codegen::{http, Body, BoxFuture, StdError};
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use super::messages::*;

/// A channel to a gRPC server on a unix socket (the kubelet API's helper:
/// the transport is the same).
pub use crate::device_plugin::api::connect_unix;
use crate::device_plugin::api::{unary, unimplemented};

/// The gRPC path of MutateDomain.
pub const MUTATE_DOMAIN_PATH: &str =
    "/kubevirt.hooks.plugins.v1alpha1.DomainHookService/MutateDomain";

/// A plugin's domain hook.
#[tonic::async_trait]
pub trait DomainHookService: Send + Sync + 'static {
    /// The domain virt-launcher should use instead of the one it sends.
    async fn mutate_domain(
        &self,
        req: Request<MutateDomainRequest>,
    ) -> Result<Response<MutateDomainResponse>, Status>;
}

crate::device_plugin::api::server_wrapper!(
    /// Serves a [`DomainHookService`] (what the sidecar listens with).
    DomainHookServiceServer,
    "kubevirt.hooks.plugins.v1alpha1.DomainHookService"
);

impl<T, B> tower::Service<http::Request<B>> for DomainHookServiceServer<T>
where
    T: DomainHookService,
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
        let inner = Arc::clone(&self.0);
        if req.uri().path() != MUTATE_DOMAIN_PATH {
            return unimplemented(req.uri().path());
        }
        unary(req, move |r| {
            let inner = Arc::clone(&inner);
            async move { inner.mutate_domain(r).await }
        })
    }
}

/// A client of a plugin's domain hook (what virt-launcher dials it with).
#[derive(Debug, Clone)]
pub struct DomainHookServiceClient(tonic::client::Grpc<Channel>);

impl DomainHookServiceClient {
    /// A client on `channel`.
    pub fn new(channel: Channel) -> Self {
        Self(tonic::client::Grpc::new(channel))
    }

    /// MutateDomain; the answer with its metadata.
    pub async fn mutate_domain(
        &mut self,
        req: MutateDomainRequest,
    ) -> Result<Response<MutateDomainResponse>, Status> {
        self.0
            .ready()
            .await
            .map_err(|e| Status::unavailable(format!("not ready: {e}")))?;
        self.0
            .unary(
                Request::new(req),
                PathAndQuery::from_static(MUTATE_DOMAIN_PATH),
                ProstCodec::default(),
            )
            .await
    }
}
