//! How fast the chooser answers on a big host: 16 GPUs and 16 RDMA NICs, the
//! kubelet's GetPreferredAllocation budget being 10 ms per answer.
//!
//!     cargo bench -p p2p-allocation --bench chooser_scale
//!
//! The topology is generated in memory, laid out like host/cli/benches/topo_scale's
//! HGX tree but wider: 2 sockets (NUMA 0, 1) x 2 host bridges x 2 PCIe
//! switches, each switch with 2 GPUs and 2 RDMA NICs on its own downstream
//! ports, every endpoint in its own IOMMU group. So GPU pairs are PIX (one
//! switch), PHB (one host bridge), NODE and SYS. Prints the median and the
//! worst of `VP2P_BENCH_RUNS` (default 50) answers per request size.

use std::time::{Duration, Instant};

use p2p_allocation::chooser::{choose, Request};
use p2p_allocation::clique::MaxLevel;
use p2p_topology::{Bdf, GpuSelector, PathClass};

use p2p_test_support::topologies::hgx;

const TARGET: Duration = Duration::from_millis(10);

fn main() {
    let runs: usize = std::env::var("VP2P_BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let topo = hgx(2, 2);
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
