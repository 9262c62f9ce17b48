//! `topo --svg` on every captured tree: bus ids, nesting, narrowed links.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

use p2p_tests::{fixture_dir, unpack_fixture};
use serde_json::Value;

use super::render::{boxes, check_picture, device_bdfs, has_text, parents, topo_svg};

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
        .filter(|n| n.attribute("fill") == Some(p2p_report::picture::topo::RED))
        .any(|n| n.text() == Some("x1 of x4, narrowed"));
    assert!(red, "the narrowed width is not drawn in red");
}
