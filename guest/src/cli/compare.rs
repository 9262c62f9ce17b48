//! `p2p-guest compare`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use p2p_guest::compare::{compare, svg};
use p2p_report::bench::{BenchReport, BENCH_SCHEMA};

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The reference run (for example bare metal, or P2P on).
    base: PathBuf,
    /// The run measured against it (for example passthrough, or P2P off).
    other: PathBuf,
    /// Also draw bandwidth-vs-size curves of both runs into this SVG file,
    /// and under them a GPU x GPU heatmap of the ratio per mode and direction.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Print the comparison as JSON.
    #[arg(long)]
    json: bool,
}

/// Reads a bench report saved with `bench --json`, checking its schema.
pub fn load(path: &std::path::Path) -> anyhow::Result<BenchReport> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let r: BenchReport = serde_json::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "{}: not a bench report: {}",
            path.display(),
            p2p_topology::excerpt::json_error(&e)
        )
    })?;
    if r.schema != BENCH_SCHEMA {
        anyhow::bail!(
            "{}: schema {:?}, expected {BENCH_SCHEMA}",
            path.display(),
            p2p_topology::excerpt::short(&r.schema)
        );
    }
    Ok(r)
}

pub fn run(args: CompareArgs) -> anyhow::Result<()> {
    // The SVG's directory must exist before anything is printed, so a bad
    // path does not cost the reader a table followed by an error.
    if let Some(path) = &args.svg {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        anyhow::ensure!(
            dir.is_dir(),
            "--svg {}: directory {} does not exist",
            path.display(),
            dir.display()
        );
    }
    let (base, other) = (load(&args.base)?, load(&args.other)?);
    let c = compare(&base, &other);
    if c.rows.is_empty() {
        anyhow::bail!(
            "{} and {} share no verified measurement",
            args.base.display(),
            args.other.display()
        );
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&c)?);
    } else {
        print!("{}", c.render_text());
    }
    if let Some(path) = &args.svg {
        let panels = svg::draw(&base, &other, &c, path)?;
        eprintln!("wrote {} ({panels} panels)", path.display());
    }
    Ok(())
}
