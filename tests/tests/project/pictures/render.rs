//! Rendering a picture as a reader would (resvg, DejaVu Sans) and reading
//! its boxes back from the SVG.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use p2p_tests::{binary, repo_root};
use serde_json::Value;

/// Debian's fonts-dejavu-core (scripts/setup.sh installs it).
pub(crate) const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// A text of a rendered picture and the box usvg laid it out in.
#[derive(Debug, Clone)]
pub(crate) struct Text {
    pub(crate) text: String,
    pub(crate) x: f32,
    pub(crate) y: f32,
    pub(crate) w: f32,
    pub(crate) h: f32,
}

/// What rendering a picture gave.
pub(crate) struct Rendered {
    pub(crate) texts: Vec<Text>,
    /// Pixels that are not white.
    pub(crate) inked: usize,
    pub(crate) png: Vec<u8>,
}

fn collect_texts(g: &resvg::usvg::Group, out: &mut Vec<Text>) {
    for node in g.children() {
        match node {
            resvg::usvg::Node::Group(g) => collect_texts(g, out),
            resvg::usvg::Node::Text(t) => {
                let b = t.abs_bounding_box();
                out.push(Text {
                    text: t.chunks().iter().map(|c| c.text()).collect(),
                    x: b.x(),
                    y: b.y(),
                    w: b.width(),
                    h: b.height(),
                });
            }
            _ => {}
        }
    }
}

/// Parses `svg` as XML, then lays it out and renders it with resvg.
pub(crate) fn render(svg: &str, what: &str) -> Rendered {
    roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("{what}: not XML: {e}"));
    assert!(
        Path::new(FONT).exists(),
        "{FONT} missing: install fonts-dejavu-core (bash scripts/setup.sh)"
    );
    let mut opt = resvg::usvg::Options::default();
    let font = std::fs::read(FONT).expect("DejaVu Sans reads");
    opt.fontdb_mut().load_font_data(font);
    // plotters' chart in compare's picture asks for the generic family.
    opt.fontdb_mut()
        .set_sans_serif_family(p2p_report::picture::font::FONT_FAMILY);
    let tree = resvg::usvg::Tree::from_str(svg, &opt)
        .unwrap_or_else(|e| panic!("{what}: usvg refuses it: {e}"));
    let size = tree.size().to_int_size();
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height())
        .unwrap_or_else(|| panic!("{what}: empty canvas {size:?}"));
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    let inked = pixmap
        .pixels()
        .iter()
        .filter(|p| (p.red(), p.green(), p.blue()) != (255, 255, 255) && p.alpha() > 0)
        .count();
    let mut texts = Vec::new();
    collect_texts(tree.root(), &mut texts);
    let png = pixmap.encode_png().expect("PNG encodes");
    // VP2P_PICTURES_PNG=DIR keeps every rendering, to look at.
    if let Some(dir) = std::env::var_os("VP2P_PICTURES_PNG") {
        let name: String = what
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        std::fs::write(Path::new(&dir).join(format!("{name}.png")), &png).unwrap();
    }
    Rendered { texts, inked, png }
}

/// The checks every picture passes: renders, not blank, every text drawn,
/// no two texts overlapping (beyond a hundredth of a pixel of rounding).
pub(crate) fn check_picture(svg: &str, what: &str) -> Rendered {
    let r = render(svg, what);
    assert!(r.png.starts_with(b"\x89PNG\r\n\x1a\n"), "{what}: no PNG");
    assert!(
        r.inked > 1000,
        "{what}: only {} pixels not white: blank",
        r.inked
    );
    assert!(!r.texts.is_empty(), "{what}: no text was laid out");
    for t in &r.texts {
        assert!(
            t.w > 0.0 && t.h > 0.0,
            "{what}: text {:?} has no box: font not used",
            t.text
        );
    }
    let eps = 0.01;
    for (i, a) in r.texts.iter().enumerate() {
        for b in &r.texts[i + 1..] {
            let overlap = a.x + eps < b.x + b.w
                && b.x + eps < a.x + a.w
                && a.y + eps < b.y + b.h
                && b.y + eps < a.y + a.h;
            assert!(!overlap, "{what}: texts overlap: {a:?} and {b:?}");
        }
    }
    r
}

pub(crate) fn has_text(r: &Rendered, needle: &str) -> bool {
    r.texts.iter().any(|t| t.text.contains(needle))
}

pub(crate) fn run_ok(name: &str, args: &[&str]) -> String {
    let out = Command::new(binary(name))
        .current_dir(repo_root())
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name} {}\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A `<rect>` with its `data-` attributes.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    pub(crate) x: f64,
    pub(crate) y: f64,
    pub(crate) w: f64,
    pub(crate) h: f64,
    pub(crate) fill: String,
    pub(crate) data: BTreeMap<String, String>,
}

impl Shape {
    fn contains(&self, o: &Shape) -> bool {
        self.x <= o.x
            && self.y <= o.y
            && o.x + o.w <= self.x + self.w
            && o.y + o.h <= self.y + self.h
            && (self.w, self.h) != (o.w, o.h)
    }
}

pub(crate) fn rects(svg: &str) -> Vec<Shape> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    doc.descendants()
        .filter(|n| n.has_tag_name("rect"))
        .map(|n| {
            let f = |k: &str| n.attribute(k).and_then(|v| v.parse().ok()).unwrap_or(0.0);
            Shape {
                x: f("x"),
                y: f("y"),
                w: f("width"),
                h: f("height"),
                fill: n.attribute("fill").unwrap_or_default().to_string(),
                data: n
                    .attributes()
                    .filter_map(|a| {
                        a.name()
                            .strip_prefix("data-")
                            .map(|k| (k.to_string(), a.value().to_string()))
                    })
                    .collect(),
            }
        })
        .collect()
}

/// Boxes with `data-box`, by their bus id or name.
pub(crate) fn boxes(svg: &str) -> BTreeMap<String, Shape> {
    rects(svg)
        .into_iter()
        .filter_map(|s| Some((s.data.get("box")?.clone(), s)))
        .collect()
}

/// The box each box lies in: the smallest other box holding it.
pub(crate) fn parents(svg: &str) -> BTreeMap<String, String> {
    let all = boxes(svg);
    all.iter()
        .filter_map(|(id, s)| {
            let p = all
                .iter()
                .filter(|(o, p)| *o != id && p.contains(s))
                .min_by(|a, b| (a.1.w * a.1.h).total_cmp(&(b.1.w * b.1.h)))?;
            Some((id.clone(), p.0.clone()))
        })
        .collect()
}

pub(crate) fn topo_svg(root: &Path, extra: &[&str]) -> (String, Value) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("topo.svg");
    let mut args = vec!["topo", "--sysfs-root", root.to_str().unwrap()];
    args.extend_from_slice(extra);
    let mut with_svg = args.clone();
    with_svg.extend(["--svg", out.to_str().unwrap()]);
    run_ok("p2p-host", &with_svg);
    let mut json = args.clone();
    json.push("--json");
    let report: Value = serde_json::from_str(&run_ok("p2p-host", &json)).unwrap();
    (std::fs::read_to_string(&out).unwrap(), report)
}

pub(crate) fn device_bdfs(report: &Value) -> Vec<String> {
    ["gpus", "nics", "nvswitches"]
        .iter()
        .flat_map(|k| report[k].as_array().unwrap().iter())
        .map(|d| d["bdf"].as_str().unwrap().to_string())
        .collect()
}
