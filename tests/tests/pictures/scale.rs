//! A generated 16-GPU, 16-NIC two-socket host: fits, no overlap, small.

use crate::render::{check_picture, device_bdfs, has_text};

/// 16 GPUs and 16 RDMA NICs on two sockets, as shared/benches/chooser_scale
/// lays them out (2 sockets x 2 host bridges x 2 switches, 2 GPUs and 2 NICs
/// per switch), with links, ACS on the downstream ports, and NVLink within
/// each 8-GPU baseboard (NV18, as on the H200s).
fn sixteen_gpu_host() -> p2p_topology::Topology {
    use p2p_topology::pci::{Acs, AcsFlags, PciePortType::*};
    use p2p_topology::topology::*;
    use p2p_topology::Bdf;
    let mut t = Topology::default();
    let mut group = 0;
    let link = |w: u8, s: &str| LinkInfo {
        current_speed: Some(format!("{s} GT/s PCIe")),
        current_width: Some(w),
        max_speed: Some(format!("{s} GT/s PCIe")),
        max_width: Some(w),
    };
    let mut func = |bdf: Bdf, hb: &str, parent: Option<Bdf>, class: u32, port, numa: u32| {
        group += 1;
        PciFunction {
            bdf,
            vendor: 0x10de,
            device: 0x2335,
            subsystem_vendor: None,
            subsystem_device: None,
            class,
            is_bridge: class >> 8 == 0x0604,
            host_bridge: hb.to_string(),
            parent,
            pcie_port_type: Some(port),
            acs: AcsState::Absent,
            iommu_group: Some(group),
            numa_node: Some(numa),
            cpu_affinity: None,
            driver: Some(
                if class >> 8 == 0x0604 {
                    "pcieport"
                } else {
                    "vfio-pci"
                }
                .into(),
            ),
            link: link(16, "32.0"),
            config_len: 4096,
            interfaces: Vec::new(),
            rdma_devices: Vec::new(),
        }
    };
    for socket in 0..2u8 {
        t.numa_nodes.push(NumaNode {
            id: u32::from(socket),
            cpulist: if socket == 0 {
                "0-55,112-167"
            } else {
                "56-111,168-223"
            }
            .into(),
        });
        for hbi in 0..2u8 {
            let root_bus = socket * 0x80 + hbi * 0x40;
            let hb = format!("pci0000:{root_bus:02x}");
            t.host_bridges.push(HostBridge {
                name: hb.clone(),
                domain: 0,
                bus: root_bus,
                numa_node: Some(u32::from(socket)),
            });
            for sw in 0..2u8 {
                let base = root_bus + 1 + sw * 0x10;
                let rp = Bdf::new(0, root_bus, 1 + sw, 0).unwrap();
                let up = Bdf::new(0, base, 0, 0).unwrap();
                let n = u32::from(socket);
                t.functions.push(func(rp, &hb, None, 0x060400, RootPort, n));
                t.functions
                    .push(func(up, &hb, Some(rp), 0x060400, SwitchUpstream, n));
                for port in 0..4u8 {
                    let down = Bdf::new(0, base + 1, port, 0).unwrap();
                    let ep = Bdf::new(0, base + 2 + port, 0, 0).unwrap();
                    let mut d = func(down, &hb, Some(up), 0x060400, SwitchDownstream, n);
                    d.acs = AcsState::Present(Acs {
                        offset: 0x148,
                        capability: AcsFlags::from_bits(0x5f),
                        control: AcsFlags::from_bits(0x1d),
                    });
                    t.functions.push(d);
                    let mut f = if port < 2 {
                        func(ep, &hb, Some(down), 0x030200, Endpoint, n)
                    } else {
                        let mut f = func(ep, &hb, Some(down), 0x020700, Endpoint, n);
                        f.vendor = 0x15b3;
                        f.device = 0x1021;
                        f.driver = Some("mlx5_core".into());
                        f.rdma_devices = vec![format!("mlx5_{}", t.functions.len())];
                        f
                    };
                    f.numa_node = Some(n);
                    t.functions.push(f);
                }
            }
        }
    }
    t.sort();
    let gpus: Vec<Bdf> = t
        .functions
        .iter()
        .filter(|f| f.class == 0x030200)
        .map(|f| f.bdf)
        .collect();
    for board in gpus.chunks(8) {
        for (i, a) in board.iter().enumerate() {
            for b in &board[i + 1..] {
                t.nvlinks.push(NvLink {
                    a: *a,
                    b: *b,
                    count: Some(18),
                });
            }
        }
    }
    t.nvlink_source = Some(NvLinkSource::OperatorMap);
    t
}

#[test]
fn sixteen_gpus_and_sixteen_nics_fit_without_overlap_and_stay_small() {
    use p2p_allocation::clique::{plan_cliques, MaxLevel};
    use p2p_report::{PlanReport, TopoReport};
    use p2p_topology::guest_layout::GuestLayout;
    use p2p_topology::{GpuSelector, PathClass};
    let topo = sixteen_gpu_host();
    let report = TopoReport::build(&topo, &GpuSelector::Nvidia, "generated 16-GPU host");
    assert_eq!((report.gpus.len(), report.nics.len()), (16, 16));
    let svg = p2p_report::picture::topo_svg(&topo, &report, "generated");
    let r = check_picture(&svg, "topo 16 GPUs");
    for bdf in device_bdfs(&serde_json::to_value(&report).unwrap()) {
        assert!(has_text(&r, &bdf), "{bdf} is no text");
    }
    println!(
        "16 GPUs + 16 NICs: topo picture {} bytes, {} texts",
        svg.len(),
        r.texts.len()
    );
    assert!(svg.len() < 1 << 20, "{} bytes", svg.len());

    // Two VMs of eight GPUs each, one per baseboard.
    let gpus: Vec<_> = report.gpus.iter().map(|g| g.bdf).collect();
    let level = MaxLevel::new(PathClass::Phb).unwrap();
    let plans = vec![
        plan_cliques(&topo, "left", &gpus[..8], level).unwrap(),
        plan_cliques(&topo, "right", &gpus[8..12], level).unwrap(),
    ];
    let plan = PlanReport::new(
        "generated 16-GPU host",
        level,
        plans,
        GuestLayout::Flat,
        Vec::new(),
        Vec::new(),
    );
    let svg = p2p_report::picture::plan::plan_svg(&topo, &report, &plan, "generated");
    let r = check_picture(&svg, "plan 16 GPUs");
    println!(
        "16 GPUs + 16 NICs: plan picture {} bytes, {} texts",
        svg.len(),
        r.texts.len()
    );
    assert!(svg.len() < 1 << 20, "{} bytes", svg.len());
}
