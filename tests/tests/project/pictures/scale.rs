//! A generated 16-GPU, 16-NIC two-socket host: fits, no overlap, small.

use super::render::{check_picture, device_bdfs, has_text};

#[test]
fn sixteen_gpus_and_sixteen_nics_fit_without_overlap_and_stay_small() {
    use p2p_allocation::clique::{plan_cliques, MaxLevel};
    use p2p_report::{PlanReport, TopoReport};
    use p2p_topology::guest_layout::GuestLayout;
    use p2p_topology::{GpuSelector, PathClass};
    let topo = p2p_test_support::topologies::hgx_board();
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
