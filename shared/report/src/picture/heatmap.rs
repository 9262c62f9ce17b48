//! Bench runs as heatmaps: one GPU x GPU grid per mode and direction, each
//! cell coloured against the best pair of its grid and labelled with the
//! median (GB/s, or microseconds for latency) and the pair's route; and the
//! same grid of the ratio between two runs for `compare --svg`.

use super::boxes::GAP;
use super::font::{line_height, text_width};
use super::svg::{Anchor, Line, Rect, Style, Svg, INK};
use super::{MARGIN, WRAP};
use crate::bench::{BenchReport, Direction, Measurement, Mode};
use crate::significant;
use p2p_topology::{ByteSize, GpuIndex};

const VALUE: f64 = 12.0;
const ROUTE: f64 = 10.0;
const HEAD: f64 = 12.0;

/// One cell of a grid.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// The figure as the cell shows it (`394.88`).
    pub label: String,
    /// The route of the pair (`nvlink`, `pcie-ats`, `pcie`, `local`), or
    /// its class when the run kept no route.
    pub route: String,
    /// 0..1: how close to the grid's best pair (1 is the best).
    pub shade: f64,
    /// The measurement did not verify: its figure is not valid.
    pub failed: bool,
}

/// One grid: a title, the GPUs' labels and `cells[src][dst]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Heatmap {
    /// `ce: unidirectional GB/s at 256 MiB`.
    pub title: String,
    /// `data-cell` prefix of its cells (`ce uni`).
    pub key: String,
    /// Row and column labels (GPU0, GPU1, ...).
    pub labels: Vec<String>,
    /// `cells[i][j]`, None where nothing was measured.
    pub cells: Vec<Vec<Option<Cell>>>,
}

/// Nothing to draw.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no pairwise measurement to draw (the run has {0} results, none of a GPU pair)")]
pub struct NothingToDraw(pub usize);

/// White to dark blue, by shade.
fn colour(shade: f64) -> String {
    let s = shade.clamp(0.0, 1.0);
    let lerp = |a: f64, b: f64| (a + (b - a) * s).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        lerp(247.0, 8.0),
        lerp(251.0, 69.0),
        lerp(255.0, 148.0)
    )
}

impl Heatmap {
    fn cell_size(&self) -> (f64, f64) {
        let widest = self
            .cells
            .iter()
            .flatten()
            .flatten()
            .map(|c| text_width(&c.label, VALUE).max(text_width(&c.route, ROUTE)))
            .chain(self.labels.iter().map(|l| text_width(l, HEAD)))
            .fold(0.0, f64::max);
        (
            (widest + 14.0).max(56.0),
            line_height(VALUE) + line_height(ROUTE) + 8.0,
        )
    }

    fn head_width(&self) -> f64 {
        self.labels
            .iter()
            .map(|l| text_width(l, HEAD))
            .fold(0.0, f64::max)
            + 10.0
    }

    /// Width and height the grid takes.
    pub fn size(&self) -> (f64, f64) {
        let (cw, ch) = self.cell_size();
        let n = self.labels.len() as f64;
        let grid_w = self.head_width() + n * cw;
        let w = grid_w.max(text_width(&self.title, 13.0));
        (w, line_height(13.0) + line_height(HEAD) + n * ch)
    }

    /// Draws the grid with its top-left at (`x`, `y`).
    pub fn draw(&self, x: f64, y: f64, svg: &mut Svg) {
        let (cw, ch) = self.cell_size();
        let hw = self.head_width();
        svg.line(x, y, &Line::plain(self.title.clone(), 13.0), Anchor::Start);
        let top = y + line_height(13.0);
        for (j, l) in self.labels.iter().enumerate() {
            let cx = x + hw + j as f64 * cw + cw / 2.0;
            svg.line(cx, top, &Line::plain(l.clone(), HEAD), Anchor::Middle);
        }
        let grid_top = top + line_height(HEAD);
        for (i, row) in self.cells.iter().enumerate() {
            let ry = grid_top + i as f64 * ch;
            svg.line(
                x,
                ry + (ch - line_height(HEAD)) / 2.0,
                &Line::plain(self.labels[i].clone(), HEAD),
                Anchor::Start,
            );
            for (j, cell) in row.iter().enumerate() {
                let r = Rect {
                    x: x + hw + j as f64 * cw,
                    y: ry,
                    w: cw,
                    h: ch,
                };
                let Some(c) = cell else {
                    svg.rect(r, &Style::boxed("#fafafa", "#d0d0d0"), &[]);
                    continue;
                };
                let fill = if c.failed {
                    "#f4c7c3".to_string()
                } else {
                    colour(c.shade)
                };
                let mut style = Style::boxed(&fill, "#ffffff");
                style.radius = 0.0;
                svg.rect(
                    r,
                    &style,
                    &[
                        ("cell", format!("{} {i} {j}", self.key)),
                        ("route", c.route.clone()),
                    ],
                );
                let ink = if c.shade > 0.55 && !c.failed {
                    "#ffffff"
                } else {
                    INK
                };
                let cx = r.x + cw / 2.0;
                svg.line(
                    cx,
                    r.y + 4.0,
                    &Line::coloured(c.label.clone(), VALUE, ink),
                    Anchor::Middle,
                );
                svg.line(
                    cx,
                    r.y + 4.0 + line_height(VALUE),
                    &Line::coloured(c.route.clone(), ROUTE, ink),
                    Anchor::Middle,
                );
            }
        }
    }
}

/// Grids side by side, wrapping at the picture width, under `title` and
/// under an embedded chart of (`svg`, width, height) when given.
pub fn picture(title: &[Line], maps: &[Heatmap], chart: Option<(&str, f64, f64)>) -> String {
    let mut y = MARGIN;
    let mut width = MARGIN;
    for l in title {
        width = width.max(MARGIN + l.width());
    }
    let title_h: f64 = title.iter().map(Line::height).sum();
    let chart_h = chart.map_or(0.0, |c| c.2 + GAP);
    if let Some(c) = chart {
        width = width.max(MARGIN + c.1);
    }
    y += title_h + chart_h + GAP;
    // Rows of grids.
    let mut places = Vec::new();
    let (mut x, mut row_h) = (MARGIN, 0.0f64);
    for m in maps {
        let (w, h) = m.size();
        if x > MARGIN && x + w > WRAP {
            y += row_h + 2.0 * GAP;
            x = MARGIN;
            row_h = 0.0;
        }
        places.push((x, y));
        x += w + 2.0 * GAP;
        width = width.max(x);
        row_h = row_h.max(h);
    }
    let mut svg = Svg::new(width + MARGIN, y + row_h + MARGIN);
    let mut ty = MARGIN;
    for l in title {
        svg.line(MARGIN, ty, l, Anchor::Start);
        ty += l.height();
    }
    if let Some((doc, _, _)) = chart {
        svg.embed(MARGIN, ty + GAP / 2.0, doc);
    }
    for (m, (x, y)) in maps.iter().zip(places) {
        m.draw(x, y, &mut svg);
    }
    svg.finish()
}

fn measured_size(r: &BenchReport, mode: Mode, want: u64, largest: bool) -> Option<u64> {
    let sizes = r.results.iter().filter(|m| m.mode == mode).map(|m| m.bytes);
    if r.results.iter().any(|m| m.mode == mode && m.bytes == want) {
        return Some(want);
    }
    if largest {
        sizes.max()
    } else {
        sizes.min()
    }
}

/// The route a bench report gives the pair `i`->`j`: its recorded route;
/// in runs recorded before routes were kept, `nvlink` for an NVLink class
/// (`NV18`) and the class otherwise; `local` on the diagonal.
pub fn route_of(r: &BenchReport, i: usize, j: usize) -> String {
    if i == j {
        return "local".into();
    }
    r.pairs
        .iter()
        .find(|p| p.src.0 == i && p.dst.0 == j)
        .map(|p| {
            if !p.route.is_empty() {
                p.route.clone()
            } else if p.class.starts_with("NV") {
                "nvlink".into()
            } else {
                p.class.clone()
            }
        })
        .unwrap_or_default()
}

fn dir_word(d: Direction) -> &'static str {
    match d {
        Direction::Uni => "uni",
        Direction::Bi => "bi",
    }
}

/// The grids of one run: each pairwise copy mode at the headline size, one
/// direction each; ping-pong latency at the latency size.
pub fn bench_maps(r: &BenchReport) -> Vec<Heatmap> {
    let n = r.gpus.len();
    let labels: Vec<String> = (0..n).map(|i| GpuIndex(i).to_string()).collect();
    let mut maps = Vec::new();
    for mode in Mode::ALL.into_iter().filter(|m| m.is_pairwise()) {
        let latency = mode == Mode::Pingpong;
        let Some(size) = (if latency {
            measured_size(r, mode, r.method.latency_bytes, false)
        } else {
            measured_size(r, mode, r.method.headline_bytes, true)
        }) else {
            continue;
        };
        for dir in [Direction::Uni, Direction::Bi] {
            let find = |i: usize, j: usize| -> Option<&Measurement> {
                let (a, b) = match dir {
                    Direction::Bi => (i.min(j), i.max(j)),
                    Direction::Uni => (i, j),
                };
                r.find(mode, dir, Some(GpuIndex(a)), Some(GpuIndex(b)), size)
            };
            let value = |m: &Measurement| {
                if latency {
                    m.latency_us.median
                } else {
                    m.gbps.median
                }
            };
            let ok: Vec<f64> = (0..n)
                .flat_map(|i| (0..n).map(move |j| (i, j)))
                .filter_map(|(i, j)| find(i, j))
                .filter(|m| m.verification.ok())
                .map(value)
                .filter(|v| *v > 0.0)
                .collect();
            if ok.is_empty() {
                continue;
            }
            let best = if latency {
                ok.iter().copied().fold(f64::MAX, f64::min)
            } else {
                ok.iter().copied().fold(0.0, f64::max)
            };
            let cells = (0..n)
                .map(|i| {
                    (0..n)
                        .map(|j| {
                            let m = find(i, j)?;
                            let v = value(m);
                            let failed = !m.verification.ok();
                            Some(Cell {
                                label: if failed {
                                    "FAIL".into()
                                } else {
                                    significant(v)
                                },
                                route: route_of(r, i, j),
                                shade: if failed || v <= 0.0 {
                                    0.0
                                } else if latency {
                                    best / v
                                } else {
                                    v / best
                                },
                                failed,
                            })
                        })
                        .collect()
                })
                .collect();
            let what = match (latency, dir) {
                (true, _) => "one-way latency (µs)",
                (false, Direction::Uni) => "unidirectional GB/s",
                (false, Direction::Bi) => "bidirectional GB/s (both directions)",
            };
            maps.push(Heatmap {
                title: format!("{mode}: {what} at {}", ByteSize(size)),
                key: format!("{mode} {}", dir_word(dir)),
                labels: labels.clone(),
                cells,
            });
        }
    }
    maps
}

/// `p2p-guest bench --svg`: every grid of the run.
pub fn bench_svg(r: &BenchReport) -> Result<String, NothingToDraw> {
    let maps = bench_maps(r);
    if maps.is_empty() {
        return Err(NothingToDraw(r.results.len()));
    }
    let gpus: Vec<String> = r
        .gpus
        .iter()
        .enumerate()
        .map(|(i, g)| format!("{} {} {}", GpuIndex(i), g.bdf, g.name))
        .collect();
    let title = [
        Line::plain(format!("vp2p bench \"{}\" on {}", r.label, r.machine.hostname), 16.0),
        Line::plain(gpus.join(" · "), 12.0),
        Line::plain(
            "each cell: median of the samples, coloured against the grid's best pair; under it the pair's route",
            12.0,
        ),
    ];
    Ok(picture(&title, &maps, None))
}

/// One matched figure of two runs for the ratio grids.
#[derive(Debug, Clone, PartialEq)]
pub struct RatioCell {
    /// How the bytes moved.
    pub mode: Mode,
    /// One direction or both.
    pub direction: Direction,
    /// Source GPU index.
    pub src: usize,
    /// Destination GPU index.
    pub dst: usize,
    /// other / base (bandwidth; latency for ping-pong).
    pub ratio: f64,
    /// The pair's route.
    pub route: String,
}

/// The ratio grids of `compare --svg`: for each mode and direction, other
/// over base per pair, coloured against the grid's best ratio (highest for
/// bandwidth, lowest for latency).
pub fn ratio_maps(gpus: usize, cells: &[RatioCell], what: &str) -> Vec<Heatmap> {
    let labels: Vec<String> = (0..gpus).map(|i| GpuIndex(i).to_string()).collect();
    let mut maps = Vec::new();
    for mode in Mode::ALL {
        for dir in [Direction::Uni, Direction::Bi] {
            let mine: Vec<&RatioCell> = cells
                .iter()
                .filter(|c| c.mode == mode && c.direction == dir && c.src < gpus && c.dst < gpus)
                .filter(|c| c.ratio.is_finite() && c.ratio > 0.0)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let latency = mode == Mode::Pingpong;
            let best = if latency {
                mine.iter().map(|c| c.ratio).fold(f64::MAX, f64::min)
            } else {
                mine.iter().map(|c| c.ratio).fold(0.0, f64::max)
            };
            let mut grid: Vec<Vec<Option<Cell>>> = vec![vec![None; gpus]; gpus];
            for c in &mine {
                let cell = Cell {
                    label: format!("{}x", significant(c.ratio)),
                    route: c.route.clone(),
                    shade: if latency {
                        best / c.ratio
                    } else {
                        c.ratio / best
                    },
                    failed: false,
                };
                grid[c.src][c.dst] = Some(cell.clone());
                if dir == Direction::Bi && grid[c.dst][c.src].is_none() {
                    grid[c.dst][c.src] = Some(cell);
                }
            }
            let unit = if latency { "latency" } else { "bandwidth" };
            maps.push(Heatmap {
                title: format!("{mode} {}: {unit} ratio {what}", dir_word(dir)),
                key: format!("{mode} {}", dir_word(dir)),
                labels: labels.clone(),
                cells: grid,
            });
        }
    }
    maps
}
