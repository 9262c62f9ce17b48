//! The v1alpha1 messages of DomainHookService (`v1alpha1.proto` beside this
//! file), written by hand with prost's derive: same field numbers and types,
//! so the wire format is virt-launcher's.

/// Why virt-launcher calls the hook.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SidecarContext {
    /// `Boot`, `MigrationSource` or `MigrationTarget` (field 2 is reserved).
    #[prost(string, tag = "1")]
    pub invocation_context: String,
}

/// MutateDomain's request: the domain virt-launcher is about to use.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MutateDomainRequest {
    /// The domain's format; virt-launcher sends `libvirt`.
    #[prost(string, tag = "1")]
    pub domain_type: String,
    /// The libvirt domain XML (libvirtxml's marshalling).
    #[prost(bytes = "vec", tag = "2")]
    pub domain: Vec<u8>,
    /// The VirtualMachineInstance as JSON.
    #[prost(bytes = "vec", tag = "3")]
    pub vmi: Vec<u8>,
    /// Why the hook is called.
    #[prost(message, optional, tag = "4")]
    pub sidecar_context: Option<SidecarContext>,
}

/// MutateDomain's answer: the domain to use instead.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MutateDomainResponse {
    /// The libvirt domain XML, whole (not a patch).
    #[prost(bytes = "vec", tag = "1")]
    pub domain: Vec<u8>,
}
