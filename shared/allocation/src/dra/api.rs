//! The subset of Kubernetes' `resource.k8s.io/v1` ResourceSlice that the vp2p
//! DRA driver publishes, as serde types of our own (field names and JSON
//! shape from k8s.io/api resource/v1 types.go, kubernetes/api commit
//! 426b1b9979354bee48c10e727c46eb9b5a7bbc95), and the API's limits on it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `apiVersion` of every object here.
pub const API_VERSION: &str = "resource.k8s.io/v1";

/// Devices one ResourceSlice may hold (`ResourceSliceMaxDevices`; 64 when a
/// device has taints or consumes counters, which ours never do).
pub const MAX_DEVICES_PER_SLICE: usize = 128;

/// Attributes plus capacities one device may carry
/// (`ResourceSliceMaxAttributesAndCapacitiesPerDevice`).
pub const MAX_ATTRIBUTES_PER_DEVICE: usize = 32;

/// Longest driver name (`DriverNameMaxLength`, a DNS subdomain).
pub const MAX_DRIVER_NAME: usize = 63;

/// Longest domain of a qualified attribute name (`DeviceMaxDomainLength`).
pub const MAX_DOMAIN: usize = 63;

/// Longest identifier (C identifier) of an attribute name (`DeviceMaxIDLength`).
pub const MAX_ID: usize = 32;

/// Longest string or version attribute value (`DeviceAttributeMaxValueLength`).
pub const MAX_VALUE: usize = 64;

/// Longest pool name and object name (`PoolNameMaxLength`, a DNS subdomain).
pub const MAX_POOL_NAME: usize = 253;

/// Longest device name (a DNS label).
pub const MAX_DEVICE_NAME: usize = 63;

/// One ResourceSlice: some or all devices of one pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceSlice {
    /// `resource.k8s.io/v1`.
    pub api_version: String,
    /// `ResourceSlice`.
    pub kind: String,
    /// Its name (unique in the cluster).
    pub metadata: ObjectMeta,
    /// What the driver publishes.
    pub spec: ResourceSliceSpec,
}

/// The part of object metadata the driver sets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ObjectMeta {
    /// Object name, a DNS subdomain.
    pub name: String,
}

/// `ResourceSliceSpec`: the driver, the pool, the node, the devices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceSliceSpec {
    /// The DRA driver's name (a DNS subdomain, at most 63 characters).
    pub driver: String,
    /// The pool this slice belongs to.
    pub pool: ResourcePool,
    /// The node whose devices these are (node-local pool).
    pub node_name: String,
    /// Some or all devices of the pool, at most 128.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<Device>,
}

/// `ResourcePool`: which pool, at which generation, in how many slices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourcePool {
    /// Pool name: the node's name (one pool per node).
    pub name: String,
    /// Bumped by the driver whenever a device of the pool changes.
    pub generation: i64,
    /// Slices the pool has at this generation (greater than zero).
    pub resource_slice_count: i64,
}

/// One device and its attributes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Device {
    /// Unique in the pool, a DNS label (derived from the PCI address).
    pub name: String,
    /// Qualified attribute name (`domain/id`, or `id` in the driver's domain) to value.
    pub attributes: BTreeMap<String, DeviceAttribute>,
}

/// `DeviceAttribute`: exactly one typed value.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum DeviceAttribute {
    /// An integer (`{"int": 3}`).
    Int(i64),
    /// A boolean (`{"bool": true}`).
    Bool(bool),
    /// A string of at most 64 characters (`{"string": "..."}`).
    String(String),
    /// A semantic version of at most 64 characters (`{"version": "1.2.3"}`).
    Version(String),
}

impl DeviceAttribute {
    /// The string value, if this is a string attribute.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            DeviceAttribute::String(s) => Some(s),
            _ => None,
        }
    }

    /// The integer value, if this is an integer attribute.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            DeviceAttribute::Int(i) => Some(*i),
            _ => None,
        }
    }
}

impl Device {
    /// The attribute `name` (fully qualified, `domain/id`); an unqualified
    /// name of the device stands for `driver/id`, as the API defines.
    pub fn attribute(&self, driver: &str, name: &str) -> Option<&DeviceAttribute> {
        if let Some(v) = self.attributes.get(name) {
            return Some(v);
        }
        let (domain, id) = name.split_once('/')?;
        if domain == driver {
            self.attributes.get(id)
        } else {
            None
        }
    }
}
