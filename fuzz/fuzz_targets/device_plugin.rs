//! `p2p-host device-plugin`'s gRPC handlers under arbitrary requests: the
//! first byte picks the method (GetDevicePluginOptions, ListAndWatch,
//! GetPreferredAllocation, Allocate, PreStartContainer) and the policy
//! (default, or `--max-level pix --strict`); the rest is decoded as that
//! method's request (the generated prost type, as tonic would) and handed to
//! the handler, the same `DevicePlugin` the server serves. The GPUs are the
//! five NVMe functions of the captured nested-switch tree, relinked to
//! vfio-pci in a temporary copy (as tests/tests/kubernetes/device_plugin.rs does).
//! Asserted: nothing panics; an answer has one entry per container, and
//! every refusal's message is at most `grpc::MAX_MESSAGE` bytes.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use p2p_fuzz::vfio_tree::{nested_switch_on_vfio, GPUS};
use p2p_host::sysfs::SysfsReader;
use p2p_host_kube::device_plugin::api::*;
use p2p_host_kube::device_plugin::{self, Inventory, Policy, Selector};
use p2p_host_kube::grpc::MAX_MESSAGE;
use p2p_topology::classify::PathClass;
use p2p_allocation::clique::MaxLevel;
use prost::Message;
use tokio_stream::StreamExt;
use tonic::{Request, Status};

struct Target {
    runtime: tokio::runtime::Runtime,
    /// Default policy, and `--max-level pix --strict`.
    plugins: [device_plugin::Plugin; 2],
}

fn target() -> &'static Target {
    static T: OnceLock<Target> = OnceLock::new();
    T.get_or_init(|| {
        let tree = nested_switch_on_vfio("dp").join("sysfs");
        let selector = Selector::VendorDevice {
            vendor: 0x1b36,
            device: 0x0010,
        };
        let make = |policy: Policy| {
            let reader =
                std::sync::Arc::new(SysfsReader::pci_only(p2p_topology::GpuSelector::Nvidia));
            let inv = Inventory::discover(reader, &tree, "vp2p.io/nvme", selector)
                .unwrap()
                .with_policy(policy);
            assert_eq!(inv.gpus().len(), 5);
            device_plugin::service(inv).unwrap()
        };
        let strict = Policy {
            max_level: MaxLevel::new(PathClass::Pix).unwrap(),
            strict: true,
            partitions: None,
        };
        Target {
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            plugins: [make(Policy::default()), make(strict)],
        }
    })
}

/// A refusal's message is bounded.
fn bounded(s: &Status) {
    assert!(
        s.message().len() <= MAX_MESSAGE,
        "{} bytes of message",
        s.message().len()
    );
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let t = target();
    let plugin = &t.plugins[usize::from(pick >> 7)];
    t.runtime.block_on(async {
        match pick % 5 {
            0 => {
                let Ok(req) = Empty::decode(body) else { return };
                let o = plugin.get_device_plugin_options(Request::new(req)).await;
                assert!(o.unwrap().into_inner().get_preferred_allocation_available);
            }
            1 => {
                let Ok(req) = Empty::decode(body) else { return };
                let mut s = plugin
                    .list_and_watch(Request::new(req))
                    .await
                    .unwrap()
                    .into_inner();
                let first = s.next().await.expect("a first list").unwrap();
                assert_eq!(first.devices.len(), GPUS.len());
            }
            2 => {
                let Ok(req) = PreferredAllocationRequest::decode(body) else {
                    return;
                };
                let n = req.container_requests.len();
                match plugin.get_preferred_allocation(Request::new(req)).await {
                    Ok(r) => assert_eq!(r.into_inner().container_responses.len(), n),
                    Err(e) => bounded(&e),
                }
            }
            3 => {
                let Ok(req) = AllocateRequest::decode(body) else {
                    return;
                };
                let n = req.container_requests.len();
                match plugin.allocate(Request::new(req)).await {
                    Ok(r) => {
                        let r = r.into_inner();
                        assert_eq!(r.container_responses.len(), n);
                        for c in &r.container_responses {
                            assert_eq!(c.devices[0].host_path, "/dev/vfio/vfio");
                        }
                    }
                    Err(e) => bounded(&e),
                }
            }
            _ => {
                let Ok(req) = PreStartContainerRequest::decode(body) else {
                    return;
                };
                plugin.pre_start_container(Request::new(req)).await.unwrap();
            }
        }
    });
});
