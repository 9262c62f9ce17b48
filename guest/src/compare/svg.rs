//! Bandwidth-vs-size curves of two runs, one panel per mode and direction,
//! drawn with plotters' SVG backend; under them the GPU x GPU heatmaps of
//! the ratio between the runs (p2p_report::picture::heatmap).

use std::path::Path;

use p2p_report::bench::{BenchReport, Direction, Mode};
use p2p_report::significant;
use p2p_topology::{ByteSize, GpuIndex};
use plotters::prelude::*;

/// Why the plot could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {why}")]
pub struct PlotError {
    /// The SVG file being drawn.
    pub path: String,
    /// What went wrong: plotters' error, or nothing to plot.
    pub why: String,
}

type Curve = Vec<(f64, f64)>;

fn curves(r: &BenchReport, mode: Mode, dir: Direction) -> Vec<(String, Curve)> {
    let mut keys: Vec<(Option<GpuIndex>, Option<GpuIndex>)> = r
        .results
        .iter()
        .filter(|m| m.mode == mode && m.direction == dir && m.verification.ok())
        .map(|m| (m.src, m.dst))
        .collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .map(|(s, d)| {
            let mut pts: Curve = r
                .results
                .iter()
                .filter(|m| {
                    m.mode == mode
                        && m.direction == dir
                        && m.src == s
                        && m.dst == d
                        && m.verification.ok()
                })
                .filter(|m| m.gbps.median > 0.0)
                .map(|m| ((m.bytes as f64).log2(), m.gbps.median))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let name = match (s, d) {
                (Some(s), Some(d)) => format!("{}->{}", s.0, d.0),
                _ => "all".into(),
            };
            (name, pts)
        })
        .collect()
}

/// The x axis is log2 of the copy size, so ticks land on powers of two and
/// read in the tables' units: "1 KiB", "32 MiB", "1 GiB".
fn binary_size(log2: f64) -> String {
    let r = log2.round();
    if (log2 - r).abs() < 1e-6 && (0.0..63.0).contains(&r) {
        ByteSize(1u64 << r as u32).to_string()
    } else {
        format!("2^{log2:.1} B")
    }
}

/// A run's colours, one per pair: blues for the base run, reds for the other.
const BASE_COLOURS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(23, 190, 207),
    RGBColor(44, 62, 140),
    RGBColor(120, 160, 220),
];
const OTHER_COLOURS: [RGBColor; 4] = [
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
    RGBColor(140, 20, 60),
    RGBColor(230, 120, 150),
];

/// Draws every mode/direction both runs measured into one SVG file, the
/// curves and under them the ratio heatmaps of `c` (their comparison).
pub fn draw(
    base: &BenchReport,
    other: &BenchReport,
    c: &super::Comparison,
    path: &Path,
) -> Result<usize, PlotError> {
    let (base_label, other_label) = (c.base_label.as_str(), c.other_label.as_str());
    let err = |why: String| PlotError {
        path: path.display().to_string(),
        why,
    };
    let mut panels = Vec::new();
    for mode in Mode::ALL.into_iter().filter(|m| *m != Mode::Pingpong) {
        for dir in [Direction::Uni, Direction::Bi] {
            let (b, o) = (curves(base, mode, dir), curves(other, mode, dir));
            if b.iter().chain(o.iter()).any(|(_, c)| c.len() >= 2) {
                panels.push((mode, dir, b, o));
            }
        }
    }
    if panels.is_empty() {
        return Err(err(
            "no mode has two or more sizes in either run: nothing to draw".into(),
        ));
    }
    let cols = 2usize;
    let rows = panels.len().div_ceil(cols);
    let size = (1200, 380 * rows as u32);
    let mut chart_svg = String::new();
    {
        let root = SVGBackend::with_string(&mut chart_svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
        let areas = root.split_evenly((rows, cols));
        for ((mode, dir, b, o), area) in panels.iter().zip(areas.iter()) {
            let all: Vec<(f64, f64)> = b
                .iter()
                .chain(o.iter())
                .flat_map(|(_, c)| c.iter().copied())
                .collect();
            let (xmin, xmax) = all
                .iter()
                .fold((f64::MAX, 0f64), |(lo, hi), p| (lo.min(p.0), hi.max(p.0)));
            let (ymin, ymax) = all
                .iter()
                .fold((f64::MAX, 0f64), |(lo, hi), p| (lo.min(p.1), hi.max(p.1)));
            let title = format!(
                "{mode} {}",
                if *dir == Direction::Bi {
                    "bidirectional"
                } else {
                    "unidirectional"
                }
            );
            let mut chart = ChartBuilder::on(area)
                .caption(title, ("sans-serif", 18))
                .margin(12)
                .x_label_area_size(36)
                .y_label_area_size(56)
                .build_cartesian_2d(
                    (xmin - 0.5)..(xmax + 0.5),
                    (ymin / 2.0..ymax * 2.0).log_scale(),
                )
                .map_err(|e| err(e.to_string()))?;
            chart
                .configure_mesh()
                .x_desc("bytes per copy")
                .y_desc("GB/s")
                .x_label_formatter(&|x| binary_size(*x))
                .y_label_formatter(&|y| significant(*y))
                .draw()
                .map_err(|e| err(e.to_string()))?;
            // One colour per pair (so 0->1 and 1->0 are told apart); the other
            // run dashed, so the runs differ without colour too.
            for (runs, colours, label, dashed) in [
                (b, &BASE_COLOURS, base_label, false),
                (o, &OTHER_COLOURS, other_label, true),
            ] {
                for (i, (name, pts)) in runs.iter().enumerate() {
                    let color = colours[i % colours.len()];
                    let style = color.stroke_width(2);
                    let series = if dashed {
                        chart.draw_series(DashedLineSeries::new(pts.iter().copied(), 6, 4, style))
                    } else {
                        chart.draw_series(LineSeries::new(pts.iter().copied(), style))
                    };
                    series
                        .map_err(|e| err(e.to_string()))?
                        .label(format!("{label} {name}"))
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
                    chart
                        .draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled())))
                        .map_err(|e| err(e.to_string()))?;
                }
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(|e| err(e.to_string()))?;
        }
        root.present().map_err(|e| err(e.to_string()))?;
    }
    let picture = ratio_picture(base, c, (&chart_svg, f64::from(size.0), f64::from(size.1)));
    std::fs::write(path, picture).map_err(|e| err(e.to_string()))?;
    Ok(panels.len())
}

/// The chart with the ratio heatmaps at the base run's headline size
/// (latency size for ping-pong) under it.
fn ratio_picture(base: &BenchReport, c: &super::Comparison, chart: (&str, f64, f64)) -> String {
    use p2p_report::picture::heatmap::{picture, ratio_maps, RatioCell};
    use p2p_report::picture::svg::Line;
    let cells: Vec<RatioCell> = c
        .rows
        .iter()
        .filter(|r| {
            r.bytes
                == if r.mode == Mode::Pingpong {
                    base.method.latency_bytes
                } else {
                    base.method.headline_bytes
                }
        })
        .filter_map(|r| {
            Some(RatioCell {
                mode: r.mode,
                direction: r.direction,
                src: r.src?.0,
                dst: r.dst?.0,
                ratio: if r.mode == Mode::Pingpong {
                    r.latency_ratio
                } else {
                    r.bandwidth_ratio
                },
                route: r.route.clone(),
            })
        })
        .collect();
    let what = format!("{} / {}", c.other_label, c.base_label);
    let maps = ratio_maps(base.gpus.len(), &cells, &what);
    let title = [Line::plain(
        format!(
            "{what}: bandwidth against copy size, and per pair the ratio at {}",
            ByteSize(base.method.headline_bytes)
        ),
        16.0,
    )];
    picture(&title, &maps, Some(chart))
}
