//! gRPC calls whose messages are plain bytes, over a unix socket: tonic's
//! generic client and server (HTTP/2 and gRPC's framing) with a codec that
//! passes bytes through, so that what goes on the wire is what the test
//! encoded by hand ([`super::protobuf`]), and what comes back is the
//! product's bytes, undecoded.

use std::convert::Infallible;
use std::future::Future;
use std::path::{Path, PathBuf};

use bytes::{Buf, BufMut};
use hyper_util::rt::TokioIo;
use tonic::body::BoxBody;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder, Streaming};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::codegen::{http, Body, BoxFuture, StdError};
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Request, Response, Status};

/// A codec whose messages are the bytes of one gRPC frame.
#[derive(Debug, Default, Clone, Copy)]
pub struct Bytes;

impl Encoder for Bytes {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Bytes {
    type Item = Vec<u8>;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let mut v = vec![0; src.remaining()];
        src.copy_to_slice(&mut v);
        Ok(Some(v))
    }
}

impl Codec for Bytes {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Bytes;
    type Decoder = Bytes;

    fn encoder(&mut self) -> Bytes {
        Bytes
    }

    fn decoder(&mut self) -> Bytes {
        Bytes
    }
}

/// A channel to the gRPC server on the unix socket `path`. A refused or
/// missing socket is tried again for up to 5 s, as the kubelet's gRPC
/// client reconnects with backoff; each retry is said on standard error, so
/// a server that went away still fails the caller, after the 5 s.
pub async fn channel(path: &Path) -> Channel {
    let started = std::time::Instant::now();
    loop {
        let p: PathBuf = path.to_path_buf();
        let tried = Endpoint::from_static("http://[::1]:1")
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let p = p.clone();
                async move {
                    let s = tokio::net::UnixStream::connect(p).await?;
                    Ok::<_, std::io::Error>(TokioIo::new(s))
                }
            }))
            .await;
        match tried {
            Ok(c) => return c,
            Err(e) if started.elapsed() < std::time::Duration::from_secs(5) => {
                eprintln!("{}: {e:?}; trying again", path.display());
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(e) => panic!("connecting to the socket {}: {e:?}", path.display()),
        }
    }
}

/// A client sending byte messages.
#[derive(Debug, Clone)]
pub struct Client(tonic::client::Grpc<Channel>);

impl Client {
    /// A client on the server at the unix socket `path`.
    pub async fn connect(path: &Path) -> Self {
        Self(tonic::client::Grpc::new(channel(path).await))
    }

    /// Calls the unary method `path` with `body`; the response's bytes.
    pub async fn unary(&mut self, path: &str, body: Vec<u8>) -> Result<Response<Vec<u8>>, Status> {
        self.unary_within(path, body, None).await
    }

    /// [`Client::unary`] with a deadline, sent as gRPC sends a context's
    /// (the `grpc-timeout` header), as the kubelet calls a DRA driver.
    pub async fn unary_within(
        &mut self,
        path: &str,
        body: Vec<u8>,
        timeout: Option<std::time::Duration>,
    ) -> Result<Response<Vec<u8>>, Status> {
        self.0.ready().await.expect("channel ready");
        let path = PathAndQuery::try_from(path.to_string()).expect("a method path");
        let mut req = Request::new(body);
        if let Some(t) = timeout {
            req.set_timeout(t);
        }
        self.0.unary(req, path, Bytes).await
    }

    /// Calls the server-streaming method `path` with `body`; the stream of
    /// responses' bytes.
    pub async fn server_streaming(
        &mut self,
        path: &str,
        body: Vec<u8>,
    ) -> Result<Streaming<Vec<u8>>, Status> {
        self.0.ready().await.expect("channel ready");
        let path = PathAndQuery::try_from(path.to_string()).expect("a method path");
        Ok(self
            .0
            .server_streaming(Request::new(body), path, Bytes)
            .await?
            .into_inner())
    }
}

/// Answers one unary call of a server with `f`, messages as bytes: what a
/// stand-in's `tower::Service::call` returns for a method it serves.
pub fn serve_unary<B, F, Fut>(
    req: http::Request<B>,
    f: F,
) -> BoxFuture<http::Response<BoxBody>, Infallible>
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
    F: FnMut(Request<Vec<u8>>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Response<Vec<u8>>, Status>> + Send + 'static,
{
    Box::pin(async move {
        let mut grpc = tonic::server::Grpc::new(Bytes);
        Ok(grpc.unary(tower::service_fn(f), req).await)
    })
}

/// The answer to a path a stand-in does not serve.
pub fn unimplemented(path: &str) -> BoxFuture<http::Response<BoxBody>, Infallible> {
    let status = Status::unimplemented(format!("no method {path}"));
    Box::pin(async move { Ok(status.into_http()) })
}
