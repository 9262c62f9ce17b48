//! The slice builder on hand-built and generated topologies: attribute values
//! worked out by hand, Kubernetes' limits, and the property that makes the
//! constraint right (equal `clique<L>` exactly when the chooser allows the
//! pair at L; every allocation under `matchAttribute` is one clique).

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;
use crate::topology::{AcsState, HostBridge, LinkInfo, NvLink};

const GPU: u32 = 0x030200;
const NIC: u32 = 0x020000;
const BRIDGE: u32 = 0x060400;
const AUDIO: u32 = 0x040300;

struct Tree {
    topo: Topology,
    group: u32,
}

impl Tree {
    fn new() -> Self {
        Self {
            topo: Topology::default(),
            group: 0,
        }
    }

    fn host_bridge(&mut self, bus: u8, numa: Option<u32>) -> String {
        let name = format!("pci0000:{bus:02x}");
        self.topo.host_bridges.push(HostBridge {
            name: name.clone(),
            domain: 0,
            bus,
            numa_node: numa,
        });
        name
    }

    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        bdf: Bdf,
        hb: &str,
        parent: Option<Bdf>,
        class: u32,
        port: Option<PciePortType>,
        numa: Option<u32>,
        group: Option<u32>,
        driver: &str,
    ) {
        let group = group.or_else(|| {
            self.group += 1;
            Some(self.group)
        });
        self.topo.functions.push(PciFunction {
            bdf,
            vendor: if class == NIC { 0x15b3 } else { 0x10de },
            device: 0x2335,
            subsystem_vendor: None,
            subsystem_device: None,
            class,
            is_bridge: class == BRIDGE,
            host_bridge: hb.to_string(),
            parent,
            pcie_port_type: port,
            acs: AcsState::Absent,
            iommu_group: group,
            numa_node: numa,
            cpu_affinity: None,
            driver: Some(driver.to_string()),
            link: LinkInfo::default(),
            config_len: 256,
            interfaces: Vec::new(),
            rdma_devices: if class == NIC {
                vec![format!("mlx5_{}", bdf.bus)]
            } else {
                Vec::new()
            },
        });
    }

    fn done(mut self) -> Topology {
        self.topo.sort();
        self.topo
    }
}

fn b(s: &str) -> Bdf {
    s.parse().unwrap()
}

/// Host bridge pci0000:00 (NUMA 0): root port 00:01.0 -> switch (up 01:00.0,
/// downs 02:00.0, 02:01.0, 02:02.0) with GPU 03:00.0 (+ audio 03:00.1 in its
/// group), GPU 04:00.0 and NIC 05:00.0; root port 00:02.0 -> GPU 10:00.0 and
/// GPU 10:00.1 sharing IOMMU group 99. Host bridge pci0000:80 (NUMA unknown):
/// root port 80:01.0 -> GPU 81:00.0 bound to nvidia.
fn hand_built() -> Topology {
    use PciePortType::*;
    let mut t = Tree::new();
    let hb = t.host_bridge(0x00, Some(0));
    let n = Some(0);
    t.add(
        b("00:01.0"),
        &hb,
        None,
        BRIDGE,
        Some(RootPort),
        n,
        None,
        "pcieport",
    );
    t.add(
        b("01:00.0"),
        &hb,
        Some(b("00:01.0")),
        BRIDGE,
        Some(SwitchUpstream),
        n,
        None,
        "pcieport",
    );
    for (i, ep) in ["03:00.0", "04:00.0", "05:00.0"].iter().enumerate() {
        let down = b(&format!("02:{i:02x}.0"));
        t.add(
            down,
            &hb,
            Some(b("01:00.0")),
            BRIDGE,
            Some(SwitchDownstream),
            n,
            None,
            "pcieport",
        );
        let class = if i == 2 { NIC } else { GPU };
        let group = (i == 0).then_some(50);
        t.add(
            b(ep),
            &hb,
            Some(down),
            class,
            Some(Endpoint),
            n,
            group,
            "vfio-pci",
        );
    }
    t.add(
        b("03:00.1"),
        &hb,
        Some(b("02:00.0")),
        AUDIO,
        Some(Endpoint),
        n,
        Some(50),
        "vfio-pci",
    );
    t.add(
        b("00:02.0"),
        &hb,
        None,
        BRIDGE,
        Some(RootPort),
        n,
        None,
        "pcieport",
    );
    for f in ["10:00.0", "10:00.1"] {
        t.add(
            b(f),
            &hb,
            Some(b("00:02.0")),
            GPU,
            Some(Endpoint),
            n,
            Some(99),
            "vfio-pci",
        );
    }
    let hb2 = t.host_bridge(0x80, None);
    t.add(
        b("80:01.0"),
        &hb2,
        None,
        BRIDGE,
        Some(RootPort),
        None,
        None,
        "pcieport",
    );
    t.add(
        b("81:00.0"),
        &hb2,
        Some(b("80:01.0")),
        GPU,
        Some(Endpoint),
        None,
        None,
        "nvidia",
    );
    t.done()
}

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
        t.add(
            rp,
            &hb,
            None,
            BRIDGE,
            Some(PciePortType::RootPort),
            Some(0),
            None,
            "pcieport",
        );
        t.add(
            ep,
            &hb,
            Some(rp),
            GPU,
            Some(PciePortType::Endpoint),
            Some(0),
            None,
            "vfio-pci",
        );
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

#[test]
fn the_property_holds_on_the_hand_built_tree() {
    let t = hand_built();
    let sel = GpuSelector::Nvidia;
    let mut opts = SliceOptions::new("node-a", DEFAULT_DRIVER, &sel);
    opts.bind = true;
    let p = build_slices(&t, &opts).unwrap();
    let v = verify_cliques(&t, &p, None, 4);
    assert!(v.is_empty(), "{v:#?}");
}

/// A generated host from decision bytes: 1 to 3 host bridges (NUMA 0, 1 or
/// unknown), root ports with a GPU, a NIC, a multi-function card, or a switch
/// whose downstream ports hold endpoints or a nested switch; IOMMU groups
/// mostly one per endpoint, sometimes shared; NVLink sets, complete or not.
fn generated(bytes: &[u8]) -> (Topology, Vec<FmPartition>) {
    use PciePortType::*;
    let mut k = 0usize;
    let mut next = || {
        let v = bytes[k % bytes.len()];
        k += 1;
        v
    };
    let mut t = Tree::new();
    let mut bus: u8 = 0;
    let n_hb = 1 + next() % 3;
    let mut endpoints: Vec<(Bdf, u32)> = Vec::new();
    for h in 0..n_hb {
        bus = bus.max(h * 0x40);
        let numa = match next() % 4 {
            0 => None,
            v => Some(u32::from(v % 2)),
        };
        let hb = t.host_bridge(bus, numa);
        let root_bus = bus;
        bus += 1;
        for rp_i in 0..1 + next() % 3 {
            let rp = Bdf {
                domain: 0,
                bus: root_bus,
                device: rp_i + 1,
                function: 0,
            };
            t.add(
                rp,
                &hb,
                None,
                BRIDGE,
                Some(RootPort),
                numa,
                None,
                "pcieport",
            );
            let mut stack = vec![(rp, 0u8)];
            while let Some((parent, depth)) = stack.pop() {
                let below = bus;
                bus = bus.saturating_add(1);
                let choice = next() % 5;
                if depth < 2 && choice >= 3 {
                    let up = Bdf {
                        domain: 0,
                        bus: below,
                        device: 0,
                        function: 0,
                    };
                    t.add(
                        up,
                        &hb,
                        Some(parent),
                        BRIDGE,
                        Some(SwitchUpstream),
                        numa,
                        None,
                        "pcieport",
                    );
                    let inner = bus;
                    bus = bus.saturating_add(1);
                    for j in 0..1 + next() % 3 {
                        let down = Bdf {
                            domain: 0,
                            bus: inner,
                            device: j,
                            function: 0,
                        };
                        t.add(
                            down,
                            &hb,
                            Some(up),
                            BRIDGE,
                            Some(SwitchDownstream),
                            numa,
                            None,
                            "pcieport",
                        );
                        stack.push((down, depth + 1));
                    }
                } else {
                    let funcs = if choice == 2 { 2 } else { 1 };
                    let mut last_group = None;
                    for fnum in 0..funcs {
                        let ep = Bdf {
                            domain: 0,
                            bus: below,
                            device: 0,
                            function: fnum,
                        };
                        let class = if next() % 3 == 0 { NIC } else { GPU };
                        let shared = next() % 8 == 0;
                        let group = if shared { last_group } else { None };
                        let driver = if next() % 6 == 0 {
                            "nvidia"
                        } else {
                            "vfio-pci"
                        };
                        t.add(
                            ep,
                            &hb,
                            Some(parent),
                            class,
                            Some(Endpoint),
                            numa,
                            group,
                            driver,
                        );
                        let g = t.topo.functions.last().unwrap().iommu_group.unwrap();
                        last_group = Some(g);
                        endpoints.push((ep, class));
                    }
                }
            }
        }
    }
    let gpus: Vec<Bdf> = endpoints
        .iter()
        .filter(|(_, c)| *c == GPU)
        .map(|(b, _)| *b)
        .collect();
    // NVLink: a complete set of the first few GPUs, or a chain (incomplete).
    let mode = next() % 3;
    let take = (next() as usize % 4).min(gpus.len());
    if mode == 1 && take >= 2 {
        for i in 0..take {
            for j in i + 1..take {
                t.topo.nvlinks.push(NvLink {
                    a: gpus[i],
                    b: gpus[j],
                    count: Some(18),
                });
            }
        }
    } else if mode == 2 && take >= 3 {
        for i in 0..take - 1 {
            t.topo.nvlinks.push(NvLink {
                a: gpus[i],
                b: gpus[i + 1],
                count: Some(4),
            });
        }
    }
    // Partitions: all GPUs in one, and consecutive pairs.
    let mut parts = Vec::new();
    if next() % 2 == 0 && gpus.len() >= 2 {
        parts.push(FmPartition {
            id: 0,
            active: false,
            gpus: gpus.clone(),
        });
        for (i, pair) in gpus.chunks(2).enumerate() {
            if pair.len() == 2 {
                parts.push(FmPartition {
                    id: i as u32 + 1,
                    active: false,
                    gpus: pair.to_vec(),
                });
            }
        }
    }
    (t.done(), parts)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn the_property_holds_on_generated_trees(bytes in prop::collection::vec(any::<u8>(), 16..96), bind in any::<bool>()) {
        let (t, parts) = generated(&bytes);
        let sel = GpuSelector::Nvidia;
        let mut opts = SliceOptions::new("gen", DEFAULT_DRIVER, &sel);
        opts.bind = bind;
        opts.max_devices_per_slice = 1 + bytes[0] as usize % 8;
        let partitions = (!parts.is_empty()).then_some(parts.as_slice());
        opts.partitions = partitions;
        let p = build_slices(&t, &opts).unwrap();
        // Every GPU and NIC is published or left out, once.
        let roles = t.functions.iter().filter(|f| matches!(sel.role(f), Role::Gpu | Role::Nic)).count();
        prop_assert_eq!(p.devices().count() + p.left_out.len(), roles);
        // The split keeps the count consistent.
        let count = p.slices.len() as i64;
        prop_assert!(p.slices.iter().all(|s| s.spec.pool.resource_slice_count == count));
        prop_assert!(p.slices.iter().all(|s| s.spec.devices.len() <= opts.max_devices_per_slice));
        let v = verify_cliques(&t, &p, partitions, 4);
        prop_assert!(v.is_empty(), "{:#?}", v);
    }
}

#[test]
fn nvlink_domains_are_given_only_to_fully_linked_sets() {
    let sel = GpuSelector::Nvidia;
    let mut t = hand_built();
    t.nvlinks.push(NvLink {
        a: b("03:00.0"),
        b: b("04:00.0"),
        count: Some(18),
    });
    let mut opts = SliceOptions::new("node-a", DEFAULT_DRIVER, &sel);
    opts.bind = true;
    let p = build_slices(&t, &opts).unwrap();
    let domain = |p: &Publication, name: &str| {
        let d = p.devices().find(|d| d.name == name).unwrap();
        attr(p, d, "nvlinkDomain").cloned()
    };
    assert_eq!(domain(&p, "gpu-0000-03-00-0"), string("0000:03:00.0"));
    assert_eq!(domain(&p, "gpu-0000-04-00-0"), string("0000:03:00.0"));
    assert_eq!(domain(&p, "gpu-0000-81-00-0"), None);
    assert!(p.notes.is_empty());
    // 03 - 04 - 81 linked as a chain: 03 and 81 are not, so no domain, a note.
    t.nvlinks.push(NvLink {
        a: b("04:00.0"),
        b: b("81:00.0"),
        count: Some(4),
    });
    let p = build_slices(&t, &opts).unwrap();
    assert_eq!(domain(&p, "gpu-0000-03-00-0"), None);
    assert!(p.notes[0].contains("not fully connected"), "{:?}", p.notes);
    let v = verify_cliques(&t, &p, None, 3);
    assert!(v.is_empty(), "{v:#?}");
}
