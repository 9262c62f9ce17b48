//! `p2p-guest nccl-topo explain` against what NCCL 2.28.3 itself did on the
//! 2x H200 passthrough VM (its own debug logs in
//! docs/results/h200x2-2026-11-24/nccl-transport and the fixture's
//! nccl-debug-topology.txt, and its topology dumps), and the command line:
//! file choice, what-ifs, errors and exit codes. Hand-derived cases of the
//! rules are in nccl_rules.rs.

use std::path::PathBuf;
use std::process::Command;

use p2p_nccl::observed::{check_pairs, differences, parse_log};
use p2p_nccl::{effective, DriverP2p, Graph, PathType, Transport, VmNic};
use p2p_tests::nccl_explain::*;
use p2p_tests::{binary, fixture_dir, repo_root, stdout_of, unpack_fixture};

/// The three files NCCL 2.28.3 was given on the H200 VM with NVLink hidden,
/// and NCCL's own log of each: explain predicts exactly the transport NCCL
/// printed for every channel (flat: SHM, one switch: P2P, two switches: SHM).
#[test]
fn h200_vm_files_predicted_as_nccl_logged_them() {
    let tree = unpack_fixture("h200x2-passthrough-guest");
    let order = [b("0000:00:06.0"), b("0000:00:07.0")];
    for (name, want) in [("flat", "SHM"), ("clique", "P2P"), ("split", "SHM")] {
        let file = repo_root().join(RESULTS).join(format!("file-{name}.xml"));
        let report = explain_json(tree.path(), &["--file", file.to_str().unwrap()], &[]);
        assert_eq!(transport(&report), want, "{name}: {report:#}");
        // The same through the library, compared channel by channel with the log.
        let log = std::fs::read_to_string(
            repo_root()
                .join(RESULTS)
                .join(format!("nccl-log-{name}.txt")),
        )
        .unwrap();
        let seen = parse_log(&log);
        assert_eq!(seen.version.as_deref(), Some("2.28.3+cuda13.0"));
        assert!(
            seen.channels.len() >= 8,
            "{name}: channels read from the log: {seen:?}"
        );
        let text = std::fs::read_to_string(&file).unwrap();
        let pred = run(
            Some(&text),
            &facts(intel(), &["0000:00:06.0", "0000:00:07.0"]),
            &env(&[]),
            DriverP2p::Allowed,
        );
        assert_eq!(
            differences(&pred, &seen, &order),
            Vec::<String>::new(),
            "{name}"
        );
    }
}

/// NCCL's own dump of that VM with NVLink visible (18 links each to the
/// NVSwitch, tclass 0x068000): GPU-NVSwitch-GPU is NVL, within PXB, so P2P,
/// as NCCL's log of that run shows.
#[test]
fn h200_nvlink_dump_is_p2p_over_nvl_as_logged() {
    let dump =
        std::fs::read_to_string(fixture_dir("h200x2-passthrough-guest").join("nccl-topo-dump.xml"))
            .unwrap();
    let pred = run(
        Some(&dump),
        &facts(intel(), &["0000:00:06.0", "0000:00:07.0"]),
        &env(&[]),
        DriverP2p::Allowed,
    );
    assert_eq!(
        pair(&pred, "0000:00:06.0", "0000:00:07.0"),
        (PathType::Nvl, Transport::P2p)
    );
    // 18 links x 20.6 GB/s (SM90_NVLINK_BW).
    assert!(
        (pred.pairs[0].bw_gbs - 370.8).abs() < 0.01,
        "{}",
        pred.pairs[0].bw_gbs
    );
    let log = std::fs::read_to_string(
        fixture_dir("h200x2-passthrough-guest").join("nccl-debug-topology.txt"),
    )
    .unwrap();
    let order = [b("0000:00:06.0"), b("0000:00:07.0")];
    assert_eq!(
        differences(&pred, &parse_log(&log), &order),
        Vec::<String>::new()
    );
    // The dump's socket NIC (eth0, 10 Gb/s, gdr 0) hangs below the CPU: PHB,
    // and GPUDirect RDMA is off because the plugin reports none.
    let g = &pred.gpus[0];
    assert_eq!(
        (g.net.as_deref(), g.path, g.gdr_write),
        (Some("eth0"), Some(PathType::Phb), false)
    );
    // --hide-nvlink's placeholder: the same dump decides by PCIe (PHB: SHM).
    let mut eff = effective(
        Some(&p2p_nccl::parse(&dump).unwrap()),
        &facts(intel(), &["0000:00:06.0", "0000:00:07.0"]),
    );
    p2p_nccl::fill::hide_nvlink(&mut eff);
    let p = p2p_nccl::predict(&Graph::build(&eff.xml), &env(&[]), &order, &|_, _| {
        DriverP2p::Allowed
    });
    assert_eq!(
        pair(&p, "0000:00:06.0", "0000:00:07.0"),
        (PathType::Phb, Transport::Shm)
    );
}

/// The CLI end to end on the captured H200 tree: no file anywhere means
/// sysfs (flat: PHB, SHM) and NCCL_TOPO_FILE is honoured and named; a
/// malformed file names its line; no GPU exits 2.
#[test]
fn cli_file_choice_errors_and_exit_codes() {
    let tree = unpack_fixture("h200x2-passthrough-guest");
    let missing = tree.path().join("no-default.xml");
    let r = explain_json(
        tree.path(),
        &["--default-path", missing.to_str().unwrap()],
        &[],
    );
    assert_eq!(r["file"]["path"], serde_json::Value::Null);
    assert_eq!(transport(&r), "SHM");
    let clique = repo_root().join(RESULTS).join("file-clique.xml");
    let r = explain_json(
        tree.path(),
        &[],
        &[("NCCL_TOPO_FILE", clique.to_str().unwrap())],
    );
    assert_eq!(r["file"]["why"], "NCCL_TOPO_FILE (environment)");
    assert_eq!(transport(&r), "P2P");
    let r = explain_json(
        tree.path(),
        &["--file", clique.to_str().unwrap()],
        &[("NCCL_P2P_DISABLE", "1")],
    );
    assert_eq!(transport(&r), "SHM");
    assert_eq!(r["variables"][0]["name"], "NCCL_P2P_DISABLE");

    let bad = tree.path().join("bad.xml");
    std::fs::write(&bad, "<system version=\"1\">\n  <cpu numaid=\"0\">\n    <pci busid=\"0000:00:06.0\"/>\n  </cpu>\n</system>\n").unwrap();
    let out = Command::new(binary("p2p-guest"))
        .args(["nccl-topo", "explain", "--no-driver", "--sysfs-root"])
        .arg(tree.path())
        .arg("--file")
        .arg(&bad)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("bad.xml: line 3: <pci busid=\"0000:00:06.0\"> without class"),
        "{err}"
    );

    let empty = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(empty.path().join("bus/pci/devices")).unwrap();
    let out = Command::new(binary("p2p-guest"))
        .args(["nccl-topo", "explain", "--no-driver", "--sysfs-root"])
        .arg(empty.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no NVIDIA GPU in"));
    // With --file and no GPU: the file explained as in a VM that matches it.
    let (code, r) = explain_file(
        empty.path(),
        &fixture_dir("h200x2-passthrough-guest").join("cpuinfo-identity.txt"),
        &clique,
    );
    assert_eq!(code, Some(0), "{r}");
    assert_eq!(
        (r["pairs"][0]["path"].as_str(), transport(&r).as_str()),
        (Some("PIX"), "P2P")
    );
}

/// What-if on the captured tree: --assume-clique for both GPUs explains the
/// derived one-switch file (PIX: P2P) without writing anything.
#[test]
fn what_if_assume_clique() {
    let tree = unpack_fixture("h200x2-passthrough-guest");
    let missing: PathBuf = tree.path().join("absent.xml");
    let r = explain_json(
        tree.path(),
        &[
            "--default-path",
            missing.to_str().unwrap(),
            "--assume-clique",
            "0000:00:06.0=0",
            "--assume-clique",
            "0000:00:07.0=0",
        ],
        &[],
    );
    assert_eq!(
        (r["pairs"][0]["path"].as_str(), transport(&r).as_str()),
        (Some("PIX"), "P2P")
    );
    assert!(!missing.exists());
    let r = explain_json(
        tree.path(),
        &[
            "--default-path",
            missing.to_str().unwrap(),
            "--assume-clique",
            "0000:00:06.0=0",
            "--assume-clique",
            "0000:00:07.0=1",
        ],
        &[],
    );
    assert_eq!(transport(&r), "SHM");
}

/// `nccl-topo --hide-nvlink` writes the file that was handed to NCCL on the
/// H200 VM (file-clique.xml, placeholder written by hand then): the same
/// elements and attributes.
#[test]
fn hide_nvlink_writes_the_file_nccl_was_given() {
    let tree = unpack_fixture("h200x2-passthrough-guest");
    let out = stdout_of(
        Command::new(binary("p2p-guest"))
            .args([
                "nccl-topo",
                "--hide-nvlink",
                "--assume-clique",
                "0000:00:06.0=0",
                "--assume-clique",
                "0000:00:07.0=0",
                "--sysfs-root",
            ])
            .arg(tree.path()),
    );
    let ours = p2p_nccl::parse(&out).unwrap();
    let given = p2p_nccl::parse(
        &std::fs::read_to_string(repo_root().join(RESULTS).join("file-clique.xml")).unwrap(),
    )
    .unwrap();
    // Line numbers differ (one is pretty-printed like the other, but compare content only).
    let strip = |mut x: p2p_nccl::TopoXml| {
        fn walk(p: &mut [p2p_nccl::xml::XmlPci]) {
            for n in p {
                n.line = 0;
                walk(&mut n.children);
            }
        }
        for c in &mut x.cpus {
            c.line = 0;
            walk(&mut c.pci);
        }
        x
    };
    assert_eq!(strip(ours), strip(given));
}

/// `--confirm`'s second check on the recorded runs: the rules applied to the
/// system NCCL itself dumped give the paths predicted from the file it was
/// given (flat PHB, clique PIX, split PHB), and a wrong prediction is caught.
#[test]
fn predictions_agree_with_nccls_own_dumps() {
    let vm = facts(intel(), &["0000:00:06.0", "0000:00:07.0"]);
    // The VM had the socket NIC eth0 (10 Gb/s, no GDR) that the dumps show.
    let mut vm_nic = vm.clone();
    vm_nic.nics = vec![VmNic {
        name: "eth0".into(),
        function: None,
        speed_mbps: 10_000,
        gdr: false,
    }];
    for name in ["flat", "clique", "split"] {
        let file =
            std::fs::read_to_string(repo_root().join(RESULTS).join(format!("file-{name}.xml")))
                .unwrap();
        let dump = std::fs::read_to_string(
            repo_root()
                .join(RESULTS)
                .join(format!("nccl-dump-{name}.xml")),
        )
        .unwrap();
        let pred = run(Some(&file), &vm_nic, &env(&[]), DriverP2p::Allowed);
        let diff =
            p2p_guest::nccl_topo::explain::confirm::against_dump(&dump, &vm_nic, &pred).unwrap();
        assert_eq!(diff, Vec::<String>::new(), "{name}");
    }
    // The flat file's prediction against the clique run's dump: PHB vs PIX.
    let file = std::fs::read_to_string(repo_root().join(RESULTS).join("file-flat.xml")).unwrap();
    let dump =
        std::fs::read_to_string(repo_root().join(RESULTS).join("nccl-dump-clique.xml")).unwrap();
    let pred = run(Some(&file), &vm_nic, &env(&[]), DriverP2p::Allowed);
    let diff = p2p_guest::nccl_topo::explain::confirm::against_dump(&dump, &vm_nic, &pred).unwrap();
    assert_eq!(
        diff,
        vec![
            "0000:00:06.0-0000:00:07.0: predicted path PHB, NCCL's own system has PIX".to_string()
        ]
    );
}

/// The captured guest of the injection test (QEMU mirror with real switches,
/// capabilities naming cliques 0, 0, 0, 1, 2, 2): without a file NCCL reads
/// sysfs, and 25:00.0 (clique 0, on a root port beside the switch of 23:00.0
/// and 24:00.0) is PHB from them, so NCCL refuses P2P the driver allows; the
/// file `nccl-topo --install` writes from the cliques puts each clique under
/// one switch, and every mismatch is gone: P2P exactly within the cliques.
#[test]
fn derived_file_makes_nccl_agree_with_the_cliques() {
    let tree = fixture_dir("qemu-11.1-vfio-user-gpus");
    let none = tree.join("absent.xml");
    let r = explain_json(&tree, &["--default-path", none.to_str().unwrap()], &[]);
    let mismatches: Vec<&str> = r["mismatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert_eq!(mismatches.len(), 2, "{mismatches:#?}");
    assert!(mismatches[0].starts_with("the driver enables P2P for 0000:23:00.0-0000:25:00.0 (enable: both in clique 0), NCCL will not (PHB beyond PXB)"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("vt.xml");
    stdout_of(
        Command::new(binary("p2p-guest"))
            .args(["nccl-topo", "--install", "--sysfs-root"])
            .arg(&tree)
            .arg("--out")
            .arg(&file),
    );
    let r = explain_json(&tree, &["--file", file.to_str().unwrap()], &[]);
    assert_eq!(r["mismatches"], serde_json::json!([]));
    let clique = |bdf: &str| match bdf {
        "0000:23:00.0" | "0000:24:00.0" | "0000:25:00.0" => 0,
        "0000:41:00.0" => 1,
        _ => 2,
    };
    for p in r["pairs"].as_array().unwrap() {
        let (a, c) = (p["a"].as_str().unwrap(), p["b"].as_str().unwrap());
        let want = if clique(a) == clique(c) { "P2P" } else { "SHM" };
        assert_eq!(p["transport"], want, "{a}-{c}: {p:#}");
    }
}

/// NCCL 2.28.3's own channel lines from `explain --confirm` over the four
/// H200s of 2026-11-28 (NV18 through NVSwitch; the all-reduce, then a send
/// and a receive between every ordered pair). Against the prediction from
/// NCCL's dump of that run (every pair NVL, P2P): with the pair exchange all
/// six pairs are confirmed; the all-reduce's lines alone (connection index
/// 0: the ring 0-1-2-3-0) leave 06.0-08.0 and 07.0-09.0 without a channel,
/// reported as not connected and never as a difference (the false mismatch
/// of 2026-11-27).
#[test]
fn four_gpu_confirm_log_connects_every_pair_and_the_all_reduce_alone_does_not() {
    let dir = repo_root().join("docs/results/h200x4-2026-11-28-confirm-topo");
    let dump = std::fs::read_to_string(dir.join("nccl-topo-dump.xml")).unwrap();
    let log = std::fs::read_to_string(dir.join("nccl-log-channels.txt")).unwrap();
    let gpus = [
        "0000:00:06.0",
        "0000:00:07.0",
        "0000:00:08.0",
        "0000:00:09.0",
    ];
    let pred = run(
        Some(&dump),
        &facts(intel(), &gpus),
        &env(&[]),
        DriverP2p::Allowed,
    );
    assert_eq!(pred.pairs.len(), 6);
    for p in &pred.pairs {
        assert_eq!(
            (p.path, p.transport),
            (PathType::Nvl, Transport::P2p),
            "{p:?}"
        );
    }
    let order: Vec<_> = gpus.iter().map(|g| b(g)).collect();
    let seen = parse_log(&log);
    assert_eq!(seen.version.as_deref(), Some("2.28.3+cuda13.0"));
    let all = check_pairs(&pred, &seen, &order);
    assert_eq!(all.confirmed.len(), 6, "{all:?}");
    assert!(
        all.not_connected.is_empty() && all.differences.is_empty(),
        "{all:?}"
    );
    let ring: String = log
        .lines()
        .filter(|l| !l.contains("NCCL INFO Channel") || l.contains("/0 : "))
        .map(|l| format!("{l}\n"))
        .collect();
    let ring = check_pairs(&pred, &parse_log(&ring), &order);
    assert_eq!(ring.confirmed.len(), 4, "{ring:?}");
    assert_eq!(
        ring.not_connected
            .iter()
            .map(|n| n.split(": ").next().unwrap())
            .collect::<Vec<_>>(),
        ["0000:00:06.0-0000:00:08.0", "0000:00:07.0-0000:00:09.0"]
    );
    assert!(ring.differences.is_empty(), "{ring:?}");
}
