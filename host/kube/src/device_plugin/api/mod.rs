//! The kubelet's device plugin API, v1beta1, as the device plugin uses it:
//! the messages and both services (the kubelet's Registration, the plugin's
//! DevicePlugin), client and server, generated from
//! host/kube/proto/kubelet_deviceplugin_v1beta1.proto ([`crate::grpc`]), and the
//! API's fixed names.

pub use crate::grpc::connect_unix;
pub use crate::grpc::kubelet_v1beta1::device_plugin_client::DevicePluginClient;
pub use crate::grpc::kubelet_v1beta1::device_plugin_server::{DevicePlugin, DevicePluginServer};
pub use crate::grpc::kubelet_v1beta1::registration_client::RegistrationClient;
pub use crate::grpc::kubelet_v1beta1::registration_server::{Registration, RegistrationServer};
pub use crate::grpc::kubelet_v1beta1::*;

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
