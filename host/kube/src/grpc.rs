//! The gRPC APIs vp2p speaks, generated at build time (build.rs: protox and
//! tonic-build) from vp2p's own .proto files in host/kube/proto, each of which
//! cites the published API its facts come from: messages (prost), a client
//! and a server per service (tonic). The device plugin and the KubeVirt plugin
//! hook use them through their `api` modules; tests and fuzz targets reach
//! the same code here. [`uds_authority`] is the shim that lets the kubelet's
//! plugin watcher, which dials a socket by its bare path, reach a server.

use std::path::{Path, PathBuf};

pub mod uds_authority;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// The serialized `google.protobuf.FileDescriptorSet` of host/kube/proto, as protox
/// compiled it for this build: what tests compare with the published APIs.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/vp2p-grpc-descriptors.bin"));

/// The kubelet's device plugin API, v1beta1 (host/kube/proto/kubelet_deviceplugin_v1beta1.proto).
// Generated code: its items carry the .proto's comments, tonic's own helpers none.
#[allow(missing_docs, clippy::all)]
pub mod kubelet_v1beta1 {
    tonic::include_proto!("v1beta1");
}

/// KubeVirt's plugin hook API, v1alpha1: DomainHookService
/// (host/kube/proto/kubevirt_hooks_v1alpha1.proto).
// Generated code: its items carry the .proto's comments, tonic's own helpers none.
#[allow(missing_docs, clippy::all)]
pub mod kubevirt_hooks_v1alpha1 {
    tonic::include_proto!("kubevirt.hooks.plugins.v1alpha1");
}

/// The kubelet's plugin registration API, v1: the plugin watcher's protocol
/// (host/kube/proto/kubelet_pluginregistration_v1.proto).
// Generated code: its items carry the .proto's comments, tonic's own helpers none.
#[allow(missing_docs, clippy::all)]
pub mod kubelet_pluginregistration_v1 {
    tonic::include_proto!("pluginregistration");
}

/// The kubelet's DRA plugin API, v1 (host/kube/proto/kubelet_dra_v1.proto).
// Generated code: its items carry the .proto's comments, tonic's own helpers none.
#[allow(missing_docs, clippy::all)]
pub mod kubelet_dra_v1 {
    tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1");
}

/// The kubelet's DRA plugin API, v1beta1 (host/kube/proto/kubelet_dra_v1beta1.proto):
/// what kubelets before 1.34 call.
// Generated code: its items carry the .proto's comments, tonic's own helpers none.
#[allow(missing_docs, clippy::all)]
pub mod kubelet_dra_v1beta1 {
    tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1beta1");
}

/// The kubelet's DRA resource health API, v1 (KEP-4680;
/// host/kube/proto/kubelet_dra_health_v1.proto): a driver's stream of its
/// devices' health.
// Generated code: its items carry the .proto's comments, tonic's own helpers none.
#[allow(missing_docs, clippy::all)]
pub mod kubelet_dra_health_v1 {
    tonic::include_proto!("v1");
}

/// A channel to a gRPC server on a unix socket (the kubelet's, a device
/// plugin's, a plugin hook's).
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

/// The most bytes of a refusal's message. A gRPC status message travels in a
/// response header (`grpc-message`), and clients accept about 16 KiB of
/// headers in all (grpc-go's and grpcio's default): a longer message turns
/// the refusal into RESOURCE_EXHAUSTED on the client's side.
pub const MAX_MESSAGE: usize = 1024;

/// The most bytes of one piece of the caller's input a message quotes.
pub const MAX_QUOTE: usize = 64;

/// At most `max` bytes of `s`, cut on a character boundary.
pub(crate) fn head(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `s` (the caller's input) quoted for a message: whole when it is at most
/// [`MAX_QUOTE`] bytes, else its first bytes and its length, so that an
/// attacker's megabyte is not echoed back.
pub fn quote(s: &str) -> String {
    if s.len() <= MAX_QUOTE {
        format!("{s:?}")
    } else {
        format!("{:?}... ({} bytes)", head(s, MAX_QUOTE), s.len())
    }
}

/// `msg` cut to at most [`MAX_MESSAGE`] bytes (marked when cut): what a
/// status message or a response header may carry.
pub fn bounded(msg: &str) -> String {
    if msg.len() <= MAX_MESSAGE {
        return msg.to_string();
    }
    let marker = format!("... ({} bytes cut)", msg.len());
    let mut out = head(msg, MAX_MESSAGE - marker.len()).to_string();
    out.push_str(&marker);
    out
}

/// A refusal with `code` and `msg` bounded as [`bounded`] says.
pub fn refusal(code: tonic::Code, msg: &str) -> tonic::Status {
    tonic::Status::new(code, bounded(msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_input_is_quoted_whole() {
        assert_eq!(quote("0000:99:00.0"), "\"0000:99:00.0\"");
        assert_eq!(quote(&"a".repeat(MAX_QUOTE)).len(), MAX_QUOTE + 2);
    }

    #[test]
    fn long_input_is_quoted_by_its_head_and_length() {
        let id = "é".repeat(600_000); // 1.2 MB, two bytes a character
        let q = quote(&id);
        assert_eq!(q, format!("\"{}\"... (1200000 bytes)", "é".repeat(32)));
    }

    #[test]
    fn messages_are_bounded_on_a_character_boundary() {
        assert_eq!(bounded("short"), "short");
        let m = bounded(&"é".repeat(10_000));
        assert!(m.len() <= MAX_MESSAGE, "{}", m.len());
        assert!(m.ends_with("... (20000 bytes cut)"), "{m}");
        assert!(m.starts_with("éé"));
        let m = refusal(tonic::Code::InvalidArgument, &"x".repeat(1 << 20));
        assert!(m.message().len() <= MAX_MESSAGE);
        assert_eq!(m.code(), tonic::Code::InvalidArgument);
    }
}
