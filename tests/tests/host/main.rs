//! One test binary for p2p-host on captured and live trees: topo, check, the
//! chooser, inject, and the messages bad input gets.
//! Each module was a test binary of its own; they share one link here.

mod bad_trees;
mod bench_host_plan;
mod check_cli;
mod check_pcie_costs;
mod check_throughput;
mod chooser;
mod gpu_config_placement;
mod hostile_input;
mod inject_cli;
mod live_machine;
mod messages;
mod passthrough_fixtures;
