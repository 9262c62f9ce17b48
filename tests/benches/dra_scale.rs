//! How fast the DRA slice builder and the clique property run on big nodes:
//! the ResourceSlices of a 16-GPU, 16-NIC node (target under 10 ms), and the
//! property (equal `clique<L>` exactly when the chooser allows the pair;
//! every allocation of 1 to 8 one-device requests under `matchAttribute` is
//! one clique, and every clique is an allocation) on an 8-GPU node (target
//! under a second). Prints figures; asserts nothing about time.
//!
//!     cargo bench -p p2p-tests --bench dra_scale
//!
//! It runs from the tests crate because the property's allocator model lives
//! there (tests/src/dra_model.rs). The hosts are p2p-allocation's chooser bench's
//! (p2p_test_support::topologies::hgx). Runs: `VP2P_BENCH_RUNS` (default 50).

use std::time::{Duration, Instant};

use p2p_allocation::dra::{build_slices, SliceOptions, DEFAULT_DRIVER};
use p2p_tests::dra_model::verify_cliques;
use p2p_topology::GpuSelector;

use p2p_test_support::topologies::hgx;

fn median_worst(mut times: Vec<Duration>) -> (Duration, Duration) {
    times.sort();
    (times[times.len() / 2], times[times.len() - 1])
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let runs: usize = std::env::var("VP2P_BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let sel = GpuSelector::Nvidia;

    let big = hgx(2, 2);
    let mut opts = SliceOptions::new("node-16", DEFAULT_DRIVER, &sel);
    opts.bind = true;
    let mut times = Vec::new();
    let mut devices = 0;
    for _ in 0..runs {
        let t0 = Instant::now();
        let p = build_slices(&big, &opts).expect("the generated host publishes");
        times.push(t0.elapsed());
        devices = p.devices().count();
    }
    let (median, worst) = median_worst(times);
    let verdict = if worst < Duration::from_millis(10) {
        "under"
    } else {
        "OVER"
    };
    println!(
        "dra_scale slices: {devices} devices (16 GPUs, 16 NICs), {} functions, {runs} runs: median {:.3} ms, worst {:.3} ms: {verdict} the 10 ms target",
        big.functions.len(),
        ms(median),
        ms(worst)
    );

    let small = hgx(1, 2);
    let mut opts = SliceOptions::new("node-8", DEFAULT_DRIVER, &sel);
    opts.bind = true;
    let p = build_slices(&small, &opts).expect("the generated host publishes");
    let runs = runs.min(10);
    let mut times = Vec::new();
    for _ in 0..runs {
        let t0 = Instant::now();
        let violations = verify_cliques(&small, &p, None, 8);
        times.push(t0.elapsed());
        assert!(violations.is_empty(), "{violations:#?}");
    }
    let (median, worst) = median_worst(times);
    let verdict = if worst < Duration::from_secs(1) {
        "under"
    } else {
        "OVER"
    };
    println!(
        "dra_scale property: {} devices (8 GPUs, 8 NICs), allocations of 1..8 GPUs at PIX, PXB, PHB, NODE, {runs} runs: median {:.1} ms, worst {:.1} ms: {verdict} the 1 s target",
        p.devices().count(),
        ms(median),
        ms(worst)
    );
}
