//! GPU tests: they need a VM with two or more NVIDIA GPUs and the driver, so
//! `cargo test` lists them as ignored. Run them on such a machine with
//! `bash scripts/gpu.sh build` (builds this test binary and p2p-guest here),
//! then `bash scripts/gpu.sh run` on the GPU VM (it runs `P2P_GUEST_BIN=./p2p-guest ./gpu-tests --ignored`),
//! or directly there with `cargo test -p p2p-guest --test gpu -- --ignored`.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

const WHY: &str = "needs >= 2 NVIDIA GPUs and their driver: run scripts/gpu.sh build here, then scripts/gpu.sh run on a GPU VM";

fn bin() -> PathBuf {
    std::env::var_os("P2P_GUEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_p2p-guest")))
}

fn run_json(args: &[&str]) -> Value {
    let out = Command::new(bin())
        .args(args)
        .output()
        .expect("p2p-guest runs");
    assert!(
        out.status.success(),
        "p2p-guest {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

#[test]
#[ignore = "needs >= 2 NVIDIA GPUs and their driver: run scripts/gpu.sh build here, then scripts/gpu.sh run on a GPU VM"]
fn probe_sees_every_gpu_and_cuda_agrees_with_the_decision() {
    let _ = WHY;
    let v = run_json(&["probe", "--json"]);
    assert_eq!(v["cuda"]["available"], true, "{}", v["cuda"]);
    let gpus = v["gpus"].as_array().unwrap();
    assert!(gpus.len() >= 2, "need two GPUs, found {}", gpus.len());
    for g in gpus {
        assert!(g["cuda_ordinal"].is_u64(), "CUDA does not see {}", g["bdf"]);
        // The clique is the capability's, or null without one.
        match g["capability"]["state"].as_str().unwrap() {
            "present" => assert_eq!(g["clique"], g["capability"]["clique"]),
            _ => assert!(g["clique"].is_null()),
        }
    }
    for p in v["pairs"].as_array().unwrap() {
        if p["verdict"] == "enable" {
            assert_eq!(
                p["cuda"][0]["can_access"], true,
                "decision enable but CUDA says no: {p}"
            );
        }
        assert!(
            p["flags"].as_array().unwrap().is_empty(),
            "inconsistency on this VM: {p}"
        );
    }
    let v = run_json(&["probe", "--enable", "--json"]);
    let enabled = v["enabled"].as_array().unwrap();
    assert!(enabled.iter().all(|e| e["ok"] == true), "{enabled:?}");
}

#[test]
#[ignore = "needs >= 2 NVIDIA GPUs and their driver: run scripts/gpu.sh build here, then scripts/gpu.sh run on a GPU VM"]
fn bench_measures_verifies_and_orders_the_paths() {
    let v = run_json(&[
        "bench",
        "--modes",
        "ce,sm-read,sm-write,staged,driver,pingpong",
        "--sizes",
        "16,16M",
        "--samples",
        "3",
        "--no-progress",
        "--json",
        "-",
    ]);
    let results = v["results"].as_array().unwrap();
    assert!(!results.is_empty());
    for m in results {
        let ver = &m["verification"];
        assert!(
            ver["checked_bytes"].as_u64().unwrap() > 0 && ver["mismatches"] == 0,
            "{m}"
        );
        assert!(m["gbps"]["median"].as_f64().unwrap() > 0.0, "{m}");
        assert_eq!(m["sample_seconds"].as_array().unwrap().len(), 3);
    }
    let gbps = |mode: &str, bytes: u64| {
        results
            .iter()
            .find(|m| {
                m["mode"] == mode && m["direction"] == "uni" && m["bytes"] == bytes && m["src"] == 0
            })
            .map(|m| m["gbps"]["median"].as_f64().unwrap())
            .unwrap_or_else(|| panic!("no {mode} at {bytes}"))
    };
    let mb16 = 16 << 20;
    // With peer access the copy engine beats the host-staged paths, and ours
    // beats the driver's.
    assert!(
        gbps("ce", mb16) > gbps("staged", mb16),
        "ce not faster than staging"
    );
    assert!(
        gbps("staged", mb16) > gbps("driver", mb16),
        "our staging not faster than the driver's"
    );
    let pp = results
        .iter()
        .find(|m| m["mode"] == "pingpong")
        .expect("ping-pong ran");
    let us = pp["latency_us"]["median"].as_f64().unwrap();
    assert!(
        us > 0.05 && us < 50.0,
        "one-way latency {us} us is implausible"
    );
}

#[test]
#[ignore = "needs >= 2 NVIDIA GPUs and their driver: run scripts/gpu.sh build here, then scripts/gpu.sh run on a GPU VM"]
fn compare_of_p2p_and_forced_staging_shows_the_gap() {
    let dir = std::env::temp_dir().join(format!("p2p-gpu-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b, svg) = (dir.join("a.json"), dir.join("b.json"), dir.join("c.svg"));
    for (file, access) in [(&a, "decision"), (&b, "off")] {
        let out = Command::new(bin())
            .args([
                "bench",
                "--modes",
                "ce",
                "--sizes",
                "64K,16M",
                "--samples",
                "3",
                "--no-progress",
                "--peer-access",
                access,
                "--json",
            ])
            .arg(file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = Command::new(bin())
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .arg("--json")
        .arg("--svg")
        .arg(&svg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = c["rows"].as_array().unwrap();
    assert!(!rows.is_empty());
    for r in rows.iter().filter(|r| r["bytes"] == 16u64 << 20) {
        assert!(
            r["bandwidth_ratio"].as_f64().unwrap() < 0.5,
            "forced staging is not slower: {r}"
        );
    }
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
}

/// What each measurement says it compared is what the method compares: every
/// sample and the warm-up for copies and NCCL (the destination or result
/// buffers whole), and for ping-pong the per-round values on the GPUs plus the
/// host's read-back of two flags (4 B) and two round counters (8 B) per run.
#[test]
#[ignore = "needs >= 2 NVIDIA GPUs and their driver: run scripts/gpu.sh build here, then scripts/gpu.sh run on a GPU VM"]
fn verification_counts_every_sample_and_the_warm_up() {
    let mib = 1u64 << 20;
    let (samples, rounds) = (3u64, 1000u64);
    let v = run_json(&[
        "bench",
        "--modes",
        "ce,nccl,pingpong",
        "--sizes",
        "1M",
        "--directions",
        "uni",
        "--samples",
        "3",
        "--warmup",
        "2",
        "--pingpong-rounds",
        "1000",
        "--no-progress",
        "--json",
        "-",
    ]);
    let ranks = v["gpus"].as_array().unwrap().len() as u64;
    let results = v["results"].as_array().unwrap();
    assert!(!results.is_empty());
    for m in results {
        let checked = m["verification"]["checked_bytes"].as_u64().unwrap();
        assert_eq!(m["verification"]["mismatches"], 0, "{m}");
        let want = match m["mode"].as_str().unwrap() {
            "ce" => (samples + 1) * mib,
            "nccl" => (samples + 1) * mib * ranks,
            "pingpong" => (samples + 1) * 24 + 8 * (samples * rounds + rounds / 10),
            other => panic!("unexpected mode {other}"),
        };
        assert_eq!(checked, want, "{}: {m}", m["mode"]);
    }
}

/// `probe --verify`: every pair the decision enables moves distinct patterns
/// both ways with the copy engine and both SM kernels; the host compares
/// every byte; nothing is lost on a healthy VM.
#[test]
#[ignore = "needs >= 2 NVIDIA GPUs and their driver: run scripts/gpu.sh build here, then scripts/gpu.sh run on a GPU VM"]
fn probe_verify_moves_data_both_ways() {
    let v = run_json(&["probe", "--json", "--verify", "--verify-size", "4M"]);
    let enabled = v["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["verdict"] == "enable")
        .count();
    let checks = v["verify"].as_array().unwrap();
    assert_eq!(
        checks.len(),
        enabled * 6,
        "2 directions x ce, sm-read, sm-write per enabled pair"
    );
    for c in checks {
        assert_eq!(c["checked_bytes"], 4u64 << 20, "{c}");
        assert_eq!(c["mismatched_bytes"], 0, "{c}");
        assert!(c["error"].is_null(), "{c}");
    }
    assert!(v["flags"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["kind"] != "p2p_data_lost"));
}

/// The `--verify` machinery on one GPU (source and destination on the same
/// device): host-made patterns through the copy engine and both SM kernels,
/// read back and compared. Runs on a one-GPU VM too.
#[test]
#[ignore = "needs an NVIDIA GPU and its driver: run scripts/gpu.sh build here, then the test binary on a GPU VM"]
fn verify_machinery_on_one_gpu() {
    let cuda = p2p_guest::cuda::Cuda::open().expect("CUDA");
    let g = &cuda.gpus[0];
    let checks = p2p_guest::bench::verify::pair(g, g, 3 << 20).expect("verify runs");
    assert_eq!(checks.len(), 6);
    for c in &checks {
        assert!(c.ok(), "{c:?}");
        assert_eq!(c.checked_bytes, 3 << 20);
    }
}
