//! Files NCCL 2.28.3 refuses at initialisation, through the `p2p-guest`
//! binary: `nccl-topo explain` predicts ERROR for every pair, names NCCL's
//! message and exits 1; `nccl-topo install` refuses to install them. The VM
//! is the captured guest of six served H200s behind real switches
//! (tests/fixtures/qemu-11.1-vfio-user-gpus); the files are written here by
//! hand from NCCL's source, and checked against what NCCL 2.28.3 printed and
//! accepted on the lent VMs (docs/results).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use p2p_guest::nccl_topo::loader::loader_refusals;
use p2p_nccl::CpuIdentity;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn vm() -> PathBuf {
    repo().join("tests/fixtures/qemu-11.1-vfio-user-gpus")
}

fn cpuinfo() -> PathBuf {
    repo().join("tests/fixtures/h200x2-passthrough-guest/cpuinfo-identity.txt")
}

/// A scratch directory of this test's own, emptied first.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vp2p-loader-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn guest(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_p2p-guest"))
        .args(args)
        .env_remove("NCCL_TOPO_FILE")
        .env_remove("NCCL_P2P_LEVEL")
        .env_remove("NCCL_P2P_DISABLE")
        .env("HOME", "/nonexistent")
        .output()
        .expect("p2p-guest runs")
}

/// Two of the VM's GPUs below one switch, in a `<cpu>` that gives its
/// affinity but no numaid: auto-detection passes it, the loader does not
/// (src/graph/topo.cc:501 at v2.28.3-1).
const NO_NUMAID: &str = "<system version=\"1\">
  <cpu affinity=\"ff\" arch=\"x86_64\" vendor=\"GenuineIntel\" familyid=\"6\" modelid=\"207\">
    <pci busid=\"0000:ff:00.0\" class=\"0x060400\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">
      <pci busid=\"0000:23:00.0\" class=\"0x030200\"/>
      <pci busid=\"0000:24:00.0\" class=\"0x030200\"/>
    </pci>
  </cpu>
</system>
";

const WARN: &str = "NCCL WARN Attribute numaid of node cpu not found";

fn explain(file: &Path, json: bool) -> Output {
    let vm = vm();
    let cpu = cpuinfo();
    let mut args = vec![
        "nccl-topo",
        "explain",
        "--no-driver",
        "--sysfs-root",
        vm.to_str().unwrap(),
        "--cpuinfo",
        cpu.to_str().unwrap(),
        "--file",
        file.to_str().unwrap(),
    ];
    if json {
        args.push("--json");
    }
    guest(&args)
}

#[test]
fn explain_predicts_error_for_a_file_nccl_refuses() {
    let dir = scratch("explain");
    let file = dir.join("no-numaid.xml");
    std::fs::write(&file, NO_NUMAID).unwrap();
    let out = explain(&file, false);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains(WARN), "{text}");
    assert!(text.contains("REFUSED line 2: <cpu> numaid"), "{text}");
    assert!(
        text.contains("src/graph/topo.cc:501 at NCCL v2.28.3-1"),
        "{text}"
    );
    assert!(text.contains("0000:23:00.0-0000:24:00.0  DIS"), "{text}");
    let rows: Vec<&str> = text.lines().filter(|l| l.contains("  DIS  ")).collect();
    assert_eq!(rows.len(), 15, "{text}");
    assert!(rows.iter().all(|l| l.contains(" ERROR ")), "{text}");

    let out = explain(&file, true);
    assert_eq!(out.status.code(), Some(1));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["schema"], "vp2p.nccl-explain/1");
    let refusals = r["loader_refusals"].as_array().unwrap();
    assert_eq!(refusals.len(), 1, "{refusals:#?}");
    assert_eq!(
        refusals[0],
        serde_json::json!({
            "line": 2,
            "node": "<cpu>",
            "attribute": "numaid",
            "nccl_prints": WARN,
            "nccl_result": "ncclInternalError",
            "source": "src/graph/topo.cc:501",
            "why": "NCCL reads numaid of every <cpu> it keeps, and auto-detection never fills it in a <cpu> of the file",
        })
    );
    // Six GPUs, fifteen pairs, every one ERROR.
    let pairs = r["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 15);
    assert!(
        pairs.iter().all(|p| p["transport"] == "ERROR"),
        "{pairs:#?}"
    );

    // A tab where XML allows one: NCCL's reader stops (xml.cc:133); vp2p's
    // own reader would have read it, and says what NCCL says.
    let tabbed = dir.join("tab.xml");
    std::fs::write(
        &tabbed,
        NO_NUMAID
            .replace("affinity=\"ff\" ", "numaid=\"0\" ")
            .replace("\n    <pci busid=\"0000:ff", "\n\t<pci busid=\"0000:ff"),
    )
    .unwrap();
    let out = explain(&tabbed, true);
    assert_eq!(out.status.code(), Some(1));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        r["loader_refusals"][0]["nccl_prints"],
        "NCCL WARN XML Parse error : expecting '<', got '\t'"
    );
    assert_eq!(
        (
            r["loader_refusals"][0]["line"].as_u64(),
            r["loader_refusals"][0]["source"].as_str()
        ),
        (Some(3), Some("src/graph/xml.cc:133"))
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// NCCL 2.28.3 on the H100 VM, given a file of version 2, printed
/// `graph/xml.cc:374 NCCL WARN XML Topology has wrong version 2, 1 needed`
/// and failed with invalid usage (docs/results/h100x1-2026-11-23-nccl-topo,
/// ar-badversion.txt): explain, outside any VM, predicts exactly that.
#[test]
fn explain_predicts_what_nccl_printed_for_a_wrong_version() {
    let results = repo().join("docs/results/h100x1-2026-11-23-nccl-topo");
    let empty = scratch("empty");
    std::fs::create_dir_all(empty.join("bus/pci/devices")).unwrap();
    let cpu = cpuinfo();
    let out = guest(&[
        "nccl-topo",
        "explain",
        "--no-driver",
        "--json",
        "--sysfs-root",
        empty.to_str().unwrap(),
        "--cpuinfo",
        cpu.to_str().unwrap(),
        "--file",
        results.join("bad.xml").to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let f = &r["loader_refusals"][0];
    assert_eq!(f["nccl_result"], "ncclInvalidUsage");
    let source = f["source"].as_str().unwrap().trim_start_matches("src/");
    let line = format!("{source} {}", f["nccl_prints"].as_str().unwrap());
    let log = std::fs::read_to_string(results.join("ar-badversion.txt")).unwrap();
    assert!(log.contains(&line), "NCCL's log has no `{line}`");
    assert!(log.contains("invalid usage"));
    let _ = std::fs::remove_dir_all(&empty);
}

/// The files NCCL 2.28.3 was given and ran with on the H200 VM, and its own
/// dumps, are not refused: in that VM (both GPUs, its socket NIC eth0) nor
/// outside any.
#[test]
fn files_nccl_accepted_are_not_refused() {
    let cpu = CpuIdentity {
        arch: "x86_64".into(),
        vendor: Some("GenuineIntel".into()),
        familyid: Some(6),
        modelid: Some(207),
    };
    let dir = repo().join("docs/results/h200x2-2026-11-24/nccl-transport");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "xml"))
        .collect();
    files.push(repo().join("tests/fixtures/h200x2-passthrough-guest/nccl-topo-dump.xml"));
    files.push(repo().join("docs/results/h100x1-2026-11-25-explain/nccl-dump-clique.xml"));
    files.push(repo().join("docs/results/h200x4-2026-11-28-confirm-topo/nccl-topo-dump.xml"));
    assert!(files.len() >= 10, "{files:?}");
    let gpus = ["0000:00:06.0", "0000:00:07.0"].map(|b| b.parse().unwrap());
    let facts = p2p_nccl::VmFacts {
        cpu: cpu.clone(),
        gpus: gpus
            .iter()
            .map(|&busid| p2p_nccl::VmFunction {
                busid,
                class: 0x030200,
                numa: -1,
                bridges: Vec::new(),
                link_speed: None,
                link_width: None,
            })
            .collect(),
        nics: vec![p2p_nccl::VmNic {
            name: "eth0".into(),
            function: None,
            speed_mbps: 10_000,
            gdr: false,
        }],
        nvlinks: None,
    };
    let no_sysfs = scratch("none");
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for facts in [Some(&facts), None] {
            let r = loader_refusals(&text, &no_sysfs, facts, &cpu);
            assert!(r.is_empty(), "{}: {r:#?}", f.display());
        }
    }
    let _ = std::fs::remove_dir_all(&no_sysfs);
}

#[test]
fn install_refuses_a_file_nccl_refuses() {
    let dir = scratch("install");
    let from = dir.join("no-numaid.xml");
    std::fs::write(&from, NO_NUMAID).unwrap();
    let out_file = dir.join("virtualTopology.xml");
    let vm = vm();
    let out = guest(&[
        "nccl-topo",
        "install",
        "--from",
        from.to_str().unwrap(),
        "--sysfs-root",
        vm.to_str().unwrap(),
        "--out",
        out_file.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for want in [
        from.to_str().unwrap(),
        "NCCL 2.28.3 refuses this file at initialisation",
        "line 2: <cpu> numaid",
        WARN,
        "src/graph/topo.cc:501",
    ] {
        assert!(err.contains(want), "no `{want}` in: {err}");
    }
    assert!(!out_file.exists(), "nothing installed");
    let _ = std::fs::remove_dir_all(&dir);
}
