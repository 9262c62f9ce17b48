//! The kubelet's device plugin API, v1beta1 (k8s.io/kubelet,
//! `pkg/apis/deviceplugin/v1beta1/api.proto`, copied beside this file as
//! `v1beta1.proto`): messages and both services, without protoc.

mod messages;
mod service;

pub use messages::*;
pub use service::*;

/// The API version a plugin registers with.
pub const VERSION: &str = "v1beta1";
/// A device that can be allocated.
pub const HEALTHY: &str = "Healthy";
/// A device that cannot be allocated.
pub const UNHEALTHY: &str = "Unhealthy";
/// The kubelet's registration socket, in the device-plugins directory.
pub const KUBELET_SOCKET: &str = "kubelet.sock";
/// The kubelet's device-plugins directory.
pub const DEVICE_PLUGIN_PATH: &str = "/var/lib/kubelet/device-plugins";
