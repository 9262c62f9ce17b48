//! `plan --svg`: the colours are the plan's cliques.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use p2p_tests::fixture_dir;
use serde_json::Value;

use super::render::{boxes, check_picture, has_text, rects, run_ok};

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
                        p2p_report::picture::topo::GREY_FILL,
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
