//! Nested boxes, the shape of every tree picture: a box holds lines of text
//! at its top and its children below, in rows that wrap at a width limit
//! (or in a column). Sizes come from the measured text, so a box is as wide
//! as its widest line or row of children and nothing inside it overlaps.

use super::svg::{Anchor, Line, Rect, Style, Svg};

/// Space between a box's border and what it holds.
pub const PAD: f64 = 7.0;
/// Space between sibling boxes, and between a box's text and its children.
pub const GAP: f64 = 10.0;

/// How a box arranges its children.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Left to right, wrapping onto a new row at the width limit.
    Row,
    /// Top to bottom.
    Column,
}

/// A box of the picture before layout.
#[derive(Debug, Clone)]
pub struct BoxNode {
    /// `data-NAME` attributes of its rectangle (`box` = the bus id or name,
    /// `kind` = gpu, nic, root-port, ...), for readers and tests.
    pub data: Vec<(&'static str, String)>,
    /// Lines of text at its top.
    pub lines: Vec<Line>,
    /// Its outline and fill; None for an invisible grouping box.
    pub style: Option<Style>,
    /// How its children are arranged.
    pub flow: Flow,
    /// The boxes inside it.
    pub children: Vec<BoxNode>,
}

impl BoxNode {
    /// A visible box with `lines`, no children yet.
    pub fn new(style: Style, lines: Vec<Line>) -> BoxNode {
        BoxNode {
            data: Vec::new(),
            lines,
            style: Some(style),
            flow: Flow::Row,
            children: Vec::new(),
        }
    }

    /// An invisible box stacking `children` in `flow`.
    pub fn group(flow: Flow, children: Vec<BoxNode>) -> BoxNode {
        BoxNode {
            data: Vec::new(),
            lines: Vec::new(),
            style: None,
            flow,
            children,
        }
    }

    /// The value of its `data-NAME` attribute.
    pub fn datum(&self, name: &str) -> Option<&str> {
        self.data
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A box after layout: where it sits, and where its children sit.
#[derive(Debug, Clone)]
pub struct Laid {
    /// Its rectangle in picture pixels.
    pub rect: Rect,
    /// Its children, in the order of [`BoxNode::children`].
    pub children: Vec<Laid>,
}

fn pad(node: &BoxNode) -> f64 {
    if node.style.is_some() {
        PAD
    } else {
        0.0
    }
}

fn header(node: &BoxNode) -> (f64, f64) {
    let w = node.lines.iter().map(Line::width).fold(0.0, f64::max);
    let h = node.lines.iter().map(Line::height).sum();
    (w, h)
}

/// Lays `node` out at (`x`, `y`) no wider than `max_w` where its children
/// can wrap (a single line or child wider than that keeps its width).
pub fn layout(node: &BoxNode, x: f64, y: f64, max_w: f64) -> Laid {
    let p = pad(node);
    let (hw, hh) = header(node);
    let inner = (max_w - 2.0 * p).max(1.0);
    let mut kids: Vec<Laid> = node
        .children
        .iter()
        .map(|c| layout(c, 0.0, 0.0, inner))
        .collect();
    let top = y
        + p
        + hh
        + if hh > 0.0 && !kids.is_empty() {
            GAP / 2.0
        } else {
            0.0
        };
    let (mut cx, mut cy, mut row_h, mut right) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for k in kids.iter_mut() {
        let (w, h) = (k.rect.w, k.rect.h);
        let wrap = match node.flow {
            Flow::Row => cx > 0.0 && cx + w > inner,
            Flow::Column => cx > 0.0,
        };
        if wrap {
            cy += row_h + GAP;
            cx = 0.0;
            row_h = 0.0;
        }
        shift(k, x + p + cx, top + cy);
        cx += w + GAP;
        right = right.max(cx - GAP);
        row_h = row_h.max(h);
    }
    let kids_h = if kids.is_empty() { 0.0 } else { cy + row_h };
    let w = hw.max(right) + 2.0 * p;
    let h = (top - y) + kids_h + p;
    Laid {
        rect: Rect { x, y, w, h },
        children: kids,
    }
}

fn shift(l: &mut Laid, dx: f64, dy: f64) {
    l.rect.x += dx;
    l.rect.y += dy;
    for c in &mut l.children {
        shift(c, dx, dy);
    }
}

/// Every box's rectangle, with the node, parents before children.
pub fn placed<'a>(node: &'a BoxNode, laid: &Laid, out: &mut Vec<(&'a BoxNode, Rect)>) {
    out.push((node, laid.rect));
    for (c, l) in node.children.iter().zip(&laid.children) {
        placed(c, l, out);
    }
}

/// Draws every visible box's rectangle, parents first (under children).
pub fn draw_rects(node: &BoxNode, laid: &Laid, svg: &mut Svg) {
    if let Some(style) = &node.style {
        svg.rect(laid.rect, style, &node.data);
    }
    for (c, l) in node.children.iter().zip(&laid.children) {
        draw_rects(c, l, svg);
    }
}

/// Draws every box's lines of text.
pub fn draw_texts(node: &BoxNode, laid: &Laid, svg: &mut Svg) {
    let p = pad(node);
    let mut y = laid.rect.y + p;
    for line in &node.lines {
        svg.line(laid.rect.x + p, y, line, Anchor::Start);
        y += line.height();
    }
    for (c, l) in node.children.iter().zip(&laid.children) {
        draw_texts(c, l, svg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(text: &str) -> BoxNode {
        BoxNode::new(Style::boxed("#fff", "#000"), vec![Line::plain(text, 12.0)])
    }

    #[test]
    fn rows_wrap_at_the_limit_and_children_sit_inside_their_parent() {
        let mut parent = BoxNode::new(Style::boxed("#fff", "#000"), vec![Line::plain("p", 12.0)]);
        parent.children = (0..6).map(|i| leaf(&format!("child number {i}"))).collect();
        let one = layout(&leaf("child number 0"), 0.0, 0.0, 1e9).rect.w;
        // Room for two children per row: three rows.
        let laid = layout(&parent, 5.0, 5.0, 2.0 * PAD + 2.0 * one + GAP + 1.0);
        let ys: Vec<f64> = laid.children.iter().map(|c| c.rect.y).collect();
        assert_eq!(ys[0], ys[1]);
        assert!(ys[2] > ys[1] && ys[2] == ys[3] && ys[4] > ys[3]);
        for (i, a) in laid.children.iter().enumerate() {
            let r = a.rect;
            let p = laid.rect;
            assert!(r.x >= p.x + PAD && r.y > p.y && r.x + r.w <= p.x + p.w - PAD + 1e-9);
            assert!(r.y + r.h <= p.y + p.h - PAD + 1e-9);
            for b in &laid.children[i + 1..] {
                assert!(!r.overlaps(&b.rect));
            }
        }
    }
}
