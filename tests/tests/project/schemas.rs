//! One JSON contract. docs/schemas holds the schema of every document (written
//! by `p2p-host schema NAME` / `p2p-guest schema NAME`, generated from the
//! types); this checks the files are current and that what the binaries emit,
//! here on captured trees and recorded reports, validates against them.

use serde_json::Value;

use p2p_tests::ch_server::FakeCloudHypervisor;
use p2p_tests::schemas::{path, validate};
use p2p_tests::{fixture_dir, repo_root, run, unpack_fixture};

const HOST: [&str; 7] = [
    "topo", "plan", "inject", "snapshot", "apply", "allocate", "check",
];
const GUEST: [&str; 7] = [
    "probe",
    "bench",
    "compare",
    "nccl-topo",
    "nccl-explain",
    "tune",
    "doctor",
];

fn json_of(bin: &str, args: &[&str]) -> Value {
    let r = run(bin, args);
    assert!(
        matches!(r.code, Some(0) | Some(1)),
        "{bin} {args:?}: {}",
        r.stderr
    );
    serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("{bin} {args:?}: not JSON: {e}\n{}", r.stdout))
}

fn check(name: &str, doc: &Value) {
    validate(name, doc)
        .unwrap_or_else(|e| panic!("{e}\n{}", serde_json::to_string_pretty(doc).unwrap()));
}

#[test]
fn schema_files_are_what_the_binaries_generate() {
    for (bin, names) in [("p2p-host", &HOST[..]), ("p2p-guest", &GUEST[..])] {
        let list = run(bin, &["schema"]).stdout;
        for name in names.iter() {
            assert!(
                list.contains(&format!("vp2p.{name}/1")),
                "{bin} schema lists {name}"
            );
            let now = run(bin, &["schema", name]).stdout;
            let saved = std::fs::read_to_string(path(name)).unwrap_or_default();
            assert!(
                now == saved,
                "{} is stale: regenerate with `bash scripts/schemas.sh`",
                path(name).display()
            );
        }
    }
    // Nothing in docs/schemas that no binary writes.
    let files = std::fs::read_dir(repo_root().join("docs/schemas"))
        .unwrap()
        .count();
    assert_eq!(files, HOST.len() + GUEST.len());
}

#[test]
fn host_documents_validate() {
    let two = fixture_dir("qemu-11.1-two-socket-iommu-on");
    let two = two.to_str().unwrap();
    let topo = json_of(
        "p2p-host",
        &[
            "topo",
            "--json",
            "--gpu-class",
            "0108",
            "--all-nics",
            "--sysfs-root",
            two,
        ],
    );
    check("topo", &topo);
    // The selector reads as on the command line.
    assert_eq!(topo["gpu_selector"]["prefix"], "0x0108");
    let plan = json_of(
        "p2p-host",
        &[
            "plan",
            "--json",
            "--gpu-class",
            "0108",
            "--guest-topology",
            "mirror",
            "--sysfs-root",
            two,
        ],
    );
    check("plan", &plan);
    assert_eq!(plan["guests"][0]["root_complexes"][0]["bus_nr"], "0x20");
    // Chosen by count: the plan carries the chooser's answers.
    let chosen = json_of(
        "p2p-host",
        &[
            "plan",
            "--json",
            "--gpu-class",
            "0108",
            "--vm",
            "a=2",
            "--vm",
            "b=2",
            "--sysfs-root",
            two,
        ],
    );
    check("plan", &chosen);
    let allocate = json_of(
        "p2p-host",
        &[
            "allocate",
            "--json",
            "--gpu-class",
            "0108",
            "--size",
            "2",
            "--sysfs-root",
            two,
            "--available",
            "0000:23:00.0,0000:24:00.0,0000:26:00.0",
        ],
    );
    check("allocate", &allocate);
    assert_eq!(allocate["schema"], "vp2p.allocate/1");

    let h200 = unpack_fixture("h200x2-passthrough-guest");
    let cfg = h200
        .path()
        .join("sysfs/devices/pci0000:00/0000:00:06.0/config");
    let out = h200.path().join("virt");
    let inject = json_of(
        "p2p-host",
        &[
            "inject",
            "--json",
            "--config",
            cfg.to_str().unwrap(),
            "--clique",
            "3",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    check("inject", &inject);
    // Offsets, masks and values read as in the text: 0xc8, 0x0000ff00.
    assert_eq!(inject["placement"]["offset"], "0xc8");
    assert_eq!(inject["pointer_offset"], "0xb1");
    assert_eq!(inject["patches"][0]["mask"], "0x0000ff00");

    let snap_dir = tempfile::tempdir().unwrap();
    let snap = json_of(
        "p2p-host",
        &[
            "snapshot",
            "--json",
            "--sysfs-root",
            two,
            "--out",
            snap_dir.path().join("s").to_str().unwrap(),
        ],
    );
    check("snapshot", &snap);

    let sock_dir = tempfile::tempdir().unwrap();
    let sock = sock_dir.path().join("ch.sock");
    let _server = FakeCloudHypervisor::start(&sock, vec![(204, None), (400, None), (204, None)]);
    let tree = unpack_fixture("h200x2-passthrough-guest");
    let apply = json_of(
        "p2p-host",
        &[
            "apply",
            "--json",
            "--api-socket",
            sock.to_str().unwrap(),
            "--sysfs-root",
            tree.path().to_str().unwrap(),
            "--max-level",
            "pix",
        ],
    );
    check("apply", &apply);
    let r = run(
        "p2p-host",
        &[
            "check",
            "--json",
            "--gpu-class",
            "0108",
            "--sysfs-root",
            two,
            "--vm",
            "vm0=0000:23:00.0,0000:24:00.0",
        ],
    );
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    check("check", &serde_json::from_str(&r.stdout).unwrap());
    assert_eq!(apply["rolled_back"][0]["id"], "ua-vp2p-gpu0");
}

#[test]
fn guest_documents_validate() {
    let vfio = fixture_dir("qemu-11.1-vfio-user-gpus");
    let vfio = vfio.to_str().unwrap();
    let probe = json_of(
        "p2p-guest",
        &["probe", "--json", "--no-driver", "--sysfs-root", vfio],
    );
    check("probe", &probe);
    assert_eq!(probe["gpus"][0]["capability"]["offset"], "0xc8");
    let nccl = json_of("p2p-guest", &["nccl-topo", "--json", "--sysfs-root", vfio]);
    check("nccl-topo", &nccl);
    let explain = json_of(
        "p2p-guest",
        &[
            "nccl-topo",
            "explain",
            "--json",
            "--no-driver",
            "--default-path",
            "/nonexistent",
            "--sysfs-root",
            vfio,
        ],
    );
    check("nccl-explain", &explain);

    // Report format: what the 2x H200 run recorded, and compare on it.
    let results = repo_root().join("docs/results/h200x2-2026-11-22");
    for f in ["bench-p2p.json", "bench-nop2p.json"] {
        let doc: Value =
            serde_json::from_str(&std::fs::read_to_string(results.join(f)).unwrap()).unwrap();
        check("bench", &doc);
    }
    let (a, b) = (
        results.join("bench-p2p.json"),
        results.join("bench-nop2p.json"),
    );
    let cmp = json_of(
        "p2p-guest",
        &[
            "compare",
            "--json",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
        ],
    );
    check("compare", &cmp);
    // tune-sm needs a GPU: its recorded points (written before the document had
    // a schema tag) in today's wrapper.
    let points: Value =
        serde_json::from_str(&std::fs::read_to_string(results.join("tune.json")).unwrap()).unwrap();
    let points = if points.is_array() {
        points
    } else {
        points["points"].clone()
    };
    check(
        "tune",
        &serde_json::json!({"schema": "vp2p.tune/1", "points": points}),
    );
}
