//! `bench --svg` / `--from` and `compare --svg`: each cell is the JSON's figure.

use p2p_tests::repo_root;
use serde_json::Value;

use super::render::{check_picture, has_text, rects, render, run_ok};

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
