//! KubeVirt's plugin hook API, v1alpha1, as the plugin hook uses it:
//! DomainHookService's messages, client and server, generated from
//! host/kube/proto/kubevirt_hooks_v1alpha1.proto ([`crate::grpc`]), and the
//! API's fixed names and values.

pub use crate::grpc::connect_unix;
pub use crate::grpc::kubevirt_hooks_v1alpha1::domain_hook_service_client::DomainHookServiceClient;
pub use crate::grpc::kubevirt_hooks_v1alpha1::domain_hook_service_server::{
    DomainHookService, DomainHookServiceServer,
};
pub use crate::grpc::kubevirt_hooks_v1alpha1::*;

/// The gRPC path of MutateDomain.
pub const MUTATE_DOMAIN_PATH: &str =
    "/kubevirt.hooks.plugins.v1alpha1.DomainHookService/MutateDomain";

/// The only `domain_type` virt-launcher sends.
pub const DOMAIN_TYPE_LIBVIRT: &str = "libvirt";
/// The directory virt-launcher shares with plugin sidecars (the pod's
/// `kubevirt-plugin-sockets` volume); a plugin's socket must be under
/// `<this>/<plugin name>/`.
pub const PLUGIN_SOCKET_DIR: &str = "/var/run/kubevirt-plugin";

/// Why virt-launcher calls MutateDomain (`SidecarContext.invocation_context`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvocationContext {
    /// The domain is about to be defined for the VM's start.
    Boot,
    /// The domain is about to be migrated away (defined by KubeVirt 1.9.0,
    /// not sent by it).
    MigrationSource,
    /// The migration target's pod prepares the domain.
    MigrationTarget,
}

impl InvocationContext {
    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Boot => "Boot",
            Self::MigrationSource => "MigrationSource",
            Self::MigrationTarget => "MigrationTarget",
        }
    }

    /// The context named `s`, if it is one KubeVirt defines.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Boot, Self::MigrationSource, Self::MigrationTarget]
            .into_iter()
            .find(|c| c.as_str() == s)
    }
}
