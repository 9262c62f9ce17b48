//! The published facts of the two gRPC APIs vp2p speaks, transcribed by hand
//! from the upstream API files (not from vp2p's .proto files):
//!
//! - the kubelet's device plugin API v1beta1:
//!   <https://github.com/kubernetes/kubelet/blob/v0.36.3/pkg/apis/deviceplugin/v1beta1/api.proto>
//!   (tag v0.36.3, commit bbb4f8f0907ace5f317f33e06413a55a5f4636f6);
//! - the kubelet's plugin registration API v1 (the plugin watcher's protocol):
//!   <https://github.com/kubernetes/kubelet/blob/v0.36.3/pkg/apis/pluginregistration/v1/api.proto>;
//! - the kubelet's DRA plugin API v1 and v1beta1:
//!   <https://github.com/kubernetes/kubelet/blob/v0.36.3/pkg/apis/dra/v1/api.proto>,
//!   <https://github.com/kubernetes/kubelet/blob/v0.36.3/pkg/apis/dra/v1beta1/api.proto>
//!   (both of tag v0.36.3 too);
//! - the kubelet's DRA resource health API v1 (KEP-4680):
//!   <https://github.com/kubernetes/kubelet/blob/v0.37.2/pkg/apis/dra-health/v1/api.proto>
//!   (tag v0.37.2);
//! - KubeVirt's plugin hook API v1alpha1, DomainHookService (the service vp2p
//!   serves; the file's NodeHookService is not vp2p's):
//!   <https://github.com/kubevirt/kubevirt/blob/v1.9.0/pkg/hooks/plugins/v1alpha1/api.proto>
//!   (tag v1.9.0, commit 79d34c1762169e5b0370ec491cef5ca12e6b504c).
//!
//! A method's path is `/<package>.<Service>/<Method>` (gRPC over HTTP/2,
//! <https://github.com/grpc/grpc/blob/v1.68.0/doc/PROTOCOL-HTTP2.md>, "Path").

/// A field's protobuf type, as the .proto writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    /// `string`.
    String,
    /// `bytes`.
    Bytes,
    /// `bool`.
    Bool,
    /// `int32`.
    Int32,
    /// `int64`.
    Int64,
    /// A message of the same package, by its name.
    Message(&'static str),
    /// `map<string, string>`.
    MapStringString,
    /// `map<string, M>`, M a message of the same package, by its name.
    MapStringMessage(&'static str),
    /// An enum of the same package, by its name.
    Enum(&'static str),
}

impl Type {
    /// The wire type a value of this type is encoded with
    /// (<https://protobuf.dev/programming-guides/encoding/#structure>):
    /// 0 VARINT for bool, the ints and enums, 2 LEN for strings, bytes, messages and
    /// map entries.
    pub fn wire_type(self) -> u8 {
        match self {
            Type::Bool | Type::Int32 | Type::Int64 | Type::Enum(_) => 0,
            Type::String
            | Type::Bytes
            | Type::Message(_)
            | Type::MapStringString
            | Type::MapStringMessage(_) => 2,
        }
    }
}

/// One field of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// The field's number.
    pub number: u32,
    /// The field's name, spelled as upstream spells it.
    pub name: &'static str,
    /// The field's type.
    pub ty: Type,
    /// `repeated` (maps are repeated entries on the wire).
    pub repeated: bool,
    /// proto3 `optional` (presence is tracked: a synthetic oneof).
    pub optional: bool,
}

/// One message of an API.
#[derive(Debug, Clone, Copy)]
pub struct Message {
    /// The message's name, without the package.
    pub name: &'static str,
    /// Every field.
    pub fields: &'static [Field],
    /// Field numbers the message reserves.
    pub reserved: &'static [u32],
}

/// One method of a service.
#[derive(Debug, Clone, Copy)]
pub struct Method {
    /// The full path a call is sent to.
    pub path: &'static str,
    /// The request message's name.
    pub input: &'static str,
    /// The response message's name.
    pub output: &'static str,
    /// The server answers with a stream of responses.
    pub server_streaming: bool,
}

/// One API: a package, its services' methods, its messages.
#[derive(Debug, Clone, Copy)]
pub struct Api {
    /// The protobuf package.
    pub package: &'static str,
    /// The services, by name, and their methods.
    pub services: &'static [(&'static str, &'static [Method])],
    /// The messages.
    pub messages: &'static [Message],
    /// The enums, by name, and their values (name, number).
    pub enums: &'static [(&'static str, &'static [(&'static str, i32)])],
}

impl Api {
    /// The message named `name`.
    pub fn message(&self, name: &str) -> &'static Message {
        self.messages
            .iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("{}.{name} is not in the table", self.package))
    }

    /// Field `field` of message `message`.
    pub fn field(&self, message: &str, field: &str) -> Field {
        *self
            .message(message)
            .fields
            .iter()
            .find(|f| f.name == field)
            .unwrap_or_else(|| panic!("{}.{message} has no field {field}", self.package))
    }

    /// The method whose path ends with `/Service/Method`.
    pub fn method(&self, service: &str, method: &str) -> Method {
        let path = format!("/{}.{service}/{method}", self.package);
        self.services
            .iter()
            .flat_map(|(_, ms)| ms.iter())
            .find(|m| m.path == path)
            .copied()
            .unwrap_or_else(|| panic!("no method {path}"))
    }
}

const fn f(number: u32, name: &'static str, ty: Type) -> Field {
    Field {
        number,
        name,
        ty,
        repeated: false,
        optional: false,
    }
}

const fn opt(number: u32, name: &'static str, ty: Type) -> Field {
    Field {
        number,
        name,
        ty,
        repeated: false,
        optional: true,
    }
}

const fn rep(number: u32, name: &'static str, ty: Type) -> Field {
    Field {
        number,
        name,
        ty,
        repeated: true,
        optional: false,
    }
}

const fn msg(name: &'static str, fields: &'static [Field]) -> Message {
    Message {
        name,
        fields,
        reserved: &[],
    }
}

const fn unary(path: &'static str, input: &'static str, output: &'static str) -> Method {
    Method {
        path,
        input,
        output,
        server_streaming: false,
    }
}

use Type::*;

/// The kubelet's device plugin API, v1beta1 (tag v0.36.3 of k8s.io/kubelet).
pub const KUBELET_V1BETA1: Api = Api {
    package: "v1beta1",
    services: &[
        (
            "Registration",
            &[unary(
                "/v1beta1.Registration/Register",
                "RegisterRequest",
                "Empty",
            )],
        ),
        (
            "DevicePlugin",
            &[
                unary(
                    "/v1beta1.DevicePlugin/GetDevicePluginOptions",
                    "Empty",
                    "DevicePluginOptions",
                ),
                Method {
                    path: "/v1beta1.DevicePlugin/ListAndWatch",
                    input: "Empty",
                    output: "ListAndWatchResponse",
                    server_streaming: true,
                },
                unary(
                    "/v1beta1.DevicePlugin/GetPreferredAllocation",
                    "PreferredAllocationRequest",
                    "PreferredAllocationResponse",
                ),
                unary(
                    "/v1beta1.DevicePlugin/Allocate",
                    "AllocateRequest",
                    "AllocateResponse",
                ),
                unary(
                    "/v1beta1.DevicePlugin/PreStartContainer",
                    "PreStartContainerRequest",
                    "PreStartContainerResponse",
                ),
            ],
        ),
    ],
    messages: &[
        msg(
            "DevicePluginOptions",
            &[
                f(1, "pre_start_required", Bool),
                f(2, "get_preferred_allocation_available", Bool),
            ],
        ),
        msg(
            "RegisterRequest",
            &[
                f(1, "version", String),
                f(2, "endpoint", String),
                f(3, "resource_name", String),
                f(4, "options", Message("DevicePluginOptions")),
            ],
        ),
        msg("Empty", &[]),
        msg(
            "ListAndWatchResponse",
            &[rep(1, "devices", Message("Device"))],
        ),
        msg("TopologyInfo", &[rep(1, "nodes", Message("NUMANode"))]),
        msg("NUMANode", &[f(1, "ID", Int64)]),
        msg(
            "Device",
            &[
                f(1, "ID", String),
                f(2, "health", String),
                f(3, "topology", Message("TopologyInfo")),
            ],
        ),
        msg("PreStartContainerRequest", &[rep(1, "devices_ids", String)]),
        msg("PreStartContainerResponse", &[]),
        msg(
            "PreferredAllocationRequest",
            &[rep(
                1,
                "container_requests",
                Message("ContainerPreferredAllocationRequest"),
            )],
        ),
        msg(
            "ContainerPreferredAllocationRequest",
            &[
                rep(1, "available_deviceIDs", String),
                rep(2, "must_include_deviceIDs", String),
                f(3, "allocation_size", Int32),
            ],
        ),
        msg(
            "PreferredAllocationResponse",
            &[rep(
                1,
                "container_responses",
                Message("ContainerPreferredAllocationResponse"),
            )],
        ),
        msg(
            "ContainerPreferredAllocationResponse",
            &[rep(1, "deviceIDs", String)],
        ),
        msg(
            "AllocateRequest",
            &[rep(
                1,
                "container_requests",
                Message("ContainerAllocateRequest"),
            )],
        ),
        msg("ContainerAllocateRequest", &[rep(1, "devices_ids", String)]),
        msg("CDIDevice", &[f(1, "name", String)]),
        msg(
            "AllocateResponse",
            &[rep(
                1,
                "container_responses",
                Message("ContainerAllocateResponse"),
            )],
        ),
        msg(
            "ContainerAllocateResponse",
            &[
                rep(1, "envs", MapStringString),
                rep(2, "mounts", Message("Mount")),
                rep(3, "devices", Message("DeviceSpec")),
                rep(4, "annotations", MapStringString),
                rep(5, "cdi_devices", Message("CDIDevice")),
            ],
        ),
        msg(
            "Mount",
            &[
                f(1, "container_path", String),
                f(2, "host_path", String),
                f(3, "read_only", Bool),
            ],
        ),
        msg(
            "DeviceSpec",
            &[
                f(1, "container_path", String),
                f(2, "host_path", String),
                f(3, "permissions", String),
            ],
        ),
    ],
    enums: &[],
};

/// KubeVirt's plugin hook API v1alpha1, DomainHookService (tag v1.9.0).
pub const KUBEVIRT_HOOKS_V1ALPHA1: Api = Api {
    package: "kubevirt.hooks.plugins.v1alpha1",
    services: &[(
        "DomainHookService",
        &[unary(
            "/kubevirt.hooks.plugins.v1alpha1.DomainHookService/MutateDomain",
            "MutateDomainRequest",
            "MutateDomainResponse",
        )],
    )],
    messages: &[
        Message {
            name: "SidecarContext",
            fields: &[f(1, "invocation_context", String)],
            reserved: &[2],
        },
        msg(
            "MutateDomainRequest",
            &[
                f(1, "domain_type", String),
                f(2, "domain", Bytes),
                f(3, "vmi", Bytes),
                f(4, "sidecar_context", Message("SidecarContext")),
            ],
        ),
        msg("MutateDomainResponse", &[f(1, "domain", Bytes)]),
    ],
    enums: &[],
};

/// The kubelet's plugin registration API v1 (tag v0.36.3 of k8s.io/kubelet):
/// its package is `pluginregistration`, without a version.
pub const KUBELET_PLUGINREGISTRATION_V1: Api = Api {
    package: "pluginregistration",
    services: &[(
        "Registration",
        &[
            unary(
                "/pluginregistration.Registration/GetInfo",
                "InfoRequest",
                "PluginInfo",
            ),
            unary(
                "/pluginregistration.Registration/NotifyRegistrationStatus",
                "RegistrationStatus",
                "RegistrationStatusResponse",
            ),
        ],
    )],
    messages: &[
        msg(
            "PluginInfo",
            &[
                f(1, "type", String),
                f(2, "name", String),
                f(3, "endpoint", String),
                rep(4, "supported_versions", String),
            ],
        ),
        msg(
            "RegistrationStatus",
            &[f(1, "plugin_registered", Bool), f(2, "error", String)],
        ),
        msg("RegistrationStatusResponse", &[]),
        msg("InfoRequest", &[]),
    ],
    enums: &[],
};

/// The DRAPlugin service of package `package`, whose paths are given whole
/// (a const cannot format them).
macro_rules! dra_api {
    ($package:literal, $device:expr) => {
        Api {
            package: $package,
            services: &[(
                "DRAPlugin",
                &[
                    unary(
                        concat!("/", $package, ".DRAPlugin/NodePrepareResources"),
                        "NodePrepareResourcesRequest",
                        "NodePrepareResourcesResponse",
                    ),
                    unary(
                        concat!("/", $package, ".DRAPlugin/NodeUnprepareResources"),
                        "NodeUnprepareResourcesRequest",
                        "NodeUnprepareResourcesResponse",
                    ),
                ],
            )],
            messages: &[
                msg(
                    "NodePrepareResourcesRequest",
                    &[rep(1, "claims", Message("Claim"))],
                ),
                msg(
                    "NodePrepareResourcesResponse",
                    &[rep(
                        1,
                        "claims",
                        MapStringMessage("NodePrepareResourceResponse"),
                    )],
                ),
                msg(
                    "NodePrepareResourceResponse",
                    &[rep(1, "devices", Message("Device")), f(2, "error", String)],
                ),
                msg("Device", $device),
                msg(
                    "NodeUnprepareResourcesRequest",
                    &[rep(1, "claims", Message("Claim"))],
                ),
                msg(
                    "NodeUnprepareResourcesResponse",
                    &[rep(
                        1,
                        "claims",
                        MapStringMessage("NodeUnprepareResourceResponse"),
                    )],
                ),
                msg("NodeUnprepareResourceResponse", &[f(1, "error", String)]),
                msg(
                    "Claim",
                    &[
                        f(1, "namespace", String),
                        f(2, "uid", String),
                        f(3, "name", String),
                    ],
                ),
            ],
            enums: &[],
        }
    };
}

/// The kubelet's DRA plugin API v1 (tag v0.36.3 of k8s.io/kubelet).
pub const KUBELET_DRA_V1: Api = dra_api!(
    "k8s.io.kubelet.pkg.apis.dra.v1",
    &[
        rep(1, "request_names", String),
        f(2, "pool_name", String),
        f(3, "device_name", String),
        rep(4, "cdi_device_ids", String),
        opt(5, "share_id", String),
    ]
);

/// The kubelet's DRA plugin API v1beta1 (tag v0.36.3 of k8s.io/kubelet): v1
/// without `Device.share_id`.
pub const KUBELET_DRA_V1BETA1: Api = dra_api!(
    "k8s.io.kubelet.pkg.apis.dra.v1beta1",
    &[
        rep(1, "request_names", String),
        f(2, "pool_name", String),
        f(3, "device_name", String),
        rep(4, "cdi_device_ids", String),
    ]
);

/// The kubelet's DRA resource health API v1 (tag v0.37.2 of k8s.io/kubelet):
/// package `v1`, without the DRA API's long prefix.
pub const KUBELET_DRA_HEALTH_V1: Api = Api {
    package: "v1",
    services: &[(
        "DRAResourceHealth",
        &[Method {
            path: "/v1.DRAResourceHealth/NodeWatchResources",
            input: "NodeWatchResourcesRequest",
            output: "NodeWatchResourcesResponse",
            server_streaming: true,
        }],
    )],
    messages: &[
        msg("NodeWatchResourcesRequest", &[]),
        msg(
            "DeviceIdentifier",
            &[f(1, "pool_name", String), f(2, "device_name", String)],
        ),
        msg(
            "DeviceHealth",
            &[
                f(1, "device", Message("DeviceIdentifier")),
                f(2, "health", Type::Enum("HealthStatus")),
                f(3, "last_updated_time", Int64),
                f(4, "health_check_timeout_seconds", Int64),
                f(5, "message", String),
            ],
        ),
        msg(
            "NodeWatchResourcesResponse",
            &[rep(1, "devices", Message("DeviceHealth"))],
        ),
    ],
    enums: &[(
        "HealthStatus",
        &[("UNKNOWN", 0), ("HEALTHY", 1), ("UNHEALTHY", 2)],
    )],
};
