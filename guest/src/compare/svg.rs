//! Bandwidth-vs-size curves of two runs, one panel per mode and direction,
//! drawn with plotters' SVG backend.

use std::path::Path;

use p2p_shared::report::bench::{BenchReport, Direction, Mode};
use plotters::prelude::*;

/// Why the plot could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {why}")]
pub struct PlotError {
    pub path: String,
    pub why: String,
}

type Curve = Vec<(f64, f64)>;

fn curves(r: &BenchReport, mode: Mode, dir: Direction) -> Vec<(String, Curve)> {
    let mut keys: Vec<(Option<usize>, Option<usize>)> = r
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
                .map(|m| (m.bytes as f64, m.gbps.median))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let name = match (s, d) {
                (Some(s), Some(d)) => format!("{s}->{d}"),
                _ => "all".into(),
            };
            (name, pts)
        })
        .collect()
}

/// Tick labels fall on powers of ten: "10 B", "1 kB", "100 MB", "1 GB".
fn decimal_size(x: f64) -> String {
    for (unit, scale) in [("GB", 1e9), ("MB", 1e6), ("kB", 1e3)] {
        if x >= scale {
            return format!("{} {unit}", (x / scale).round());
        }
    }
    format!("{} B", x.round())
}

/// Draws every mode/direction both runs measured into one SVG file.
pub fn draw(
    base: &BenchReport,
    other: &BenchReport,
    base_label: &str,
    other_label: &str,
    path: &Path,
) -> Result<usize, PlotError> {
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
    let root = SVGBackend::new(path, (1200, 380 * rows as u32)).into_drawing_area();
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
                (xmin..xmax * 1.5).log_scale(),
                (ymin / 2.0..ymax * 2.0).log_scale(),
            )
            .map_err(|e| err(e.to_string()))?;
        chart
            .configure_mesh()
            .x_desc("bytes per copy")
            .y_desc("GB/s")
            .x_label_formatter(&|x| decimal_size(*x))
            .draw()
            .map_err(|e| err(e.to_string()))?;
        for (runs, color, label) in [(b, BLUE, base_label), (o, RED, other_label)] {
            for (name, pts) in runs {
                chart
                    .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
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
    Ok(panels.len())
}
