//! The v1beta1 messages (`v1beta1.proto` beside this file), written by hand
//! with prost's derive: same field numbers and types, so the wire format is
//! the kubelet's.

use std::collections::HashMap;

/// Options the plugin tells the kubelet at registration and on request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DevicePluginOptions {
    /// The kubelet must call PreStartContainer before each container start.
    #[prost(bool, tag = "1")]
    pub pre_start_required: bool,
    /// The plugin answers GetPreferredAllocation.
    #[prost(bool, tag = "2")]
    pub get_preferred_allocation_available: bool,
}

/// What a plugin sends to the kubelet's Registration service.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RegisterRequest {
    /// API version of the plugin (`v1beta1`).
    #[prost(string, tag = "1")]
    pub version: String,
    /// Name of the plugin's unix socket, relative to the device-plugins directory.
    #[prost(string, tag = "2")]
    pub endpoint: String,
    /// The extended resource the plugin offers (`vendor-domain/resourcetype`).
    #[prost(string, tag = "3")]
    pub resource_name: String,
    /// The plugin's options.
    #[prost(message, optional, tag = "4")]
    pub options: Option<DevicePluginOptions>,
}

/// The empty message.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

/// One ListAndWatch update: the whole device list.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListAndWatchResponse {
    /// Every device of the resource with its health.
    #[prost(message, repeated, tag = "1")]
    pub devices: Vec<Device>,
}

/// NUMA affinity of a device.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TopologyInfo {
    /// The NUMA nodes the device is near.
    #[prost(message, repeated, tag = "1")]
    pub nodes: Vec<NumaNode>,
}

/// A NUMA node.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NumaNode {
    /// The node's number.
    #[prost(int64, tag = "1")]
    pub id: i64,
}

/// One device of the resource.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Device {
    /// The device's id (vp2p: its PCI address).
    #[prost(string, tag = "1")]
    pub id: String,
    /// `Healthy` or `Unhealthy`.
    #[prost(string, tag = "2")]
    pub health: String,
    /// NUMA affinity, when known.
    #[prost(message, optional, tag = "3")]
    pub topology: Option<TopologyInfo>,
}

/// PreStartContainer's request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PreStartContainerRequest {
    /// The devices of the container.
    #[prost(string, repeated, tag = "1")]
    pub devices_ids: Vec<String>,
}

/// PreStartContainer's answer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PreStartContainerResponse {}

/// GetPreferredAllocation's request: one entry per container.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PreferredAllocationRequest {
    /// The containers' requests.
    #[prost(message, repeated, tag = "1")]
    pub container_requests: Vec<ContainerPreferredAllocationRequest>,
}

/// One container's preferred-allocation request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerPreferredAllocationRequest {
    /// Devices free to choose from.
    #[prost(string, repeated, tag = "1")]
    pub available_device_ids: Vec<String>,
    /// Devices the answer must hold.
    #[prost(string, repeated, tag = "2")]
    pub must_include_device_ids: Vec<String>,
    /// How many devices to choose.
    #[prost(int32, tag = "3")]
    pub allocation_size: i32,
}

/// GetPreferredAllocation's answer: one entry per container.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PreferredAllocationResponse {
    /// The containers' answers.
    #[prost(message, repeated, tag = "1")]
    pub container_responses: Vec<ContainerPreferredAllocationResponse>,
}

/// One container's preferred devices.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerPreferredAllocationResponse {
    /// The chosen device ids.
    #[prost(string, repeated, tag = "1")]
    pub device_ids: Vec<String>,
}

/// Allocate's request: one entry per container.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AllocateRequest {
    /// The containers' requests.
    #[prost(message, repeated, tag = "1")]
    pub container_requests: Vec<ContainerAllocateRequest>,
}

/// One container's allocation.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerAllocateRequest {
    /// The devices given to the container.
    #[prost(string, repeated, tag = "1")]
    pub devices_ids: Vec<String>,
}

/// A CDI device name.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CdiDevice {
    /// Fully qualified CDI device name.
    #[prost(string, tag = "1")]
    pub name: String,
}

/// Allocate's answer: one entry per container.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AllocateResponse {
    /// The containers' answers.
    #[prost(message, repeated, tag = "1")]
    pub container_responses: Vec<ContainerAllocateResponse>,
}

/// What the container runtime gives one container.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerAllocateResponse {
    /// Environment variables.
    #[prost(map = "string, string", tag = "1")]
    pub envs: HashMap<String, String>,
    /// Mounts.
    #[prost(message, repeated, tag = "2")]
    pub mounts: Vec<Mount>,
    /// Device nodes.
    #[prost(message, repeated, tag = "3")]
    pub devices: Vec<DeviceSpec>,
    /// Annotations for the container runtime.
    #[prost(map = "string, string", tag = "4")]
    pub annotations: HashMap<String, String>,
    /// CDI devices.
    #[prost(message, repeated, tag = "5")]
    pub cdi_devices: Vec<CdiDevice>,
}

/// A mount into the container.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Mount {
    /// Path in the container.
    #[prost(string, tag = "1")]
    pub container_path: String,
    /// Path on the host.
    #[prost(string, tag = "2")]
    pub host_path: String,
    /// Mounted read-only.
    #[prost(bool, tag = "3")]
    pub read_only: bool,
}

/// A device node for the container.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DeviceSpec {
    /// Path in the container.
    #[prost(string, tag = "1")]
    pub container_path: String,
    /// Path on the host.
    #[prost(string, tag = "2")]
    pub host_path: String,
    /// cgroup permissions: `r`, `w`, `m` combined.
    #[prost(string, tag = "3")]
    pub permissions: String,
}
