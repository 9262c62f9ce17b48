//! One test binary for the Kubernetes edge against Kubernetes' own control
//! plane and the kubelet's plugin clients: the device plugin, the DRA driver
//! and its slices, the KubeVirt hooks, and the gRPC they speak.
//! Each module was a test binary of its own; they share one link here.

mod device_plugin;
mod device_plugin_choice;
mod device_plugin_deploy;
mod dra;
mod dra_api;
mod dra_driver;
mod dra_driver_concurrency;
mod dra_driver_failures;
mod dra_health;
mod dra_order;
mod dra_property;
mod grpc_uds_authority;
mod grpc_wire;
mod helm_chart;
mod kube_boundary;
mod kube_device_plugin;
mod kube_dra;
mod kube_dra_api;
mod kube_dra_day_two;
mod kube_dra_load;
mod kube_dra_quiet;
mod kube_dra_told;
mod kube_dra_upgrade;
mod kube_extender_cache;
mod kube_kubelet_dra;
mod kube_kubelet_dra_bind;
mod kube_kubevirt_manifests;
mod kube_sandbox;
mod kubevirt_hook;
mod kubevirt_hook_client;
mod kubevirt_plugin_deploy;
mod kubevirt_plugin_hook;
