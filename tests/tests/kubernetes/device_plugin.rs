//! `p2p-host device-plugin` against a kubelet stand-in speaking the real
//! v1beta1 protocol over unix sockets in a temporary directory: registration,
//! a kubelet restart, health when a GPU leaves vfio-pci, Allocate, refused
//! requests, the encoding byte for byte. GetPreferredAllocation against
//! `p2p-host allocate` is tests/tests/kubernetes/device_plugin_choice.rs.
//!
//! The GPUs are the five emulated NVMe functions (1b36:0010) of the captured
//! nested-switch tree, copied and relinked to vfio-pci: 25:00.0 and 26:00.0
//! share IOMMU group 9, 27:00.0 is group 10, 28:00.0 group 11 (NUMA 0),
//! 81:00.0 group 5 on NUMA node 1 (the tree's `iommu_group` links).

use p2p_host_kube::device_plugin::api::*;
use p2p_host_kube::device_plugin::socket_name;
use p2p_tests::grpc_wire::protobuf::Writer;
use p2p_tests::grpc_wire::raw;
use p2p_tests::grpc_wire::table::KUBELET_V1BETA1;
use p2p_tests::kubelet::*;
use p2p_tests::process::SpawnOwned;
use tonic::Code;

#[tokio::test]
async fn registers_with_the_resource_version_endpoint_and_options() {
    let s = setup().await;
    assert_eq!(s.first.version, "v1beta1");
    assert_eq!(s.first.resource_name, RESOURCE);
    assert_eq!(s.first.endpoint, "vp2p-vp2p_io_nvme.sock");
    assert_eq!(s.first.endpoint, socket_name(RESOURCE));
    assert_eq!(s.first.options, Some((false, true)));
    // The bytes, derived by hand from the table (key = number << 3 | wire
    // type): version 1 LEN = 0x0a, endpoint 2 LEN = 0x12, resource_name 3 LEN
    // = 0x1a, options 4 LEN = 0x22 holding get_preferred_allocation_available
    // 2 VARINT = 0x10 true; pre_start_required false is not sent (proto3).
    let mut want = vec![0x0a, 7];
    want.extend(b"v1beta1");
    want.extend([0x12, 22]);
    want.extend(b"vp2p-vp2p_io_nvme.sock");
    want.extend([0x1a, 12]);
    want.extend(b"vp2p.io/nvme");
    want.extend([0x22, 2, 0x10, 1]);
    assert_eq!(s.first.raw, want);
    // The kubelet then dials the endpoint and asks for the options: the
    // answer's bytes are DevicePluginOptions field 2 VARINT true, 10 01.
    let mut c = raw::Client::connect(&s.dir.path().join(&s.first.endpoint)).await;
    let path = KUBELET_V1BETA1
        .method("DevicePlugin", "GetDevicePluginOptions")
        .path;
    let got = c.unary(path, Vec::new()).await.unwrap().into_inner();
    assert_eq!(got, [0x10, 0x01]);
}

#[tokio::test]
async fn registers_again_when_the_kubelet_restarts() {
    let s = setup().await;
    let dir = s.dir.path().to_path_buf();
    s.kubelet.stop(&dir).await;
    let mut again = start_kubelet(&dir);
    let second = again.next_registration().await;
    assert_eq!(second, s.first);
    // The new server answers on the endpoint.
    let mut c = client(&dir, &second).await;
    let mut stream = c.list_and_watch(Empty {}).await.unwrap().into_inner();
    let list = stream.message().await.unwrap().unwrap();
    assert_eq!(list.devices.len(), 5);
}

#[tokio::test]
async fn registers_again_when_the_kubelet_removes_the_plugin_socket() {
    // A restarting kubelet removes the plugins' sockets from its directory.
    let mut s = setup().await;
    std::fs::remove_file(s.dir.path().join(&s.first.endpoint)).unwrap();
    let second = s.kubelet.next_registration().await;
    assert_eq!(second, s.first);
    let mut c = client(s.dir.path(), &second).await;
    let got = c
        .get_device_plugin_options(Empty {})
        .await
        .unwrap()
        .into_inner();
    let got = (
        got.pre_start_required,
        got.get_preferred_allocation_available,
    );
    assert_eq!(Some(got), s.first.options);
}

#[tokio::test]
async fn list_and_watch_marks_an_unbound_gpu_unhealthy() {
    let s = setup().await;
    let mut c = client(s.dir.path(), &s.first).await;
    let mut stream = c.list_and_watch(Empty {}).await.unwrap().into_inner();
    let first = stream.message().await.unwrap().unwrap();
    let got: Vec<(String, String, Option<TopologyInfo>)> = first
        .devices
        .into_iter()
        .map(|d| (d.id, d.health, d.topology))
        .collect();
    let numa = |n| {
        Some(TopologyInfo {
            nodes: vec![NumaNode { id: n }],
        })
    };
    let want: Vec<(String, String, Option<TopologyInfo>)> = GPUS
        .iter()
        .map(|g| {
            let node = if *g == "0000:81:00.0" { 1 } else { 0 };
            (g.to_string(), "Healthy".to_string(), numa(node))
        })
        .collect();
    assert_eq!(got, want);

    // 27:00.0 goes back to the nvme driver: the stream sends the new list.
    rebind(&s.tree, "0000:27:00.0", "nvme");
    let next = tokio::time::timeout(WAIT, stream.message())
        .await
        .expect("a new list within 20 s")
        .unwrap()
        .unwrap();
    let health: Vec<(&str, &str)> = next
        .devices
        .iter()
        .map(|d| (d.id.as_str(), d.health.as_str()))
        .collect();
    assert_eq!(
        health,
        [
            ("0000:25:00.0", "Healthy"),
            ("0000:26:00.0", "Healthy"),
            ("0000:27:00.0", "Unhealthy"),
            ("0000:28:00.0", "Healthy"),
            ("0000:81:00.0", "Healthy"),
        ]
    );
    // Allocating it now is refused.
    let err = c
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: ids(&["0000:27:00.0"]),
            }],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert_eq!(err.message(), "0000:27:00.0 is bound to nvme, not vfio-pci");
}

#[tokio::test]
async fn allocate_gives_the_vfio_devices_and_kubevirts_variable() {
    let s = setup().await;
    let mut c = client(s.dir.path(), &s.first).await;
    let got = c
        .allocate(AllocateRequest {
            container_requests: vec![
                ContainerAllocateRequest {
                    devices_ids: ids(&["0000:25:00.0", "0000:26:00.0", "0000:28:00.0"]),
                },
                ContainerAllocateRequest {
                    devices_ids: ids(&["0000:81:00.0"]),
                },
            ],
        })
        .await
        .unwrap()
        .into_inner();
    let spec = |p: &str| DeviceSpec {
        container_path: p.to_string(),
        host_path: p.to_string(),
        permissions: "mrw".to_string(),
    };
    assert_eq!(got.container_responses.len(), 2);
    let a = &got.container_responses[0];
    assert_eq!(
        a.devices,
        [
            spec("/dev/vfio/vfio"),
            spec("/dev/vfio/9"),
            spec("/dev/vfio/11")
        ]
    );
    assert_eq!(a.envs.len(), 1);
    assert_eq!(
        a.envs["PCI_RESOURCE_VP2P_IO_NVME"],
        "0000:25:00.0,0000:26:00.0,0000:28:00.0"
    );
    let b = &got.container_responses[1];
    assert_eq!(b.devices, [spec("/dev/vfio/vfio"), spec("/dev/vfio/5")]);
    assert_eq!(b.envs["PCI_RESOURCE_VP2P_IO_NVME"], "0000:81:00.0");
    assert!(a.mounts.is_empty() && a.cdi_devices.is_empty());
}

#[tokio::test]
async fn bad_requests_get_errors_and_the_plugin_keeps_serving() {
    let s = setup().await;
    let mut c = client(s.dir.path(), &s.first).await;
    let refused = [
        (
            preferred_request(&["0000:25:00.0", "0000:99:00.0"], &[], 1),
            "unknown device id \"0000:99:00.0\": not a GPU of resource vp2p.io/nvme",
        ),
        (
            preferred_request(&["0000:27:00.0", "not-a-bdf"], &[], 1),
            "unknown device id \"not-a-bdf\": not a GPU of resource vp2p.io/nvme",
        ),
        (
            preferred_request(&GPUS, &[], -1),
            "allocation size -1 is negative",
        ),
    ];
    for (req, message) in refused {
        let err = c.get_preferred_allocation(req).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert_eq!(err.message(), message);
    }
    // The chooser's own refusals, in its words.
    let too_many = c
        .get_preferred_allocation(preferred_request(&["0000:27:00.0", "0000:28:00.0"], &[], 3))
        .await
        .unwrap_err();
    assert_eq!(too_many.code(), Code::InvalidArgument);
    assert_eq!(too_many.message(), "3 GPUs asked for, 2 available");
    let must = c
        .get_preferred_allocation(preferred_request(
            &["0000:27:00.0", "0000:28:00.0"],
            &["0000:81:00.0"],
            2,
        ))
        .await
        .unwrap_err();
    assert_eq!(must.code(), Code::InvalidArgument);
    assert_eq!(
        must.message(),
        "0000:81:00.0 must be included but is not available"
    );
    let alloc = c
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: ids(&["0000:00:01.0"]),
            }],
        })
        .await
        .unwrap_err();
    assert_eq!(alloc.code(), Code::InvalidArgument);
    assert_eq!(
        alloc.message(),
        "unknown device id \"0000:00:01.0\": not a GPU of resource vp2p.io/nvme"
    );
    // Still serving.
    let ok = c
        .get_preferred_allocation(preferred_request(&GPUS, &[], 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ok.container_responses[0].device_i_ds, ["0000:81:00.0"]);
}

/// Field `name` of v1beta1 message `message`, from the table.
fn field(message: &str, name: &str) -> p2p_tests::grpc_wire::table::Field {
    KUBELET_V1BETA1.field(message, name)
}

/// DevicePlugin's calls with requests encoded by hand and answers compared
/// as bytes with encodings derived by hand from the table: what the kubelet
/// (a Go program with its own generated code) sends and reads.
#[tokio::test]
async fn device_plugin_calls_are_the_published_encoding_byte_for_byte() {
    let s = setup().await;
    let mut c = raw::Client::connect(&s.dir.path().join(&s.first.endpoint)).await;

    // GetPreferredAllocation: one container, five available, size 1.
    // ContainerPreferredAllocationRequest: available_deviceIDs 1 LEN (0x0a)
    // per id, allocation_size 3 VARINT (0x18) 1; the request's
    // container_requests 1 LEN (0x0a) around it (5 x 14 + 2 = 72 bytes).
    let mut container = Vec::new();
    for g in GPUS {
        container.extend([0x0a, 12]);
        container.extend(g.as_bytes());
    }
    container.extend([0x18, 0x01]);
    let mut req = vec![0x0a, 72];
    req.extend(&container);
    let by_table = Writer::new()
        .message(
            field("PreferredAllocationRequest", "container_requests"),
            GPUS.iter()
                .fold(Writer::new(), |w, g| {
                    w.string(
                        field("ContainerPreferredAllocationRequest", "available_deviceIDs"),
                        g,
                    )
                })
                .varint(
                    field("ContainerPreferredAllocationRequest", "allocation_size"),
                    1,
                ),
        )
        .finish();
    assert_eq!(req, by_table, "the literal bytes are the table's");
    let path = KUBELET_V1BETA1
        .method("DevicePlugin", "GetPreferredAllocation")
        .path;
    let got = c.unary(path, req).await.unwrap().into_inner();
    // container_responses 1 LEN { deviceIDs 1 LEN "0000:81:00.0" }.
    let mut want = vec![0x0a, 14, 0x0a, 12];
    want.extend(b"0000:81:00.0");
    assert_eq!(got, want);

    // Allocate 81:00.0 (IOMMU group 5): envs 1 LEN {key 1, value 2}, then
    // devices 3 LEN DeviceSpec {container_path 1, host_path 2, permissions 3}
    // for /dev/vfio/vfio and /dev/vfio/5; no mounts, annotations, CDI devices.
    let alloc = field("AllocateRequest", "container_requests");
    let req = Writer::new()
        .message(
            alloc,
            Writer::new().string(field("ContainerAllocateRequest", "devices_ids"), GPUS[4]),
        )
        .finish();
    let mut literal = vec![0x0a, 14, 0x0a, 12];
    literal.extend(GPUS[4].as_bytes());
    assert_eq!(req, literal);
    let path = KUBELET_V1BETA1.method("DevicePlugin", "Allocate").path;
    let got = c.unary(path, req).await.unwrap().into_inner();
    let car = |n| field("ContainerAllocateResponse", n);
    let spec = |p: &str| {
        Writer::new()
            .string(field("DeviceSpec", "container_path"), p)
            .string(field("DeviceSpec", "host_path"), p)
            .string(field("DeviceSpec", "permissions"), "mrw")
    };
    // A map entry is a message of key 1 and value 2 (both LEN: 0x0a, 0x12).
    let entry = {
        let mut e = vec![0x0a, 25];
        e.extend(b"PCI_RESOURCE_VP2P_IO_NVME");
        e.extend([0x12, 12]);
        e.extend(GPUS[4].as_bytes());
        e
    };
    let container = Writer::new()
        .bytes(car("envs"), &entry)
        .message(car("devices"), spec("/dev/vfio/vfio"))
        .message(car("devices"), spec("/dev/vfio/5"));
    let want = Writer::new()
        .message(field("AllocateResponse", "container_responses"), container)
        .finish();
    assert_eq!(got, want);
    // By hand: the entry is 2 + 25 + 2 + 12 = 41 bytes (0x29), envs 2 + 41;
    // the DeviceSpecs 3 x (2 + 14) + 5 = 37 and 2 x (2 + 11) + 5 = 31 bytes,
    // each 2 more as devices: 43 + 39 + 33 = 115 (0x73) in the container.
    assert_eq!(
        &got[..4],
        [0x0a, 0x73, 0x0a, 0x29],
        "the keys and lengths by hand"
    );

    // ListAndWatch's first list: Device {ID 1, health 2, topology 3
    // {nodes 1 {ID 1 VARINT}}}; node 0 is the default, so its NUMANode is
    // empty on the wire.
    let path = KUBELET_V1BETA1.method("DevicePlugin", "ListAndWatch").path;
    let mut stream = c.server_streaming(path, Vec::new()).await.unwrap();
    let first = stream.message().await.unwrap().unwrap();
    let mut want = Writer::new();
    for g in GPUS {
        let node = if g == "0000:81:00.0" { 1 } else { 0 };
        let numa = if node == 0 {
            Writer::new()
        } else {
            Writer::new().varint(field("NUMANode", "ID"), node)
        };
        let device = Writer::new()
            .string(field("Device", "ID"), g)
            .string(field("Device", "health"), "Healthy")
            .message(
                field("Device", "topology"),
                Writer::new().message(field("TopologyInfo", "nodes"), numa),
            );
        want = want.message(field("ListAndWatchResponse", "devices"), device);
    }
    assert_eq!(first, want.finish());
    // The last device by hand: 0a 1d (14 + 9 + 6 = 29 bytes) | 0a 0c <id>
    // 12 07 Healthy 1a 04 0a 02 08 01.
    let mut last = vec![0x0a, 0x1d, 0x0a, 12];
    last.extend(b"0000:81:00.0");
    last.extend([0x12, 7]);
    last.extend(b"Healthy");
    last.extend([0x1a, 4, 0x0a, 2, 0x08, 1]);
    assert!(first.ends_with(&last));
}

/// A 1 MiB unknown id is refused with its first bytes and its length, not
/// echoed whole: a gRPC client accepts about 16 KiB of headers, where the
/// status message travels, and would see RESOURCE_EXHAUSTED instead.
#[tokio::test]
async fn a_megabyte_id_is_refused_with_a_bounded_quote() {
    let s = setup().await;
    let mut c = client(s.dir.path(), &s.first).await;
    let big = "0".repeat(1 << 20);
    let err = c
        .get_preferred_allocation(preferred_request(&[&big], &[], 1))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message().len());
    assert_eq!(
        err.message(),
        format!(
            "unknown device id \"{}\"... (1048576 bytes): not a GPU of resource vp2p.io/nvme",
            "0".repeat(64)
        )
    );
    let err = c
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: vec![big],
            }],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().len() < 200, "{}", err.message().len());
}

/// A resource name the kubelet would refuse on every registration (not an
/// extended resource name: here without a domain) stops the plugin at once,
/// as clap's usage error (exit 2) naming the option, the rule and the reason,
/// before anything is made in the kubelet's directory.
#[test]
fn a_resource_name_the_kubelet_refuses_stops_the_plugin_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let tree = vfio_tree(dir.path());
    let kubelet_dir = dir.path().join("device-plugins");
    std::fs::create_dir(&kubelet_dir).unwrap();
    let mut child = std::process::Command::new(p2p_tests::binary("p2p-host"))
        .args([
            "device-plugin",
            "--resource",
            "nvme",
            "--selector",
            "1b36:0010",
        ])
        .arg("--kubelet-dir")
        .arg(&kubelet_dir)
        .arg("--sysfs-root")
        .arg(&tree)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn_owned()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > std::time::Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the plugin still runs after 10 s with --resource nvme");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "invalid value 'nvme' for '--resource <NAME>': \"nvme\" is not an extended resource \
             name, which the kubelet requires to register a device plugin \
             (IsExtendedResourceName): no domain: want DOMAIN/NAME, e.g. vp2p.io/gpu (a name \
             without one is Kubernetes' own)"
        ),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(&kubelet_dir).unwrap().count(), 0);
}
