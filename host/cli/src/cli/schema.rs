//! `p2p-host schema [NAME]`: the JSON Schema of each document `p2p-host`
//! prints, generated from the types that print it (docs/schemas holds them).

use clap::Args;
use p2p_report::schema::Document;
use schemars::schema_for;

use p2p_report::{PlanReport, TopoReport};

use super::allocate::AllocateReport;
use super::apply::ApplyReport;
use super::inject::InjectReport;

#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// The document: topo, plan, inject, snapshot, apply, allocate or check. Without it, the list.
    name: Option<String>,
}

/// Every document's name, schema tag and JSON Schema.
pub fn documents() -> Vec<Document> {
    vec![
        ("topo", "vp2p.topo/1", schema_for!(TopoReport)),
        ("plan", "vp2p.plan/1", schema_for!(PlanReport)),
        (
            "inject",
            "vp2p.inject/1",
            schema_for!(InjectReport<'static>),
        ),
        (
            "snapshot",
            "vp2p.snapshot/1",
            schema_for!(p2p_host::snapshot::SnapshotSummary),
        ),
        ("apply", "vp2p.apply/1", schema_for!(ApplyReport<'static>)),
        ("allocate", "vp2p.allocate/1", schema_for!(AllocateReport)),
        (
            "check",
            "vp2p.check/1",
            schema_for!(p2p_topology::check::CheckReport),
        ),
    ]
}

pub fn run(args: SchemaArgs) -> anyhow::Result<()> {
    let text = p2p_report::schema::render(&documents(), args.name.as_deref())?;
    print!("{text}");
    Ok(())
}
