//! How fast the chooser answers on a big host: 16 GPUs and 16 RDMA NICs, the
//! kubelet's GetPreferredAllocation budget being 10 ms per answer.
//!
//!     cargo bench -p p2p-shared --bench chooser_scale
//!
//! The topology is generated in memory, laid out like host/benches/topo_scale's
//! HGX tree but wider: 2 sockets (NUMA 0, 1) x 2 host bridges x 2 PCIe
//! switches, each switch with 2 GPUs and 2 RDMA NICs on its own downstream
//! ports, every endpoint in its own IOMMU group. So GPU pairs are PIX (one
//! switch), PHB (one host bridge), NODE and SYS. Prints the median and the
//! worst of `VP2P_BENCH_RUNS` (default 50) answers per request size.

use std::time::{Duration, Instant};

use p2p_shared::chooser::{choose, Request};
use p2p_shared::clique::MaxLevel;
use p2p_shared::pci::PciePortType;
use p2p_shared::topology::{AcsState, HostBridge, LinkInfo, PciFunction, Topology};
use p2p_shared::{Bdf, GpuSelector, PathClass};

const TARGET: Duration = Duration::from_millis(10);

fn func(
    bdf: Bdf,
    hb: &str,
    parent: Option<Bdf>,
    class: u32,
    port: PciePortType,
    group: u32,
    numa: u32,
) -> PciFunction {
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
        driver: None,
        link: LinkInfo::default(),
        config_len: 256,
        interfaces: Vec::new(),
        rdma_devices: Vec::new(),
    }
}

fn host() -> Topology {
    use PciePortType::*;
    let mut t = Topology::default();
    let mut group = 0;
    let mut next_group = || {
        group += 1;
        group
    };
    for socket in 0..2u8 {
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
                t.functions
                    .push(func(rp, &hb, None, 0x060400, RootPort, next_group(), n));
                t.functions.push(func(
                    up,
                    &hb,
                    Some(rp),
                    0x060400,
                    SwitchUpstream,
                    next_group(),
                    n,
                ));
                for port in 0..4u8 {
                    let down = Bdf::new(0, base + 1, port, 0).unwrap();
                    let ep = Bdf::new(0, base + 2 + port, 0, 0).unwrap();
                    t.functions.push(func(
                        down,
                        &hb,
                        Some(up),
                        0x060400,
                        SwitchDownstream,
                        next_group(),
                        n,
                    ));
                    let mut f = if port < 2 {
                        func(ep, &hb, Some(down), 0x030200, Endpoint, next_group(), n)
                    } else {
                        let mut f = func(ep, &hb, Some(down), 0x020000, Endpoint, next_group(), n);
                        f.vendor = 0x15b3;
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
    t
}

fn main() {
    let runs: usize = std::env::var("VP2P_BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let topo = host();
    let sel = GpuSelector::Nvidia;
    let free: Vec<Bdf> = topo
        .functions
        .iter()
        .filter(|f| !f.is_bridge)
        .map(|f| f.bdf)
        .collect();
    let gpus = free
        .iter()
        .filter(|b| topo.function(**b).is_some_and(|f| f.class == 0x030200))
        .count();
    println!(
        "chooser_scale: {gpus} GPUs, {} RDMA NICs, {} functions; {runs} runs per size",
        free.len() - gpus,
        topo.functions.len()
    );
    let mut worst_all = Duration::ZERO;
    for size in [1usize, 2, 4, 8, 16] {
        let req = Request {
            gpus: size,
            nics: size,
            must_include: Vec::new(),
            max_level: MaxLevel::new(PathClass::Phb).unwrap(),
            strict: false,
        };
        let mut times = Vec::with_capacity(runs);
        let mut answer = None;
        for _ in 0..runs {
            let t0 = Instant::now();
            let c = choose(&topo, &sel, &free, &req, None).expect("the generated host answers");
            times.push(t0.elapsed());
            answer = Some(c);
        }
        times.sort();
        let (median, worst) = (times[times.len() / 2], times[times.len() - 1]);
        worst_all = worst_all.max(worst);
        let c = answer.unwrap();
        println!(
            "  size {size:2} (+{size} NICs): median {:8.3} ms  worst {:8.3} ms  -> worst pair {}, one clique {}",
            median.as_secs_f64() * 1e3,
            worst.as_secs_f64() * 1e3,
            c.worst_class,
            c.one_clique
        );
    }
    let verdict = if worst_all < TARGET { "under" } else { "OVER" };
    println!(
        "worst answer {:.3} ms: {verdict} the {} ms target",
        worst_all.as_secs_f64() * 1e3,
        TARGET.as_millis()
    );
}
