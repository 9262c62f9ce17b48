//! The clique property on hand-built and generated topologies (moved here
//! from the slice builder's unit tests with the allocator model it needs,
//! `p2p_tests::dra_model`): two devices have equal `clique<L>` exactly when
//! their PCIe class is within L, two GPUs share a clique attribute exactly
//! when the chooser allows the pair at L, and every allocation of N
//! one-device requests under `matchAttribute` is one clique, and every
//! clique is one. The captured trees are in dra.rs.

use p2p_allocation::chooser::FmPartition;
use p2p_allocation::dra::{
    build_slices, DeviceAttribute, Publication, SliceOptions, DEFAULT_DRIVER,
};
use p2p_tests::dra_model::verify_cliques;
use p2p_topology::pci::PciePortType;
use p2p_topology::topology::NvLink;
use p2p_topology::{Bdf, GpuSelector, Role, Topology};
use proptest::prelude::*;

use p2p_test_support::topologies::{bdf as b, hand_built, Tree, BRIDGE, GPU, NIC};

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
        d.attributes.get(&p.attribute_name("nvlinkDomain")).cloned()
    };
    let string = |s: &str| Some(DeviceAttribute::String(s.to_string()));
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
