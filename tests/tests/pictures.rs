//! The pictures (`topo --svg`, `plan --svg`, `bench --svg`, `compare --svg`)
//! as a reader sees them: each file parses as XML and renders with resvg
//! (text laid out by usvg with DejaVu Sans, the family every picture names,
//! loaded from fonts-dejavu-core's file) to a PNG that is not blank; every
//! device's bus id is a text of the picture; no two texts overlap, measured
//! from usvg's own text boxes (glyph advances and the font's ascender and
//! descender, kerning applied); the boxes nest as the sysfs tree does; the
//! plan's colours are `plan --json`'s cliques; each heatmap cell says the
//! recorded run's figure.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use p2p_tests::{binary, fixture_dir, repo_root, unpack_fixture};
use serde_json::Value;

/// Debian's fonts-dejavu-core (scripts/setup.sh installs it).
const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// A text of a rendered picture and the box usvg laid it out in.
#[derive(Debug, Clone)]
struct Text {
    text: String,
    x: f32,
    y: f32,
    w: f32,
    h: f32,
}

/// What rendering a picture gave.
struct Rendered {
    texts: Vec<Text>,
    /// Pixels that are not white.
    inked: usize,
    png: Vec<u8>,
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
fn render(svg: &str, what: &str) -> Rendered {
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
        .set_sans_serif_family(p2p_shared::picture::font::FONT_FAMILY);
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
fn check_picture(svg: &str, what: &str) -> Rendered {
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

fn has_text(r: &Rendered, needle: &str) -> bool {
    r.texts.iter().any(|t| t.text.contains(needle))
}

fn run_ok(name: &str, args: &[&str]) -> String {
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
struct Shape {
    x: f64,
    y: f64,
    w: f64,
    h: f64,
    fill: String,
    data: BTreeMap<String, String>,
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

fn rects(svg: &str) -> Vec<Shape> {
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
fn boxes(svg: &str) -> BTreeMap<String, Shape> {
    rects(svg)
        .into_iter()
        .filter_map(|s| Some((s.data.get("box")?.clone(), s)))
        .collect()
}

/// The box each box lies in: the smallest other box holding it.
fn parents(svg: &str) -> BTreeMap<String, String> {
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

fn topo_svg(root: &Path, extra: &[&str]) -> (String, Value) {
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

fn device_bdfs(report: &Value) -> Vec<String> {
    ["gpus", "nics", "nvswitches"]
        .iter()
        .flat_map(|k| report[k].as_array().unwrap().iter())
        .map(|d| d["bdf"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn font_table_matches_dejavu_sans() {
    use p2p_shared::picture::font;
    let data = std::fs::read(FONT)
        .unwrap_or_else(|e| panic!("{FONT}: {e}: install fonts-dejavu-core (scripts/setup.sh)"));
    let face = ttf_parser::Face::parse(&data, 0).unwrap();
    assert_eq!(face.units_per_em(), font::UNITS_PER_EM);
    assert_eq!(face.ascender(), font::ASCENDER);
    assert_eq!(face.descender(), font::DESCENDER);
    let from_font: Vec<(char, u16)> = font::ADVANCES
        .iter()
        .map(|(c, _)| {
            let g = face
                .glyph_index(*c)
                .unwrap_or_else(|| panic!("{c:?} not in the font"));
            (*c, face.glyph_hor_advance(g).unwrap())
        })
        .collect();
    if std::env::var_os("VP2P_WRITE_FONT_TABLE").is_some() {
        let path = repo_root().join("shared/src/picture/font.rs");
        let text = std::fs::read_to_string(&path).unwrap();
        let (head, rest) = text.split_once("    // generated: begin\n").unwrap();
        let (_, tail) = rest.split_once("    // generated: end").unwrap();
        let rows: Vec<String> = from_font
            .chunks(8)
            .map(|c| {
                let items: Vec<String> = c.iter().map(|(ch, a)| format!("({ch:?}, {a})")).collect();
                format!("    {},\n", items.join(", "))
            })
            .collect();
        std::fs::write(
            &path,
            format!(
                "{head}    // generated: begin\n{}    // generated: end{tail}",
                rows.concat()
            ),
        )
        .unwrap();
    }
    assert_eq!(
        font::ADVANCES,
        &from_font[..],
        "VP2P_WRITE_FONT_TABLE=1 rewrites the table"
    );
}

/// Every captured tree, with the GPU selection its README gives.
fn captured_trees() -> Vec<(String, PathBuf, Vec<String>, Option<tempfile::TempDir>)> {
    let mut out = Vec::new();
    for (name, class) in [
        ("qemu-7.2-two-socket-iommu-on", Some("0108")),
        ("qemu-7.2-two-socket-iommu-off", Some("0108")),
        ("qemu-7.2-nested-switch-iommu-on", Some("0108")),
        ("qemu-11.1-two-socket-iommu-on", Some("0108")),
        ("qemu-11.1-two-socket-iommu-off", Some("0108")),
        ("qemu-11.1-nested-switch-iommu-on", Some("0108")),
        ("qemu-11.1-pcie-costs-iommu-on", Some("0100")),
        ("qemu-11.1-pcie-costs-iommu-off", Some("0100")),
        ("qemu-11.1-vfio-user-gpus", None),
        ("dev-vm-firecracker", None),
    ] {
        let mut args = vec!["--all-nics".to_string()];
        if let Some(c) = class {
            args.extend(["--gpu-class".into(), c.into()]);
        }
        out.push((name.to_string(), fixture_dir(name), args, None));
    }
    for name in [
        "h200x2-passthrough-guest",
        "h200x4-passthrough-guest",
        "h200x2-live-nvml",
    ] {
        let dir = unpack_fixture(name);
        let mut args = Vec::new();
        let map = fixture_dir(name).join("nvlink.json");
        if map.exists() {
            args.extend(["--nvlink".into(), map.to_str().unwrap().to_string()]);
        }
        out.push((name.to_string(), dir.path().join("sysfs"), args, Some(dir)));
    }
    out
}

#[test]
fn topo_pictures_of_every_captured_tree_render_with_every_bus_id_and_no_overlap() {
    for (name, root, args, _keep) in captured_trees() {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (svg, report) = topo_svg(&root, &args);
        let r = check_picture(&svg, &format!("topo {name}"));
        let drawn = boxes(&svg);
        for bdf in device_bdfs(&report) {
            assert!(
                has_text(&r, &bdf),
                "{name}: {bdf} is no text of the picture"
            );
            assert!(drawn.contains_key(&bdf), "{name}: {bdf} has no box");
        }
        for hb in report["host_bridges"].as_array().unwrap() {
            let n = hb["name"].as_str().unwrap();
            assert!(drawn.contains_key(n), "{name}: host bridge {n} has no box");
        }
        // NVLinks (the operator maps of the passthrough guests) are edges.
        if let Some(map) = args.iter().position(|a| *a == "--nvlink") {
            let links: Value =
                serde_json::from_str(&std::fs::read_to_string(args[map + 1]).unwrap()).unwrap();
            let doc = roxmltree::Document::parse(&svg).unwrap();
            let edges: BTreeSet<&str> = doc
                .descendants()
                .filter_map(|n| n.attribute("data-nvlink"))
                .collect();
            let want = links["links"].as_array().unwrap().len();
            assert_eq!(edges.len(), want, "{name}: NVLink edges");
            assert!(has_text(&r, "NV18"), "{name}: no NV18 label");
        }
        println!("topo {name}: {} bytes, {} texts", svg.len(), r.texts.len());
    }
}

#[test]
fn two_socket_boxes_nest_as_the_sysfs_tree_does() {
    // Derived by hand from capture.txt's QEMU command line and the sysfs
    // directories (devices/pciDDDD:BB/.../BDF): each function's upstream
    // bridge, each host bridge's NUMA node (pxb-pcie numa_node=0/0/1,
    // pcie.0 none).
    let want: BTreeMap<String, String> = [
        ("numa0", None),
        ("numa1", None),
        ("numa-unknown", None),
        ("pci0000:20", Some("numa0")),
        ("pci0000:40", Some("numa0")),
        ("pci0000:80", Some("numa1")),
        ("pci0000:00", Some("numa-unknown")),
        ("0000:00:04.0", Some("pci0000:00")),
        ("0000:01:00.0", Some("0000:00:04.0")),
        ("0000:20:00.0", Some("pci0000:20")),
        ("0000:21:00.0", Some("0000:20:00.0")),
        ("0000:22:00.0", Some("0000:21:00.0")),
        ("0000:22:01.0", Some("0000:21:00.0")),
        ("0000:22:02.0", Some("0000:21:00.0")),
        ("0000:23:00.0", Some("0000:22:00.0")),
        ("0000:24:00.0", Some("0000:22:01.0")),
        ("0000:25:00.0", Some("0000:22:02.0")),
        ("0000:20:01.0", Some("pci0000:20")),
        ("0000:26:00.0", Some("0000:20:01.0")),
        ("0000:40:00.0", Some("pci0000:40")),
        ("0000:41:00.0", Some("0000:40:00.0")),
        ("0000:80:00.0", Some("pci0000:80")),
        ("0000:81:00.0", Some("0000:80:00.0")),
        ("0000:82:00.0", Some("0000:81:00.0")),
        ("0000:82:01.0", Some("0000:81:00.0")),
        ("0000:83:00.0", Some("0000:82:00.0")),
        ("0000:84:00.0", Some("0000:82:01.0")),
    ]
    .into_iter()
    .filter_map(|(c, p)| Some((c.to_string(), p?.to_string())))
    .collect();
    for name in [
        "qemu-11.1-two-socket-iommu-on",
        "qemu-7.2-two-socket-iommu-on",
    ] {
        let (svg, _) = topo_svg(&fixture_dir(name), &["--gpu-class", "0108", "--all-nics"]);
        assert_eq!(parents(&svg), want, "{name}");
        let all = boxes(&svg);
        assert_eq!(all["0000:23:00.0"].data["kind"], "gpu");
        assert_eq!(all["0000:25:00.0"].data["kind"], "nic");
        assert_eq!(all["0000:21:00.0"].data["kind"], "switch-upstream");
    }
}

#[test]
fn a_narrowed_link_is_marked_in_an_edited_copy_only() {
    // pcie-costs (capture.txt): 26:00.0 sits on root port 20:01.0 (x-width=4);
    // QEMU's emulated endpoint can do x1 and trains x1, so no link is below
    // what both ends can do. The copy says the endpoint can do x4
    // (max_link_width 4, as the kernel reads Link Capabilities bits 9:4):
    // trained x1 of x4 both ends can, narrowed.
    let src = fixture_dir("qemu-11.1-pcie-costs-iommu-on").join("sysfs");
    let (svg, _) = topo_svg(&src, &["--gpu-class", "0100"]);
    check_picture(&svg, "topo pcie-costs");
    let marked: Vec<String> = boxes(&svg)
        .into_iter()
        .filter(|(_, s)| s.data.contains_key("link"))
        .map(|(b, _)| b)
        .collect();
    assert!(marked.is_empty(), "captured tree: {marked:?} marked");

    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    let copy = dir.path().join("sysfs");
    let dev = std::fs::canonicalize(copy.join("bus/pci/devices/0000:26:00.0")).unwrap();
    assert!(dev.starts_with(std::fs::canonicalize(&copy).unwrap()));
    std::fs::write(dev.join("max_link_width"), "4\n").unwrap();
    let (svg, _) = topo_svg(&copy, &["--gpu-class", "0100"]);
    let r = check_picture(&svg, "topo pcie-costs narrowed");
    let marked: Vec<String> = boxes(&svg)
        .into_iter()
        .filter(|(_, s)| s.data.get("link").map(String::as_str) == Some("narrowed"))
        .map(|(b, _)| b)
        .collect();
    assert_eq!(marked, ["0000:26:00.0"]);
    assert!(has_text(&r, "x1 of x4, narrowed"));
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let red = doc
        .descendants()
        .filter(|n| n.attribute("fill") == Some(p2p_shared::picture::topo::RED))
        .any(|n| n.text() == Some("x1 of x4, narrowed"));
    assert!(red, "the narrowed width is not drawn in red");
}

/// (VM, clique id) -> its GPUs, from `plan --json`.
fn json_cliques(plan: &Value) -> BTreeMap<(String, u64), BTreeSet<String>> {
    let mut out: BTreeMap<(String, u64), BTreeSet<String>> = BTreeMap::new();
    for vm in plan["vms"].as_array().unwrap() {
        let name = vm["vm"].as_str().unwrap().to_string();
        for a in vm["assignments"].as_array().unwrap() {
            out.entry((name.clone(), a["clique"].as_u64().unwrap()))
                .or_default()
                .insert(a["bdf"].as_str().unwrap().to_string());
        }
    }
    out
}

fn plan_svg(root: &Path, args: &[&str]) -> (String, Value) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("plan.svg");
    let mut all = vec!["plan", "--sysfs-root", root.to_str().unwrap()];
    all.extend_from_slice(args);
    let mut with_svg = all.clone();
    with_svg.extend(["--svg", out.to_str().unwrap()]);
    run_ok("p2p-host", &with_svg);
    all.push("--json");
    let plan: Value = serde_json::from_str(&run_ok("p2p-host", &all)).unwrap();
    (std::fs::read_to_string(&out).unwrap(), plan)
}

#[test]
fn plan_picture_colours_are_the_plans_cliques() {
    let two = fixture_dir("qemu-11.1-two-socket-iommu-on");
    let cases: Vec<(PathBuf, Vec<&str>)> = vec![
        (
            two.clone(),
            vec![
                "--gpu-class",
                "0108",
                "--vm",
                "train=4",
                "--vm",
                "infer=2",
                "--guest-topology",
                "mirror",
            ],
        ),
        (two.clone(), vec!["--gpu-class", "0108"]),
        (
            two.clone(),
            vec![
                "--gpu-class",
                "0108",
                "--max-level",
                "pix",
                "--vm",
                "a=0000:23:00.0,0000:24:00.0,0000:83:00.0",
                "--vm",
                "b=0000:26:00.0",
            ],
        ),
        (
            fixture_dir("qemu-11.1-pcie-costs-iommu-on"),
            vec!["--gpu-class", "0100", "--guest-topology", "mirror"],
        ),
    ];
    for (root, args) in cases {
        let what = format!("plan {}", args.join(" "));
        let (svg, plan) = plan_svg(&root, &args);
        let r = check_picture(&svg, &what);
        let want = json_cliques(&plan);
        let shapes = rects(&svg);
        let tree = boxes(&svg);
        // The host tree: GPUs grouped by fill are exactly the cliques.
        let mut by_fill: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let planned: BTreeSet<&String> = want.values().flatten().collect();
        for (bdf, s) in &tree {
            if s.data.get("kind").map(String::as_str) == Some("gpu") {
                if planned.contains(bdf) {
                    by_fill
                        .entry(s.fill.clone())
                        .or_default()
                        .insert(bdf.clone());
                } else {
                    assert_eq!(
                        s.fill,
                        p2p_shared::picture::topo::GREY_FILL,
                        "{what}: {bdf} in no VM is not grey"
                    );
                }
            }
        }
        let got: BTreeSet<&BTreeSet<String>> = by_fill.values().collect();
        let wanted: BTreeSet<&BTreeSet<String>> = want.values().collect();
        assert_eq!(got, wanted, "{what}: colours vs plan --json cliques");
        // The legend names each clique in its GPUs' colour; the VM frames'
        // chips (and a mirrored guest's devices) agree.
        for ((vm, id), gpus) in &want {
            let key = format!("{vm}/{id}");
            let fill = &tree[gpus.iter().next().unwrap()].fill;
            let legend = shapes
                .iter()
                .find(|s| s.data.get("legend-clique") == Some(&key))
                .unwrap_or_else(|| panic!("{what}: no legend for {key}"));
            assert_eq!(&legend.fill, fill, "{what}: legend of {key}");
            assert!(has_text(&r, &format!("{vm} clique {id}")));
            for s in shapes.iter().filter(|s| s.data.get("clique") == Some(&key)) {
                assert_eq!(&s.fill, fill, "{what}: chip {:?}", s.data);
                let host = s.data.get("chip").or(s.data.get("guest")).unwrap();
                assert!(gpus.contains(host), "{what}: {host} is not in {key}");
            }
        }
        let mirror = plan["guest_topology"] == "mirror";
        let guests = shapes
            .iter()
            .filter(|s| s.data.contains_key("guest"))
            .count();
        let gpus: usize = want.values().map(BTreeSet::len).sum();
        assert_eq!(guests, if mirror { gpus } else { 0 }, "{what}: guest panel");
        if mirror {
            for g in plan["guests"].as_array().unwrap() {
                for d in g["devices"].as_array().unwrap() {
                    assert!(
                        has_text(&r, d["guest"].as_str().unwrap()),
                        "{what}: guest address"
                    );
                }
            }
        }
        // The chooser's reasons are under the frames.
        for c in plan["choices"].as_array().into_iter().flatten() {
            let first = c["choice"]["reasons"][0].as_str().unwrap();
            let words: String = first
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ");
            assert!(has_text(&r, &words), "{what}: reason {first:?} not drawn");
        }
    }
}

/// The size the text tables show a mode at: the method's headline size
/// (latency size for ping-pong), else the largest (smallest) size the run
/// measured the mode at.
fn table_size(report: &Value, mode: &str) -> u64 {
    let latency = mode == "pingpong";
    let method = &report["method"];
    let want = if latency {
        &method["latency_bytes"]
    } else {
        &method["headline_bytes"]
    };
    let want = want.as_u64().unwrap();
    let sizes: Vec<u64> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["mode"] == mode)
        .map(|m| m["bytes"].as_u64().unwrap())
        .collect();
    if sizes.contains(&want) {
        want
    } else if latency {
        *sizes.iter().min().unwrap()
    } else {
        *sizes.iter().max().unwrap()
    }
}

/// Each cell label of the bench heatmaps against the run's JSON.
fn check_cells(svg: &str, report: &Value, what: &str) -> usize {
    let r = check_picture(svg, what);
    let doc = roxmltree::Document::parse(svg).unwrap();
    let texts: Vec<(f64, f64, String)> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| {
            let f = |k: &str| n.attribute(k).unwrap().parse::<f64>().unwrap();
            (f("x"), f("y"), n.text().unwrap_or_default().to_string())
        })
        .collect();
    let mut cells = 0;
    for s in rects(svg) {
        let Some(key) = s.data.get("cell") else {
            continue;
        };
        let parts: Vec<&str> = key.split(' ').collect();
        let (mode, dir) = (parts[0], parts[1]);
        let (i, j): (u64, u64) = (parts[2].parse().unwrap(), parts[3].parse().unwrap());
        let inside: Vec<&(f64, f64, String)> = texts
            .iter()
            .filter(|(x, y, _)| *x > s.x && *x < s.x + s.w && *y > s.y && *y < s.y + s.h)
            .collect();
        let label: f64 = inside[0]
            .2
            .parse()
            .unwrap_or_else(|_| panic!("{what}: {key}: {:?}", inside[0].2));
        let latency = mode == "pingpong";
        let size = table_size(report, mode);
        let bytes = &Value::from(size);
        let (a, b) = if dir == "bi" {
            (i.min(j), i.max(j))
        } else {
            (i, j)
        };
        let m = report["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| {
                m["mode"] == mode
                    && m["direction"] == dir
                    && m["src"] == a
                    && m["dst"] == b
                    && m["bytes"] == *bytes
            })
            .unwrap_or_else(|| panic!("{what}: no measurement for cell {key}"));
        let figure = if latency {
            &m["latency_us"]["median"]
        } else {
            &m["gbps"]["median"]
        };
        let figure = figure.as_f64().unwrap();
        assert!(
            (label - figure).abs() <= 0.005,
            "{what}: cell {key} says {label}, the JSON {figure}"
        );
        let pair = report["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["src"] == i && p["dst"] == j)
            .unwrap();
        let route = pair["route"].as_str().unwrap_or_default();
        let class = pair["class"].as_str().unwrap();
        let want = if !route.is_empty() {
            route.to_string()
        } else if class.starts_with("NV") {
            "nvlink".to_string()
        } else {
            class.to_string()
        };
        assert_eq!(inside[1].2, want, "{what}: route of {key}");
        cells += 1;
    }
    // Every pairwise measurement at its table's size has its cell (bi: both ways).
    let want = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| {
            m["src"].is_u64() && m["bytes"] == table_size(report, m["mode"].as_str().unwrap())
        })
        .map(|m| {
            if m["direction"] == "bi" && m["src"] != m["dst"] {
                2
            } else {
                1
            }
        })
        .sum::<usize>();
    assert_eq!(
        cells, want,
        "{what}: cells vs the run's pairwise measurements"
    );
    assert!(has_text(&r, "GB/s"));
    cells
}

#[test]
fn bench_heatmaps_of_the_recorded_h200_runs_say_the_json_figures() {
    for file in [
        "docs/results/h200x2-2026-11-22/bench-p2p.json",
        "docs/results/h200x2-2026-11-22/bench-nop2p.json",
        "docs/results/h200x2-2026-11-24/bench-default.json",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("bench.svg");
        run_ok(
            "p2p-guest",
            &["bench", "--from", file, "--svg", out.to_str().unwrap()],
        );
        let report: Value =
            serde_json::from_str(&std::fs::read_to_string(repo_root().join(file)).unwrap())
                .unwrap();
        let svg = std::fs::read_to_string(&out).unwrap();
        let n = check_cells(&svg, &report, file);
        println!("{file}: {n} cells, {} bytes", svg.len());
    }
}

#[test]
fn compare_svg_keeps_its_chart_and_adds_the_ratio_heatmap() {
    let base = "docs/results/h200x2-2026-11-22/bench-p2p.json";
    let other = "docs/results/h200x2-2026-11-22/bench-nop2p.json";
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("compare.svg");
    let json: Value = serde_json::from_str(&run_ok(
        "p2p-guest",
        &[
            "compare",
            base,
            other,
            "--json",
            "--svg",
            out.to_str().unwrap(),
        ],
    ))
    .unwrap();
    let svg = std::fs::read_to_string(&out).unwrap();
    render(&svg, "compare");
    let doc = roxmltree::Document::parse(&svg).unwrap();
    assert!(
        doc.descendants()
            .any(|n| n.attribute("data-embedded") == Some("chart")),
        "the curves are gone"
    );
    let head: Value =
        serde_json::from_str(&std::fs::read_to_string(repo_root().join(base)).unwrap()).unwrap();
    let headline = &head["method"]["headline_bytes"];
    let mut cells = 0;
    for s in rects(&svg) {
        let Some(key) = s.data.get("cell") else {
            continue;
        };
        let p: Vec<&str> = key.split(' ').collect();
        let (i, j): (u64, u64) = (p[2].parse().unwrap(), p[3].parse().unwrap());
        let label = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .find(|n| {
                let f = |k: &str| n.attribute(k).unwrap().parse::<f64>().unwrap();
                f("x") > s.x && f("x") < s.x + s.w && f("y") > s.y && f("y") < s.y + s.h
            })
            .and_then(|n| n.text())
            .unwrap();
        let ratio: f64 = label.trim_end_matches('x').parse().unwrap();
        let row = json["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| {
                r["mode"] == p[0]
                    && r["direction"] == p[1]
                    && r["bytes"] == *headline
                    && ((r["src"] == i && r["dst"] == j)
                        || (p[1] == "bi" && r["src"] == j && r["dst"] == i))
            })
            .unwrap_or_else(|| panic!("no compare row for {key}"));
        let want = row["bandwidth_ratio"].as_f64().unwrap();
        let tolerance = if want >= 1.0 { 0.005 } else { want * 0.01 };
        assert!(
            (ratio - want).abs() <= tolerance,
            "{key}: {ratio} vs {want}"
        );
        cells += 1;
    }
    assert!(cells >= 8, "only {cells} ratio cells");
}

/// 16 GPUs and 16 RDMA NICs on two sockets, as shared/benches/chooser_scale
/// lays them out (2 sockets x 2 host bridges x 2 switches, 2 GPUs and 2 NICs
/// per switch), with links, ACS on the downstream ports, and NVLink within
/// each 8-GPU baseboard (NV18, as on the H200s).
fn sixteen_gpu_host() -> p2p_shared::Topology {
    use p2p_shared::pci::{Acs, AcsFlags, PciePortType::*};
    use p2p_shared::topology::*;
    use p2p_shared::Bdf;
    let mut t = Topology::default();
    let mut group = 0;
    let link = |w: u8, s: &str| LinkInfo {
        current_speed: Some(format!("{s} GT/s PCIe")),
        current_width: Some(w),
        max_speed: Some(format!("{s} GT/s PCIe")),
        max_width: Some(w),
    };
    let mut func = |bdf: Bdf, hb: &str, parent: Option<Bdf>, class: u32, port, numa: u32| {
        group += 1;
        PciFunction {
            bdf,
            vendor: 0x10de,
            device: 0x2335,
            subsystem_vendor: None,
            subsystem_device: None,
            class,
            is_bridge: class >> 8 == 0x0604,
            host_bridge: hb.to_string(),
            parent,
            pcie_port_type: Some(port),
            acs: AcsState::Absent,
            iommu_group: Some(group),
            numa_node: Some(numa),
            cpu_affinity: None,
            driver: Some(
                if class >> 8 == 0x0604 {
                    "pcieport"
                } else {
                    "vfio-pci"
                }
                .into(),
            ),
            link: link(16, "32.0"),
            config_len: 4096,
            interfaces: Vec::new(),
            rdma_devices: Vec::new(),
        }
    };
    for socket in 0..2u8 {
        t.numa_nodes.push(NumaNode {
            id: u32::from(socket),
            cpulist: if socket == 0 {
                "0-55,112-167"
            } else {
                "56-111,168-223"
            }
            .into(),
        });
        for hbi in 0..2u8 {
            let root_bus = socket * 0x80 + hbi * 0x40;
            let hb = format!("pci0000:{root_bus:02x}");
            t.host_bridges.push(HostBridge {
                name: hb.clone(),
                domain: 0,
                bus: root_bus,
                numa_node: Some(u32::from(socket)),
            });
            for sw in 0..2u8 {
                let base = root_bus + 1 + sw * 0x10;
                let rp = Bdf::new(0, root_bus, 1 + sw, 0).unwrap();
                let up = Bdf::new(0, base, 0, 0).unwrap();
                let n = u32::from(socket);
                t.functions.push(func(rp, &hb, None, 0x060400, RootPort, n));
                t.functions
                    .push(func(up, &hb, Some(rp), 0x060400, SwitchUpstream, n));
                for port in 0..4u8 {
                    let down = Bdf::new(0, base + 1, port, 0).unwrap();
                    let ep = Bdf::new(0, base + 2 + port, 0, 0).unwrap();
                    let mut d = func(down, &hb, Some(up), 0x060400, SwitchDownstream, n);
                    d.acs = AcsState::Present(Acs {
                        offset: 0x148,
                        capability: AcsFlags::from_bits(0x5f),
                        control: AcsFlags::from_bits(0x1d),
                    });
                    t.functions.push(d);
                    let mut f = if port < 2 {
                        func(ep, &hb, Some(down), 0x030200, Endpoint, n)
                    } else {
                        let mut f = func(ep, &hb, Some(down), 0x020700, Endpoint, n);
                        f.vendor = 0x15b3;
                        f.device = 0x1021;
                        f.driver = Some("mlx5_core".into());
                        f.rdma_devices = vec![format!("mlx5_{}", t.functions.len())];
                        f
                    };
                    f.numa_node = Some(n);
                    t.functions.push(f);
                }
            }
        }
    }
    t.sort();
    let gpus: Vec<Bdf> = t
        .functions
        .iter()
        .filter(|f| f.class == 0x030200)
        .map(|f| f.bdf)
        .collect();
    for board in gpus.chunks(8) {
        for (i, a) in board.iter().enumerate() {
            for b in &board[i + 1..] {
                t.nvlinks.push(NvLink {
                    a: *a,
                    b: *b,
                    count: Some(18),
                });
            }
        }
    }
    t.nvlink_source = Some(NvLinkSource::OperatorMap);
    t
}

#[test]
fn sixteen_gpus_and_sixteen_nics_fit_without_overlap_and_stay_small() {
    use p2p_shared::clique::{plan_cliques, MaxLevel};
    use p2p_shared::guest_layout::GuestLayout;
    use p2p_shared::report::{PlanReport, TopoReport};
    use p2p_shared::{GpuSelector, PathClass};
    let topo = sixteen_gpu_host();
    let report = TopoReport::build(&topo, &GpuSelector::Nvidia, "generated 16-GPU host");
    assert_eq!((report.gpus.len(), report.nics.len()), (16, 16));
    let svg = p2p_shared::picture::topo_svg(&topo, &report, "generated");
    let r = check_picture(&svg, "topo 16 GPUs");
    for bdf in device_bdfs(&serde_json::to_value(&report).unwrap()) {
        assert!(has_text(&r, &bdf), "{bdf} is no text");
    }
    println!(
        "16 GPUs + 16 NICs: topo picture {} bytes, {} texts",
        svg.len(),
        r.texts.len()
    );
    assert!(svg.len() < 1 << 20, "{} bytes", svg.len());

    // Two VMs of eight GPUs each, one per baseboard.
    let gpus: Vec<_> = report.gpus.iter().map(|g| g.bdf).collect();
    let level = MaxLevel::new(PathClass::Phb).unwrap();
    let plans = vec![
        plan_cliques(&topo, "left", &gpus[..8], level).unwrap(),
        plan_cliques(&topo, "right", &gpus[8..12], level).unwrap(),
    ];
    let plan = PlanReport::new(
        "generated 16-GPU host",
        level,
        plans,
        GuestLayout::Flat,
        Vec::new(),
        Vec::new(),
    );
    let svg = p2p_shared::picture::plan::plan_svg(&topo, &report, &plan, "generated");
    let r = check_picture(&svg, "plan 16 GPUs");
    println!(
        "16 GPUs + 16 NICs: plan picture {} bytes, {} texts",
        svg.len(),
        r.texts.len()
    );
    assert!(svg.len() < 1 << 20, "{} bytes", svg.len());
}

#[test]
fn docs_pictures_are_current() {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("bash")
        .current_dir(repo_root())
        .arg("scripts/pictures.sh")
        .arg(dir.path())
        .env("P2P_HOST", binary("p2p-host"))
        .env("P2P_GUEST", binary("p2p-guest"))
        .status()
        .unwrap();
    assert!(status.success(), "scripts/pictures.sh failed");
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert!(names.len() >= 3, "{names:?}");
    for name in names {
        let fresh = std::fs::read(dir.path().join(&name)).unwrap();
        check_picture(
            &String::from_utf8(fresh.clone()).unwrap(),
            &format!("docs {name:?}"),
        );
        let path = repo_root().join("docs/pictures").join(&name);
        let committed = std::fs::read(&path).unwrap_or_default();
        assert!(
            committed == fresh,
            "{} is stale: run bash scripts/pictures.sh",
            path.display()
        );
    }
}
