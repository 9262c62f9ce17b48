//! A small SVG writer: rectangles, lines of text made of coloured runs,
//! paths, into a `String`. Every coordinate is absolute (no transforms), so a
//! reader of the file (or a test) sees where each box and text sits.

use std::fmt::Write;

use super::font::{self, FONT_FAMILY};

/// An axis-aligned rectangle in picture pixels.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Rect {
    /// Left edge.
    pub x: f64,
    /// Top edge.
    pub y: f64,
    /// Width.
    pub w: f64,
    /// Height.
    pub h: f64,
}

impl Rect {
    /// Whether the two rectangles share any area (touching edges do not).
    pub fn overlaps(&self, o: &Rect) -> bool {
        self.x < o.x + o.w && o.x < self.x + self.w && self.y < o.y + o.h && o.y < self.y + self.h
    }

    /// The rectangle grown by `d` on every side.
    pub fn inflate(&self, d: f64) -> Rect {
        Rect {
            x: self.x - d,
            y: self.y - d,
            w: self.w + 2.0 * d,
            h: self.h + 2.0 * d,
        }
    }

    /// The smallest rectangle holding both.
    pub fn union(&self, o: &Rect) -> Rect {
        let x = self.x.min(o.x);
        let y = self.y.min(o.y);
        Rect {
            x,
            y,
            w: (self.x + self.w).max(o.x + o.w) - x,
            h: (self.y + self.h).max(o.y + o.h) - y,
        }
    }
}

/// A piece of text in one colour.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// The text (single spaces; the renderer collapses runs of them).
    pub text: String,
    /// Its fill colour (`#rrggbb`).
    pub colour: String,
}

impl Run {
    /// A run in `colour`.
    pub fn new(text: impl Into<String>, colour: &str) -> Run {
        Run {
            text: text.into(),
            colour: colour.to_string(),
        }
    }
}

/// One line of text: runs side by side at one size.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// The runs, left to right.
    pub runs: Vec<Run>,
    /// Font size in pixels.
    pub size: f64,
}

impl Line {
    /// A line of one run in the default ink.
    pub fn plain(text: impl Into<String>, size: f64) -> Line {
        Line {
            runs: vec![Run::new(text, INK)],
            size,
        }
    }

    /// A line of one run in `colour`.
    pub fn coloured(text: impl Into<String>, size: f64, colour: &str) -> Line {
        Line {
            runs: vec![Run::new(text, colour)],
            size,
        }
    }

    /// The line's text, runs joined.
    pub fn text(&self) -> String {
        self.runs.iter().map(|r| r.text.as_str()).collect()
    }

    /// Its measured width in pixels.
    pub fn width(&self) -> f64 {
        font::text_width(&self.text(), self.size)
    }

    /// Its height in pixels (one line of the font).
    pub fn height(&self) -> f64 {
        font::line_height(self.size)
    }
}

/// The default text colour.
pub const INK: &str = "#1a1a1a";

/// Stroke and fill of a rectangle.
#[derive(Debug, Clone, PartialEq)]
pub struct Style {
    /// Fill colour, or `none`.
    pub fill: String,
    /// Stroke colour, or `none`.
    pub stroke: String,
    /// Stroke width in pixels.
    pub stroke_width: f64,
    /// Dashed outline.
    pub dashed: bool,
    /// Corner radius.
    pub radius: f64,
}

impl Style {
    /// A filled box with a thin solid outline.
    pub fn boxed(fill: &str, stroke: &str) -> Style {
        Style {
            fill: fill.into(),
            stroke: stroke.into(),
            stroke_width: 1.0,
            dashed: false,
            radius: 4.0,
        }
    }
}

/// Escapes text for XML character data and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// Formats a coordinate with at most one decimal (files stay small).
pub(crate) fn n(v: f64) -> String {
    let r = (v * 10.0).round() / 10.0;
    if r == r.trunc() {
        format!("{}", r as i64)
    } else {
        format!("{r:.1}")
    }
}

/// Where a line of text is anchored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    /// `x` is the left end.
    Start,
    /// `x` is the middle.
    Middle,
}

/// An SVG document being written.
#[derive(Debug)]
pub struct Svg {
    body: String,
    width: f64,
    height: f64,
    /// Every line of text written, as the box the layout gave it.
    pub texts: Vec<Rect>,
}

impl Svg {
    /// An empty picture of `width` x `height` pixels.
    pub fn new(width: f64, height: f64) -> Svg {
        Svg {
            body: String::new(),
            width: width.ceil(),
            height: height.ceil(),
            texts: Vec::new(),
        }
    }

    /// A rectangle; `data` become `data-NAME="VALUE"` attributes.
    pub fn rect(&mut self, r: Rect, style: &Style, data: &[(&str, String)]) {
        let _ = write!(
            self.body,
            r#"<rect x="{}" y="{}" width="{}" height="{}" rx="{}" fill="{}" stroke="{}" stroke-width="{}""#,
            n(r.x),
            n(r.y),
            n(r.w),
            n(r.h),
            n(style.radius),
            style.fill,
            style.stroke,
            n(style.stroke_width)
        );
        if style.dashed {
            self.body.push_str(r#" stroke-dasharray="6 3""#);
        }
        for (k, v) in data {
            let _ = write!(self.body, r#" data-{k}="{}""#, escape(v));
        }
        self.body.push_str("/>\n");
    }

    /// One line of text with its top-left (or top-middle) at (`x`, `y`);
    /// returns the box it takes.
    pub fn line(&mut self, x: f64, y: f64, line: &Line, anchor: Anchor) -> Rect {
        let w = line.width();
        let left = match anchor {
            Anchor::Start => x,
            Anchor::Middle => x - w / 2.0,
        };
        let _ = write!(
            self.body,
            r#"<text x="{}" y="{}" font-size="{}""#,
            n(x),
            n(y + font::baseline(line.size)),
            n(line.size)
        );
        if anchor == Anchor::Middle {
            self.body.push_str(r#" text-anchor="middle""#);
        }
        if let [only] = line.runs.as_slice() {
            let _ = writeln!(
                self.body,
                r#" fill="{}">{}</text>"#,
                only.colour,
                escape(&only.text)
            );
        } else {
            self.body.push('>');
            for r in &line.runs {
                let _ = write!(
                    self.body,
                    r#"<tspan fill="{}">{}</tspan>"#,
                    r.colour,
                    escape(&r.text)
                );
            }
            self.body.push_str("</text>\n");
        }
        let rect = Rect {
            x: left,
            y,
            w,
            h: line.height(),
        };
        self.texts.push(rect);
        rect
    }

    /// A path (`d` in SVG path syntax), stroked, not filled.
    pub fn path(&mut self, d: &str, stroke: &str, width: f64, data: &[(&str, String)]) {
        let _ = write!(
            self.body,
            r#"<path d="{d}" fill="none" stroke="{stroke}" stroke-width="{}""#,
            n(width),
        );
        for (k, v) in data {
            let _ = write!(self.body, r#" data-{k}="{}""#, escape(v));
        }
        self.body.push_str("/>\n");
    }

    /// Another SVG document placed at (`x`, `y`) as a nested `<svg>`
    /// (plotters' chart in `compare --svg`); its XML declaration is dropped.
    pub fn embed(&mut self, x: f64, y: f64, doc: &str) {
        let doc = match doc.find("<svg") {
            Some(i) => &doc[i..],
            None => doc,
        };
        let _ = writeln!(
            self.body,
            r#"<g data-embedded="chart"><svg x="{}" y="{}"{}</g>"#,
            n(x),
            n(y),
            doc.trim_start_matches("<svg")
        );
    }

    /// The finished document.
    pub fn finish(self) -> String {
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"{FONT_FAMILY}\">\n<rect x=\"0\" y=\"0\" width=\"{w}\" height=\"{h}\" fill=\"#ffffff\"/>\n{}</svg>\n",
            self.body,
            w = n(self.width),
            h = n(self.height),
        )
    }
}
