//! `p2p-guest compare`: two bench runs side by side (bare metal vs
//! passthrough, P2P vs staged), matched by mode, direction, pair and size,
//! with ratios and the overhead in percent, and bandwidth-vs-size curves.

pub mod svg;

use std::fmt::Write;

use p2p_report::bench::{BenchReport, Direction, Measurement, Mode};
use p2p_report::significant;
use p2p_report::Table;
use p2p_topology::{ByteSize, GpuIndex};
use serde::Serialize;

/// One matched measurement.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct CompareRow {
    /// How the bytes were moved (copy engine, SM kernel, staged, NCCL, ...).
    pub mode: Mode,
    /// One direction, or both at once.
    pub direction: Direction,
    /// Source GPU (its index in the runs); None for collective modes.
    pub src: Option<GpuIndex>,
    /// Destination GPU (its index in the runs); None for collective modes.
    pub dst: Option<GpuIndex>,
    /// The pair's route as the runs recorded it (`nvlink`, `pcie-ats`,
    /// `pcie`, `local`; the base run's, else the other's); empty when
    /// neither recorded one, or for collective modes.
    pub route: String,
    /// Bytes per copy (per direction); per rank for NCCL.
    pub bytes: u64,
    /// Median GB/s in the base run.
    pub base_gbps: f64,
    /// Median GB/s in the other run.
    pub other_gbps: f64,
    /// other / base.
    pub bandwidth_ratio: f64,
    /// How much bandwidth `other` loses against `base`, in percent.
    pub bandwidth_overhead_pct: f64,
    /// Median microseconds per copy in the base run.
    pub base_latency_us: f64,
    /// Median microseconds per copy in the other run.
    pub other_latency_us: f64,
    /// other / base latency; NaN when the base latency is 0.
    pub latency_ratio: f64,
    /// How much longer `other` takes per copy, in percent.
    pub latency_overhead_pct: f64,
}

/// The comparison of two runs.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Comparison {
    /// `vp2p.compare/1`.
    #[serde(default)]
    pub schema: String,
    /// The base run's label, or `base` when it has none.
    pub base_label: String,
    /// The other run's label, or `other` when it has none.
    pub other_label: String,
    /// Matched measurements, by mode, direction, pair and size.
    pub rows: Vec<CompareRow>,
    /// Verified measurements present in only one run.
    pub only_in_base: usize,
    /// Verified measurements of the other run with no match in the base.
    pub only_in_other: usize,
}

/// Schema tag of `compare --json`.
pub const COMPARE_SCHEMA: &str = "vp2p.compare/1";

fn key(m: &Measurement) -> (Mode, Direction, Option<GpuIndex>, Option<GpuIndex>, u64) {
    (m.mode, m.direction, m.src, m.dst, m.bytes)
}

/// Matches every verified measurement of `base` with the same one in `other`.
pub fn compare(base: &BenchReport, other: &BenchReport) -> Comparison {
    let ok = |r: &BenchReport| -> Vec<Measurement> {
        r.results
            .iter()
            .filter(|m| m.verification.ok())
            .cloned()
            .collect()
    };
    let (b, o) = (ok(base), ok(other));
    let mut rows = Vec::new();
    for mb in &b {
        let Some(mo) = o.iter().find(|m| key(m) == key(mb)) else {
            continue;
        };
        let ratio = |x: f64, y: f64| if x > 0.0 { y / x } else { f64::NAN };
        let bw = ratio(mb.gbps.median, mo.gbps.median);
        let lat = ratio(mb.latency_us.median, mo.latency_us.median);
        rows.push(CompareRow {
            mode: mb.mode,
            direction: mb.direction,
            src: mb.src,
            dst: mb.dst,
            route: route(base, mb)
                .or_else(|| route(other, mb))
                .unwrap_or_default(),
            bytes: mb.bytes,
            base_gbps: mb.gbps.median,
            other_gbps: mo.gbps.median,
            bandwidth_ratio: bw,
            bandwidth_overhead_pct: (1.0 - bw) * 100.0,
            base_latency_us: mb.latency_us.median,
            other_latency_us: mo.latency_us.median,
            latency_ratio: lat,
            latency_overhead_pct: (lat - 1.0) * 100.0,
        });
    }
    // Grouped by route within each mode and direction.
    rows.sort_by(|x, y| {
        (x.mode, x.direction, &x.route, x.src, x.dst, x.bytes).cmp(&(
            y.mode,
            y.direction,
            &y.route,
            y.src,
            y.dst,
            y.bytes,
        ))
    });
    let matched = rows.len();
    Comparison {
        schema: COMPARE_SCHEMA.into(),
        base_label: label(base, "base"),
        other_label: label(other, "other"),
        rows,
        only_in_base: b.len() - matched,
        only_in_other: o.len() - matched,
    }
}

/// The route `r` recorded for the measurement's pair; None when it has none.
fn route(r: &BenchReport, m: &Measurement) -> Option<String> {
    let (s, d) = (m.src?, m.dst?);
    r.pairs
        .iter()
        .find(|p| p.src == s && p.dst == d && !p.route.is_empty())
        .map(|p| p.route.clone())
}

fn label(r: &BenchReport, fallback: &str) -> String {
    if r.label.is_empty() {
        fallback.to_string()
    } else {
        r.label.clone()
    }
}

impl Comparison {
    /// One table per mode and direction: both runs' bandwidth and latency
    /// per pair and size, with the ratio and overheads, pairs grouped by route.
    pub fn render_text(&self) -> String {
        let mut out = format!(
            "base: {}   other: {}   ({} matched, {} only in base, {} only in other)\n",
            self.base_label,
            self.other_label,
            self.rows.len(),
            self.only_in_base,
            self.only_in_other
        );
        let mut groups: Vec<(Mode, Direction)> =
            self.rows.iter().map(|r| (r.mode, r.direction)).collect();
        groups.dedup();
        for (mode, dir) in groups {
            let _ = writeln!(
                out,
                "\n{mode} {}:",
                if dir == Direction::Bi {
                    "bidirectional"
                } else {
                    "unidirectional"
                }
            );
            let mut t = Table::new([
                "PAIR",
                "ROUTE",
                "SIZE",
                "BASE GB/s",
                "OTHER GB/s",
                "RATIO",
                "BW OVERHEAD",
                "BASE us",
                "OTHER us",
                "LAT OVERHEAD",
            ])
            .indent(2);
            for r in self
                .rows
                .iter()
                .filter(|r| r.mode == mode && r.direction == dir)
            {
                let pair = match (r.src, r.dst) {
                    (Some(s), Some(d)) => format!("{}->{}", s.0, d.0),
                    _ => "all".into(),
                };
                t.row([
                    pair,
                    if r.route.is_empty() {
                        "-".to_string()
                    } else {
                        r.route.clone()
                    },
                    ByteSize(r.bytes).to_string(),
                    significant(r.base_gbps),
                    significant(r.other_gbps),
                    format!("{:.3}", r.bandwidth_ratio),
                    format!("{:+.1}%", r.bandwidth_overhead_pct),
                    significant(r.base_latency_us),
                    significant(r.other_latency_us),
                    format!("{:+.1}%", r.latency_overhead_pct),
                ]);
            }
            out.push_str(&t.render());
        }
        out
    }
}
