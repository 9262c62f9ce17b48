//! Report types that cross the wire (JSON) and their text renderings.

pub mod bench;
mod bench_text;
mod cpulist;
pub mod plan;
pub mod schema;
pub mod table;
pub mod topo;
mod topo_text;

pub use bench_text::significant;
pub use cpulist::CpuList;
pub use plan::{PlanReport, PLAN_SCHEMA};
pub use table::Table;
pub use topo::{AtsEntry, BridgeEntry, DeviceEntry, Matrix, NicRows, TopoReport, TOPO_SCHEMA};
pub use topo_text::LEGEND;
