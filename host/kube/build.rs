//! Build script of p2p-host-kube: the gRPC code of the Kubernetes and
//! KubeVirt APIs vp2p speaks, generated from vp2p's own .proto files in
//! proto/ by protox (a protobuf compiler in Rust: no protoc is needed) and
//! tonic-build.

use std::path::PathBuf;

use prost::Message;

/// The .proto files under proto/, one per API; adding an API is one line here.
const PROTOS: &[&str] = &[
    "kubelet_deviceplugin_v1beta1.proto",
    "kubevirt_hooks_v1alpha1.proto",
    "kubelet_pluginregistration_v1.proto",
    "kubelet_dra_v1.proto",
    "kubelet_dra_v1beta1.proto",
    "kubelet_dra_health_v1.proto",
];

/// The file descriptor set of every file in [`PROTOS`], in OUT_DIR
/// (`p2p_host_kube::grpc::FILE_DESCRIPTOR_SET`), so tests can read what was built.
const DESCRIPTOR_SET: &str = "vp2p-grpc-descriptors.bin";

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("proto");
    for p in PROTOS {
        println!("cargo:rerun-if-changed={}", dir.join(p).display());
    }
    let fds = match protox::compile(PROTOS, [&dir]) {
        Ok(fds) => fds,
        Err(e) => panic!("compiling {}: {e:?}", dir.display()),
    };
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    std::fs::write(out.join(DESCRIPTOR_SET), fds.encode_to_vec())
        .unwrap_or_else(|e| panic!("writing {DESCRIPTOR_SET}: {e}"));
    tonic_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)
        .unwrap_or_else(|e| panic!("generating the gRPC code: {e}"));
}
