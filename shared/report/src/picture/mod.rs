//! Pictures: the host's PCIe tree, a plan on it and a bench run's
//! heatmaps, as SVG text. Pure: the layout (nested boxes, sizes, positions,
//! text measured with the font's advances) and the writer live here;
//! `p2p-host` and `p2p-guest` only write the file.
//!
//! Every text names one font family ([`font::FONT_FAMILY`], DejaVu Sans) and
//! is measured with its advance widths, so no two texts overlap when drawn
//! with it. Boxes carry `data-box` (bus id or host bridge name) and
//! `data-kind` attributes so a reader can find them again.

pub mod boxes;
pub mod font;
pub mod heatmap;
mod labels;
pub mod nvlink;
pub mod plan;
pub mod svg;
pub mod topo;

use std::collections::BTreeMap;

use boxes::{layout, BoxNode, Flow};
use svg::{Rect, Style, Svg};

use crate::TopoReport;
use p2p_topology::bdf::Bdf;
use p2p_topology::topology::Topology;

/// Margin around a picture.
pub const MARGIN: f64 = 12.0;
/// Width at which rows of boxes wrap.
pub const WRAP: f64 = 1500.0;

/// Outline colours of IOMMU groups, by group number.
const GROUP_COLOURS: [&str; 6] = [
    "#5c6bc0", "#00897b", "#8e24aa", "#f4511e", "#3949ab", "#6d4c41",
];

/// Lays `root` out and draws it, with the topology's IOMMU groups outlined
/// and, under the tree, its NVLinks as edges between the GPUs.
pub(crate) fn render(root: &BoxNode, topo: Option<&Topology>) -> String {
    let laid = layout(root, MARGIN, MARGIN, WRAP);
    let mut placed = Vec::new();
    boxes::placed(root, &laid, &mut placed);
    let tree: BTreeMap<Bdf, Rect> = placed
        .iter()
        .filter_map(|(n, r)| Some((n.datum("box")?.parse::<Bdf>().ok()?, *r)))
        .collect();
    let labels: BTreeMap<Bdf, String> = placed
        .iter()
        .filter_map(|(n, _)| {
            Some((
                n.datum("box")?.parse::<Bdf>().ok()?,
                n.datum("label")?.to_string(),
            ))
        })
        .collect();
    let top = laid.rect.y + laid.rect.h + boxes::GAP;
    let panel = topo.map(|t| nvlink::Panel::new(t, &labels, MARGIN, top));
    let (pw, ph) = panel.as_ref().map_or((0.0, 0.0), |p| (p.width, p.height));
    let mut svg = Svg::new(
        (laid.rect.x + laid.rect.w).max(MARGIN + pw) + MARGIN,
        if ph > 0.0 {
            top + ph
        } else {
            laid.rect.y + laid.rect.h
        } + MARGIN,
    );
    boxes::draw_rects(root, &laid, &mut svg);
    if let Some(t) = topo {
        outline_groups(t, &tree, &mut svg);
    }
    boxes::draw_texts(root, &laid, &mut svg);
    if let Some(p) = &panel {
        p.draw(&mut svg);
    }
    svg.finish()
}

/// A dashed outline around the boxes of every IOMMU group that holds more
/// than one drawn function (a group of one is said in its box's text).
fn outline_groups(topo: &Topology, tree: &BTreeMap<Bdf, Rect>, svg: &mut Svg) {
    let mut groups: BTreeMap<p2p_topology::IommuGroup, Vec<Rect>> = BTreeMap::new();
    for (b, r) in tree {
        if let Some(g) = topo.function(*b).and_then(|f| f.iommu_group) {
            groups.entry(g).or_default().push(*r);
        }
    }
    for (g, rects) in groups.into_iter().filter(|(_, r)| r.len() > 1) {
        let all = rects.iter().skip(1).fold(rects[0], |a, r| a.union(r));
        let mut style = Style::boxed("none", GROUP_COLOURS[g.0 as usize % GROUP_COLOURS.len()]);
        style.dashed = true;
        style.stroke_width = 1.5;
        svg.rect(all.inflate(3.0), &style, &[("iommu-group", g.to_string())]);
    }
}

/// `p2p-host topo --svg`: the PCIe tree of `topo` with the devices of
/// `report` (its GPUs, NICs and NVSwitches, their ATS as `topo` read it);
/// `source` names the tree in the title (the path as given, so a picture
/// of a fixture is the same in every checkout).
pub fn topo_svg(topo: &Topology, report: &TopoReport, source: &str) -> String {
    let header = BoxNode {
        lines: topo::title(report, source),
        ..BoxNode::group(Flow::Column, Vec::new())
    };
    let root = BoxNode::group(
        Flow::Column,
        vec![
            header,
            topo::tree_legend(),
            topo::tree(topo, report, &topo::Paint::default()),
        ],
    );
    render(&root, Some(topo))
}
