//! p2p-report: vp2p's reports, for machines and for people.
//!
//! The report types that cross the wire (JSON, each with a schema tag and a
//! JSON Schema), their text tables, the SVG pictures, and the man pages and
//! completions made from the binaries' command lines. The text of the other
//! crates' answers is made here too ([`TextReport`]), so a model never
//! depends on how it is shown.

pub mod bench;
mod bench_text;
mod choice_text;
#[cfg(feature = "cli")]
pub mod cli_assets;
mod cpulist;
pub mod doctor;
mod doctor_text;
pub mod picture;
pub mod plan;
pub mod probe;
mod probe_text;
pub mod schema;
mod slices_text;
pub mod table;
pub mod topo;
mod topo_text;

pub use bench_text::significant;
pub use cpulist::CpuList;
pub use plan::{PlanReport, PLAN_SCHEMA};
pub use table::Table;
pub use topo::{AtsEntry, BridgeEntry, DeviceEntry, Matrix, NicRows, TopoReport, TOPO_SCHEMA};
pub use topo_text::LEGEND;

/// A readable rendering of an answer another crate computes (the chooser's
/// [`Choice`](p2p_allocation::chooser::Choice), the DRA
/// [`Publication`](p2p_allocation::dra::Publication)): the model stays
/// ignorant of tables, and every table is drawn by this crate.
pub trait TextReport {
    /// The answer as the table a person reads.
    fn render_text(&self) -> String;
}
