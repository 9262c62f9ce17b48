//! The slice builder on hand-built and generated topologies: attribute values
//! worked out by hand and Kubernetes' limits. The property that makes the
//! constraint right (equal `clique<L>` exactly when the chooser allows the
//! pair at L; every allocation under `matchAttribute` is one clique) is
//! checked in the tests crate (tests/tests/kubernetes/dra_property.rs), with the model of
//! the allocator it needs.

use std::collections::BTreeSet;

use super::*;
use p2p_test_support::topologies::{bdf as b, hand_built, Tree};

fn attr<'a>(p: &Publication, d: &'a Device, id: &str) -> Option<&'a DeviceAttribute> {
    d.attributes.get(&p.attribute_name(id))
}

fn string(s: &str) -> Option<DeviceAttribute> {
    Some(DeviceAttribute::String(s.to_string()))
}

#[test]
fn hand_built_tree_publishes_the_attributes_worked_out_by_hand() {
    let t = hand_built();
    let sel = GpuSelector::Nvidia;
    let p = build_slices(&t, &SliceOptions::new("node-a", DEFAULT_DRIVER, &sel)).unwrap();
    let names: Vec<&str> = p.devices().map(|d| d.name.as_str()).collect();
    assert_eq!(
        names,
        ["gpu-0000-03-00-0", "gpu-0000-04-00-0", "nic-0000-05-00-0"]
    );
    let d: Vec<&Device> = p.devices().collect();
    // Both GPUs and the NIC are below switch 01:00.0 (PIX), root port 00:01.0.
    for dev in &d {
        assert_eq!(attr(&p, dev, "cliquePix").cloned(), string("0000:01:00.0"));
        assert_eq!(attr(&p, dev, "cliquePxb").cloned(), string("0000:00:01.0"));
        assert_eq!(attr(&p, dev, "cliquePhb").cloned(), string("pci0000:00"));
        assert_eq!(attr(&p, dev, "cliqueNode").cloned(), string("node0"));
        assert_eq!(dev.attributes.get(PCIE_ROOT).cloned(), string("pci0000:00"));
        assert_eq!(
            dev.attributes.get(NUMA_NODE),
            Some(&DeviceAttribute::Int(0))
        );
    }
    assert_eq!(
        d[0].attributes.get(PCI_BUS_ID).cloned(),
        string("0000:03:00.0")
    );
    assert_eq!(attr(&p, d[0], "kind").cloned(), string("gpu"));
    assert_eq!(attr(&p, d[2], "kind").cloned(), string("nic"));
    assert_eq!(attr(&p, d[2], "vendorID").cloned(), string("15b3"));
    assert_eq!(
        attr(&p, d[0], "iommuGroup"),
        Some(&DeviceAttribute::Int(50))
    );
    assert_eq!(
        attr(&p, d[0], "nearestNic").cloned(),
        string("0000:05:00.0")
    );
    assert_eq!(attr(&p, d[0], "nearestNicClass").cloned(), string("PIX"));
    assert_eq!(attr(&p, d[2], "nearestNic"), None);
    // Left out: the two GPUs of group 99 (each names the other), and the GPU
    // bound to nvidia; not the audio function (a companion, not a GPU).
    let left: Vec<(String, &str)> = p
        .left_out
        .iter()
        .map(|l| (l.bdf.to_string(), l.reason.as_str()))
        .collect();
    assert_eq!(left.len(), 3, "{left:?}");
    assert!(left[0]
        .1
        .contains("IOMMU group 99 also holds 0000:10:00.1 (gpu)"));
    assert!(left[1]
        .1
        .contains("IOMMU group 99 also holds 0000:10:00.0 (gpu)"));
    assert!(left[2].0 == "0000:81:00.0" && left[2].1.starts_with("bound to nvidia"));
    // One slice, pool of one slice named after the node.
    assert_eq!(p.slices.len(), 1);
    let s = &p.slices[0].spec;
    assert_eq!(
        (s.pool.name.as_str(), s.pool.resource_slice_count),
        ("node-a", 1)
    );
    assert_eq!(p.slices[0].metadata.name, "node-a-gpu.vp2p.io-0");

    // With --bind the nvidia-bound GPU is published; its NUMA is unknown, so
    // no numaNode and cliqueNode is its root complex; no switch above it but
    // the root port 80:01.0 is its PIX unit.
    let mut opts = SliceOptions::new("node-a", DEFAULT_DRIVER, &sel);
    opts.bind = true;
    let p = build_slices(&t, &opts).unwrap();
    let g = p.devices().find(|d| d.name == "gpu-0000-81-00-0").unwrap();
    assert_eq!(g.attributes.get(NUMA_NODE), None);
    assert_eq!(attr(&p, g, "cliqueNode").cloned(), string("pci0000:80"));
    assert_eq!(attr(&p, g, "cliquePix").cloned(), string("0000:80:01.0"));
    assert_eq!(attr(&p, g, "nearestNicClass").cloned(), string("SYS"));
}

#[test]
fn json_has_the_resource_k8s_io_v1_shape() {
    let t = hand_built();
    let sel = GpuSelector::Nvidia;
    let p = build_slices(&t, &SliceOptions::new("node-a", DEFAULT_DRIVER, &sel)).unwrap();
    let v = serde_json::to_value(&p.slices[0]).unwrap();
    assert_eq!(v["apiVersion"], "resource.k8s.io/v1");
    assert_eq!(v["kind"], "ResourceSlice");
    assert_eq!(v["spec"]["pool"]["resourceSliceCount"], 1);
    assert_eq!(v["spec"]["nodeName"], "node-a");
    let a = &v["spec"]["devices"][0]["attributes"];
    assert_eq!(
        a["resource.kubernetes.io/pciBusID"]["string"],
        "0000:03:00.0"
    );
    assert_eq!(a["resource.kubernetes.io/numaNode"]["int"], 0);
    let back: ResourceSlice = serde_json::from_value(v).unwrap();
    assert_eq!(back, p.slices[0]);
}

#[test]
fn bad_names_and_too_many_attributes_are_refused_with_the_device() {
    let t = hand_built();
    let sel = GpuSelector::Nvidia;
    let e = build_slices(&t, &SliceOptions::new("node-a", "GPU.example", &sel)).unwrap_err();
    assert!(matches!(e, SliceError::BadDriverName(_)));
    let e = build_slices(&t, &SliceOptions::new("Node_A", DEFAULT_DRIVER, &sel)).unwrap_err();
    assert!(matches!(e, SliceError::BadNodeName(_)));
    let long = "d".repeat(63);
    let node = vec!["n".repeat(60); 4].join(".");
    let e = build_slices(&t, &SliceOptions::new(&node, &long, &sel)).unwrap_err();
    assert!(matches!(e, SliceError::SliceNameTooLong(_)));
    // 22 partitions of distinct sizes holding 03:00.0: with its 15 other
    // attributes that is 37, past 32, refused, naming the device.
    let parts: Vec<FmPartition> = (1..=22)
        .map(|n| FmPartition {
            id: n,
            active: false,
            gpus: std::iter::once(b("03:00.0"))
                .chain((1..n).map(|k| Bdf {
                    domain: 1,
                    bus: k as u8,
                    device: 0,
                    function: 0,
                }))
                .collect(),
        })
        .collect();
    let mut opts = SliceOptions::new("node-a", DEFAULT_DRIVER, &sel);
    opts.partitions = Some(&parts);
    match build_slices(&t, &opts).unwrap_err() {
        SliceError::TooManyAttributes { device, count, .. } => {
            assert_eq!(device, "gpu-0000-03-00-0");
            assert!(count > MAX_ATTRIBUTES_PER_DEVICE);
        }
        e => panic!("{e}"),
    }
}

/// A flat node of `n` GPUs, each on its own root port of one host bridge.
fn flat(n: usize) -> Topology {
    let mut t = Tree::new();
    let hb = t.host_bridge(0, Some(0));
    for i in 0..n {
        let rp = Bdf {
            domain: 0,
            bus: 0,
            device: (i % 32) as u8,
            function: (i / 32) as u8,
        };
        let ep = Bdf {
            domain: 0,
            bus: (i + 1) as u8,
            device: 0,
            function: 0,
        };
        t.gpu_on_root_port(&hb, rp, ep);
    }
    t.done()
}

#[test]
fn a_pool_past_128_devices_is_split_and_counts_its_slices() {
    let t = flat(200);
    let sel = GpuSelector::Nvidia;
    let p = build_slices(&t, &SliceOptions::new("big", DEFAULT_DRIVER, &sel)).unwrap();
    let sizes: Vec<usize> = p.slices.iter().map(|s| s.spec.devices.len()).collect();
    assert_eq!(sizes, [128, 72]);
    assert!(p
        .slices
        .iter()
        .all(|s| s.spec.pool.resource_slice_count == 2));
    let names: BTreeSet<&str> = p.devices().map(|d| d.name.as_str()).collect();
    assert_eq!(names.len(), 200, "device names are unique in the pool");
    // No device at all: one slice without devices, so the pool is complete.
    let p = build_slices(&flat(0), &SliceOptions::new("empty", DEFAULT_DRIVER, &sel)).unwrap();
    assert_eq!(p.slices.len(), 1);
    assert!(p.slices[0].spec.devices.is_empty());
    assert_eq!(p.slices[0].spec.pool.resource_slice_count, 1);
}

/// A GPU on a PCI domain above 0xffff (a VMD domain, say) has no
/// `pciBusID` in Kubernetes' `dddd:bb:dd.f`: it is left out, named, and the
/// GPU on domain 0 is published as usual.
#[test]
fn a_gpu_on_a_pci_domain_above_ffff_is_left_out_with_the_reason() {
    let mut t = Tree::new();
    let hb = t.host_bridge(0, Some(0));
    for domain in [0u32, 0x10000] {
        let rp = Bdf {
            domain,
            bus: 0,
            device: 1,
            function: 0,
        };
        let ep = Bdf {
            domain,
            bus: 1,
            device: 0,
            function: 0,
        };
        t.gpu_on_root_port(&hb, rp, ep);
    }
    let t = t.done();
    let sel = GpuSelector::Nvidia;
    let p = build_slices(&t, &SliceOptions::new("n", DEFAULT_DRIVER, &sel)).unwrap();
    let names: Vec<&str> = p.devices().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["gpu-0000-01-00-0"]);
    assert_eq!(p.left_out.len(), 1);
    assert_eq!(p.left_out[0].bdf.to_string(), "10000:01:00.0");
    assert!(
        p.left_out[0]
            .reason
            .contains("PCI domain 10000 is above ffff"),
        "{}",
        p.left_out[0].reason
    );
}
