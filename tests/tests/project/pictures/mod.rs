//! The pictures (`topo --svg`, `plan --svg`, `bench --svg`, `compare --svg`)
//! as a reader sees them: each file parses as XML and renders with resvg
//! (text laid out by usvg with DejaVu Sans, the family every picture names,
//! loaded from fonts-dejavu-core's file) to a PNG that is not blank; every
//! device's bus id is a text of the picture; no two texts overlap, measured
//! from usvg's own text boxes (glyph advances and the font's ascender and
//! descender, kerning applied); the boxes nest as the sysfs tree does; the
//! plan's colours are `plan --json`'s cliques; each heatmap cell says the
//! recorded run's figure. `VP2P_PICTURES_PNG=DIR` keeps every rendering.

mod bench;
mod plan;
mod render;
mod scale;
mod topo;

use std::process::Command;

use p2p_tests::{binary, repo_root};
use render::{check_picture, FONT};

#[test]
fn font_table_matches_dejavu_sans() {
    use p2p_report::picture::font;
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
        let path = repo_root().join("shared/report/src/picture/font.rs");
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
