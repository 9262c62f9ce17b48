//! NVLinks under the tree: the GPUs of each NVLink-joined set on a circle,
//! an edge per bond labelled with its link count (`NV18`) where the label
//! meets no other text. Nodes are drawn over the edges, so an edge never
//! crosses a GPU's text.

use std::collections::BTreeMap;
use std::f64::consts::PI;

use super::boxes::{GAP, PAD};
use super::svg::{Anchor, Line, Rect, Style, Svg};
use super::topo::{GPU_FILL, NVLINK, TEXT, TITLE};
use super::WRAP;
use p2p_topology::bdf::Bdf;
use p2p_topology::topology::{NvLink, Topology};

/// A set whose every pair is bonded with the same count: one caption says
/// so instead of a label per edge.
struct Caption {
    x: f64,
    y: f64,
    line: Line,
}

struct Node {
    bdf: Bdf,
    lines: [Line; 2],
    rect: Rect,
}

/// The NVLink panel, laid out.
pub(crate) struct Panel {
    title: Option<(f64, f64, Line)>,
    nodes: Vec<Node>,
    captions: Vec<Caption>,
    /// GPUs of sets that have a caption (their edges get no label).
    captioned: Vec<Bdf>,
    links: Vec<NvLink>,
    /// Width taken.
    pub width: f64,
    /// Height taken (0 without NVLinks).
    pub height: f64,
}

impl Panel {
    /// Lays out the NVLinks of `topo` between the GPUs that have a box
    /// (`labels`: bus id -> GPU label) from (`x`, `y`) down.
    pub fn new(topo: &Topology, labels: &BTreeMap<Bdf, String>, x: f64, y: f64) -> Panel {
        let links: Vec<NvLink> = topo
            .nvlinks
            .iter()
            .filter(|l| labels.contains_key(&l.a) && labels.contains_key(&l.b))
            .copied()
            .collect();
        let mut panel = Panel {
            title: None,
            nodes: Vec::new(),
            captions: Vec::new(),
            captioned: Vec::new(),
            links,
            width: 0.0,
            height: 0.0,
        };
        if panel.links.is_empty() {
            return panel;
        }
        // Sets of GPUs joined by NVLink (union-find over the bonds).
        let mut set: BTreeMap<Bdf, Bdf> = BTreeMap::new();
        fn find(set: &BTreeMap<Bdf, Bdf>, mut b: Bdf) -> Bdf {
            while let Some(p) = set.get(&b).filter(|p| **p != b) {
                b = *p;
            }
            b
        }
        for l in &panel.links {
            set.entry(l.a).or_insert(l.a);
            set.entry(l.b).or_insert(l.b);
            let (ra, rb) = (find(&set, l.a), find(&set, l.b));
            if ra != rb {
                set.insert(ra.max(rb), ra.min(rb));
            }
        }
        let mut groups: BTreeMap<Bdf, Vec<Bdf>> = BTreeMap::new();
        for b in set.keys() {
            groups.entry(find(&set, *b)).or_default().push(*b);
        }
        let title = Line::plain(
            "NVLink: GPUs joined by NVLinks (NVn: a bond of n links)",
            TITLE,
        );
        let mut top = y + title.height() + GAP / 2.0;
        panel.title = Some((x, y, title));
        let (mut cx, mut row_h) = (x, 0.0f64);
        for gpus in groups.values() {
            let nodes: Vec<[Line; 2]> = gpus
                .iter()
                .map(|b| {
                    [
                        Line::plain(labels[b].clone(), TEXT),
                        Line::plain(b.to_string(), TEXT),
                    ]
                })
                .collect();
            let w = nodes
                .iter()
                .flat_map(|l| l.iter().map(Line::width))
                .fold(0.0, f64::max)
                + 2.0 * PAD;
            let h = 2.0 * Line::plain("", TEXT).height() + 2.0 * PAD;
            let n = gpus.len() as f64;
            let r = (n * (w + 2.0 * GAP) / (2.0 * PI)).max(w);
            // Every pair bonded, all with one count: a caption under the circle.
            let bonds: Vec<&NvLink> = panel.links.iter().filter(|l| gpus.contains(&l.a)).collect();
            let k = gpus.len();
            let uniform = bonds.len() == k * (k - 1) / 2
                && bonds.iter().all(|l| l.count == bonds[0].count)
                && k > 2;
            let caption = uniform.then(|| {
                Line::coloured(
                    match bonds[0].count {
                        Some(c) => format!("NV{c} between every pair"),
                        None => "NVLink between every pair".into(),
                    },
                    TEXT,
                    NVLINK,
                )
            });
            let cap_h = caption.as_ref().map_or(0.0, |c| c.height() + GAP / 2.0);
            let gw = (2.0 * r + w).max(caption.as_ref().map_or(0.0, Line::width));
            let gh = 2.0 * r + h + cap_h;
            if cx > x && cx + gw > WRAP {
                top += row_h + GAP;
                cx = x;
                row_h = 0.0;
            }
            let (ox, oy) = (cx + r + w / 2.0, top + r + h / 2.0);
            for (i, (b, lines)) in gpus.iter().zip(nodes).enumerate() {
                let a = -PI / 2.0 + 2.0 * PI * i as f64 / n;
                let (px, py) = (ox + r * a.cos(), oy + r * a.sin());
                panel.nodes.push(Node {
                    bdf: *b,
                    lines,
                    rect: Rect {
                        x: px - w / 2.0,
                        y: py - h / 2.0,
                        w,
                        h,
                    },
                });
            }
            if let Some(line) = caption {
                panel.captions.push(Caption {
                    x: ox,
                    y: oy + r + h / 2.0 + GAP / 2.0,
                    line,
                });
                panel.captioned.extend(gpus.iter().copied());
            }
            cx += gw + 2.0 * GAP;
            row_h = row_h.max(gh);
            panel.width = panel.width.max(cx - x);
        }
        panel.height = top + row_h - y;
        panel
    }

    fn centre(&self, b: Bdf) -> Option<(f64, f64)> {
        let n = self.nodes.iter().find(|n| n.bdf == b)?;
        Some((n.rect.x + n.rect.w / 2.0, n.rect.y + n.rect.h / 2.0))
    }

    /// Edges, then the GPU nodes over them, then the link counts where
    /// they meet no text or node.
    pub fn draw(&self, svg: &mut Svg) {
        let Some((tx, ty, title)) = &self.title else {
            return;
        };
        svg.line(*tx, *ty, title, Anchor::Start);
        let mut edges = Vec::new();
        for l in &self.links {
            let (Some(a), Some(b)) = (self.centre(l.a), self.centre(l.b)) else {
                continue;
            };
            svg.path(
                &format!(
                    "M{} {} L{} {}",
                    super::svg::n(a.0),
                    super::svg::n(a.1),
                    super::svg::n(b.0),
                    super::svg::n(b.1)
                ),
                NVLINK,
                2.0,
                &[("nvlink", format!("{} {}", l.a, l.b))],
            );
            edges.push((l, a, b));
        }
        let mut taken: Vec<Rect> = self.nodes.iter().map(|n| n.rect).collect();
        taken.extend(svg.texts.iter().copied());
        for n in &self.nodes {
            let mut style = Style::boxed(GPU_FILL, "#4d4d4d");
            style.stroke_width = 1.0;
            svg.rect(n.rect, &style, &[("nvlink-gpu", n.bdf.to_string())]);
            let mut y = n.rect.y + PAD;
            for l in &n.lines {
                svg.line(n.rect.x + PAD, y, l, Anchor::Start);
                y += l.height();
            }
        }
        for c in &self.captions {
            svg.line(c.x, c.y, &c.line, Anchor::Middle);
        }
        for (l, a, b) in edges {
            if self.captioned.contains(&l.a) {
                continue;
            }
            let line = Line::coloured(
                match l.count {
                    Some(c) => format!("NV{c}"),
                    None => "NVLink".into(),
                },
                11.0,
                NVLINK,
            );
            for t in [0.5, 0.4, 0.6, 0.3, 0.7] {
                let (x, y) = (a.0 + (b.0 - a.0) * t, a.1 + (b.1 - a.1) * t);
                let r = Rect {
                    x: x - line.width() / 2.0,
                    y: y - line.height() / 2.0,
                    w: line.width(),
                    h: line.height(),
                };
                if taken.iter().any(|o| o.inflate(1.0).overlaps(&r)) {
                    continue;
                }
                taken.push(r);
                svg.rect(r.inflate(1.0), &Style::boxed("#ffffff", "none"), &[]);
                svg.line(x, r.y, &line, Anchor::Middle);
                break;
            }
        }
    }
}
