//! The two v1beta1 services, Registration (the kubelet's) and DevicePlugin
//! (the plugin's), written by hand on tonic's generic client and server: a
//! trait per service, a server that routes `/v1beta1.Service/Method` to it,
//! and a client. Both sides are here so that tests can play the kubelet.

use std::convert::Infallible;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use tonic::body::BoxBody;
use tonic::codec::{ProstCodec, Streaming};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::codegen::{http, Body, BoxFuture, StdError};
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Request, Response, Status};

use super::messages::*;

/// The stream ListAndWatch answers with.
pub type ListAndWatchStream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<ListAndWatchResponse, Status>> + Send>>;

/// The kubelet's Registration service.
#[tonic::async_trait]
pub trait Registration: Send + Sync + 'static {
    /// A plugin registers a resource.
    async fn register(&self, req: Request<RegisterRequest>) -> Result<Response<Empty>, Status>;
}

/// A device plugin's service.
#[tonic::async_trait]
pub trait DevicePlugin: Send + Sync + 'static {
    /// The plugin's options.
    async fn get_device_plugin_options(
        &self,
        req: Request<Empty>,
    ) -> Result<Response<DevicePluginOptions>, Status>;
    /// The device list, then a new list whenever a device's health changes.
    async fn list_and_watch(
        &self,
        req: Request<Empty>,
    ) -> Result<Response<ListAndWatchStream>, Status>;
    /// The preferred devices for each container.
    async fn get_preferred_allocation(
        &self,
        req: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status>;
    /// What each container needs to use its devices.
    async fn allocate(
        &self,
        req: Request<AllocateRequest>,
    ) -> Result<Response<AllocateResponse>, Status>;
    /// Called before each container start when the options ask for it.
    async fn pre_start_container(
        &self,
        req: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status>;
}

/// What tonic's generated servers wrap a service in: the service behind an
/// `Arc` (cloned per connection) and the gRPC name calls are routed by.
/// Shared with the KubeVirt plugin hook's service.
macro_rules! server_wrapper {
    ($(#[$doc:meta])* $server:ident, $name:literal) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $server<T>(std::sync::Arc<T>);

        impl<T> $server<T> {
            /// Wraps the service.
            pub fn new(inner: T) -> Self {
                Self(std::sync::Arc::new(inner))
            }
        }

        impl<T> Clone for $server<T> {
            fn clone(&self) -> Self {
                Self(std::sync::Arc::clone(&self.0))
            }
        }

        impl<T> tonic::server::NamedService for $server<T> {
            const NAME: &'static str = $name;
        }
    };
}
pub(crate) use server_wrapper;

/// Answers one unary call with `f`.
pub(crate) fn unary<B, M1, M2, F, Fut>(
    req: http::Request<B>,
    f: F,
) -> BoxFuture<http::Response<BoxBody>, Infallible>
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
    M1: prost::Message + Default + Send + 'static,
    M2: prost::Message + Send + 'static,
    F: FnMut(Request<M1>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Response<M2>, Status>> + Send + 'static,
{
    Box::pin(async move {
        let mut grpc = tonic::server::Grpc::new(ProstCodec::<M2, M1>::default());
        Ok(grpc.unary(tower::service_fn(f), req).await)
    })
}

/// The answer to a path no method has.
pub(crate) fn unimplemented(path: &str) -> BoxFuture<http::Response<BoxBody>, Infallible> {
    let status = Status::unimplemented(format!("no method {path}"));
    Box::pin(async move { Ok(status.into_http()) })
}

server_wrapper!(
    /// Serves a [`Registration`] (what the kubelet listens with on kubelet.sock).
    RegistrationServer,
    "v1beta1.Registration"
);

impl<T, B> tower::Service<http::Request<B>> for RegistrationServer<T>
where
    T: Registration,
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
        match req.uri().path() {
            "/v1beta1.Registration/Register" => unary(req, move |r| {
                let inner = Arc::clone(&inner);
                async move { inner.register(r).await }
            }),
            other => unimplemented(other),
        }
    }
}

server_wrapper!(
    /// Serves a [`DevicePlugin`] (what the plugin listens with on its socket).
    DevicePluginServer,
    "v1beta1.DevicePlugin"
);

impl<T, B> tower::Service<http::Request<B>> for DevicePluginServer<T>
where
    T: DevicePlugin,
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
        match req.uri().path() {
            "/v1beta1.DevicePlugin/GetDevicePluginOptions" => unary(req, move |r| {
                let inner = Arc::clone(&inner);
                async move { inner.get_device_plugin_options(r).await }
            }),
            "/v1beta1.DevicePlugin/GetPreferredAllocation" => unary(req, move |r| {
                let inner = Arc::clone(&inner);
                async move { inner.get_preferred_allocation(r).await }
            }),
            "/v1beta1.DevicePlugin/Allocate" => unary(req, move |r| {
                let inner = Arc::clone(&inner);
                async move { inner.allocate(r).await }
            }),
            "/v1beta1.DevicePlugin/PreStartContainer" => unary(req, move |r| {
                let inner = Arc::clone(&inner);
                async move { inner.pre_start_container(r).await }
            }),
            "/v1beta1.DevicePlugin/ListAndWatch" => Box::pin(async move {
                let mut grpc =
                    tonic::server::Grpc::new(ProstCodec::<ListAndWatchResponse, Empty>::default());
                let svc = tower::service_fn(move |r| {
                    let inner = Arc::clone(&inner);
                    async move { inner.list_and_watch(r).await }
                });
                Ok(grpc.server_streaming(svc, req).await)
            }),
            other => unimplemented(other),
        }
    }
}

/// A channel to a gRPC server on a unix socket.
pub async fn connect_unix(path: &Path) -> Result<Channel, tonic::transport::Error> {
    let path: PathBuf = path.to_path_buf();
    // The URI is required by the API and unused: the connector dials the socket.
    Endpoint::from_static("http://[::1]:1")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
}

/// A unary call on `grpc`.
async fn call<M1, M2>(
    grpc: &mut tonic::client::Grpc<Channel>,
    path: &'static str,
    msg: M1,
) -> Result<Response<M2>, Status>
where
    M1: prost::Message + Send + Sync + 'static,
    M2: prost::Message + Default + Send + Sync + 'static,
{
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(format!("not ready: {e}")))?;
    grpc.unary(
        Request::new(msg),
        PathAndQuery::from_static(path),
        ProstCodec::default(),
    )
    .await
}

/// A client of the kubelet's Registration service.
#[derive(Debug, Clone)]
pub struct RegistrationClient(tonic::client::Grpc<Channel>);

impl RegistrationClient {
    /// A client on `channel`.
    pub fn new(channel: Channel) -> Self {
        Self(tonic::client::Grpc::new(channel))
    }

    /// Registers a plugin.
    pub async fn register(&mut self, req: RegisterRequest) -> Result<Response<Empty>, Status> {
        call(&mut self.0, "/v1beta1.Registration/Register", req).await
    }
}

/// A client of a device plugin (what the kubelet dials the plugin with).
#[derive(Debug, Clone)]
pub struct DevicePluginClient(tonic::client::Grpc<Channel>);

impl DevicePluginClient {
    /// A client on `channel`.
    pub fn new(channel: Channel) -> Self {
        Self(tonic::client::Grpc::new(channel))
    }

    /// GetDevicePluginOptions.
    pub async fn get_device_plugin_options(
        &mut self,
    ) -> Result<Response<DevicePluginOptions>, Status> {
        call(
            &mut self.0,
            "/v1beta1.DevicePlugin/GetDevicePluginOptions",
            Empty {},
        )
        .await
    }

    /// ListAndWatch: the stream of device lists.
    pub async fn list_and_watch(
        &mut self,
    ) -> Result<Response<Streaming<ListAndWatchResponse>>, Status> {
        self.0
            .ready()
            .await
            .map_err(|e| Status::unavailable(format!("not ready: {e}")))?;
        self.0
            .server_streaming(
                Request::new(Empty {}),
                PathAndQuery::from_static("/v1beta1.DevicePlugin/ListAndWatch"),
                ProstCodec::default(),
            )
            .await
    }

    /// GetPreferredAllocation.
    pub async fn get_preferred_allocation(
        &mut self,
        req: PreferredAllocationRequest,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        call(
            &mut self.0,
            "/v1beta1.DevicePlugin/GetPreferredAllocation",
            req,
        )
        .await
    }

    /// Allocate.
    pub async fn allocate(
        &mut self,
        req: AllocateRequest,
    ) -> Result<Response<AllocateResponse>, Status> {
        call(&mut self.0, "/v1beta1.DevicePlugin/Allocate", req).await
    }
}
