//! `p2p-guest schema [NAME]`: the JSON Schema of each document `p2p-guest`
//! prints, generated from the types that print it (docs/schemas holds them).

use clap::Args;
use p2p_guest::compare::Comparison;
use p2p_guest::doctor::DoctorReport;
use p2p_guest::nccl_topo::explain::ExplainReport;
use p2p_guest::nccl_topo::NcclTopoReport;
use p2p_guest::probe::report::ProbeReport;
use p2p_report::bench::BenchReport;
use p2p_report::schema::Document;
use schemars::schema_for;

use super::tune::TuneReport;

#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// The document: probe, bench, compare, nccl-topo, nccl-explain, tune or doctor. Without it, the list.
    name: Option<String>,
}

/// Every document's name, schema tag and JSON Schema.
pub fn documents() -> Vec<Document> {
    vec![
        ("probe", "vp2p.probe/1", schema_for!(ProbeReport)),
        ("bench", "vp2p.bench/1", schema_for!(BenchReport)),
        ("compare", "vp2p.compare/1", schema_for!(Comparison)),
        ("nccl-topo", "vp2p.nccl-topo/1", schema_for!(NcclTopoReport)),
        (
            "nccl-explain",
            "vp2p.nccl-explain/1",
            schema_for!(ExplainReport),
        ),
        ("tune", "vp2p.tune/1", schema_for!(TuneReport<'static>)),
        ("doctor", "vp2p.doctor/1", schema_for!(DoctorReport)),
    ]
}

pub fn run(args: SchemaArgs) -> anyhow::Result<()> {
    let text = p2p_report::schema::render(&documents(), args.name.as_deref())?;
    print!("{text}");
    Ok(())
}
