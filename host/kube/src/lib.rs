//! p2p-host-kube: vp2p's Kubernetes edge.
//!
//! The kubelet's device plugin ([`device_plugin`]), KubeVirt's plugin hook
//! ([`kubevirt_plugin`]) and the DRA driver ([`dra_driver`], on the generic
//! DRA kubelet plugin of [`kubelet_plugin`]), with the gRPC code they share
//! ([`grpc`]). Each starts its own async runtime when run, so
//! the `p2p-host` commands that need no cluster start none; this crate is
//! linked by the `p2p-host` binary alone. Host I/O it does not own (the sysfs
//! scan, the libvirt domain) reaches it through the traits of p2p-topology
//! ([`p2p_topology::TopologyReader`]) and of [`kubevirt_plugin`].

pub mod device_plugin;
pub mod dra_driver;
pub mod extender;
pub mod grpc;
pub mod kubelet_plugin;
pub mod kubevirt_plugin;
