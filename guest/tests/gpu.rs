//! GPU tests: they need a VM with NVIDIA GPUs and the driver, so `cargo
//! test` lists them as ignored. Each test uses the GPUs it names (CUDA's
//! first, first two, or all, through `CUDA_VISIBLE_DEVICES`) and so holds on
//! a machine with more; a test of a pair on a one-GPU machine says on
//! standard error that it was skipped and why. Run them on such a machine with
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

/// The GPUs a test uses, whatever the machine has: CUDA's first, its first
/// two, or every GPU. p2p-guest (and NCCL below it) use what
/// `CUDA_VISIBLE_DEVICES` shows, so a test of one or two GPUs holds on a
/// machine of eight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gpus {
    One,
    Two,
    All,
}

/// p2p-guest with `gpus` visible.
fn p2p_guest(gpus: Gpus) -> Command {
    let mut c = Command::new(bin());
    match gpus {
        Gpus::One => c.env("CUDA_VISIBLE_DEVICES", "0"),
        Gpus::Two => c.env("CUDA_VISIBLE_DEVICES", "0,1"),
        Gpus::All => c.env_remove("CUDA_VISIBLE_DEVICES"),
    };
    c
}

/// Whether this machine has at least `n` GPUs. A test that needs more than
/// the machine has says so on standard error, naming itself, and passes
/// without running: on a one-GPU VM the pair tests report themselves skipped
/// while the one-GPU tests run.
fn machine_has(n: usize, test: &str) -> bool {
    static COUNT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let have = *COUNT.get_or_init(|| {
        run_json(Gpus::All, &["probe", "--json"])["gpus"]
            .as_array()
            .map_or(0, Vec::len)
    });
    if have < n {
        // Straight to the process's stderr: the harness captures eprintln!
        // of a passing test, and a skip must not pass unseen.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr().lock(),
            "SKIPPED {test}: needs {n} GPUs, this machine has {have} ({WHY})"
        );
    }
    have >= n
}

fn run_json(gpus: Gpus, args: &[&str]) -> Value {
    let out = p2p_guest(gpus).args(args).output().expect("p2p-guest runs");
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
    if !machine_has(2, "probe_sees_every_gpu_and_cuda_agrees_with_the_decision") {
        return;
    }
    let v = run_json(Gpus::All, &["probe", "--json"]);
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
    let v = run_json(Gpus::All, &["probe", "--enable", "--json"]);
    let enabled = v["enabled"].as_array().unwrap();
    assert!(enabled.iter().all(|e| e["ok"] == true), "{enabled:?}");
}

#[test]
#[ignore = "needs >= 2 NVIDIA GPUs and their driver: run scripts/gpu.sh build here, then scripts/gpu.sh run on a GPU VM"]
fn bench_measures_verifies_and_orders_the_paths() {
    if !machine_has(2, "bench_measures_verifies_and_orders_the_paths") {
        return;
    }
    let v = run_json(
        Gpus::Two,
        &[
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
        ],
    );
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
    if !machine_has(2, "compare_of_p2p_and_forced_staging_shows_the_gap") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("p2p-gpu-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b, svg) = (dir.join("a.json"), dir.join("b.json"), dir.join("c.svg"));
    for (file, access) in [(&a, "decision"), (&b, "off")] {
        let out = p2p_guest(Gpus::Two)
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
    let out = p2p_guest(Gpus::Two)
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
    if !machine_has(2, "verification_counts_every_sample_and_the_warm_up") {
        return;
    }
    let mib = 1u64 << 20;
    let (samples, rounds) = (3u64, 1000u64);
    let v = run_json(
        Gpus::Two,
        &[
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
        ],
    );
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
    if !machine_has(2, "probe_verify_moves_data_both_ways") {
        return;
    }
    let v = run_json(
        Gpus::All,
        &["probe", "--json", "--verify", "--verify-size", "4M"],
    );
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
    let checks = p2p_guest::verify::pair(g, g, 3 << 20).expect("verify runs");
    assert_eq!(checks.len(), 6);
    for c in &checks {
        assert!(c.ok(), "{c:?}");
        assert_eq!(c.checked_bytes, 3 << 20);
    }
}

/// Every copy mode, `max` included, on one GPU (`--pairs self`: each GPU
/// with itself) through the one sampling loop: the warm-up and every sample
/// checked byte for byte, the report naming the CUDA ordinal, and `max`
/// splitting each copy over the copy-engine streams and both SM kernels so
/// that its parts cover the copy. Runs on a one-GPU VM.
#[test]
#[ignore = "needs an NVIDIA GPU and its driver: run scripts/gpu.sh build here, then the test binary on a GPU VM"]
fn every_copy_mode_on_one_gpu_through_one_sampling_loop() {
    let (samples, sizes) = (3u64, [4096u64, 64 << 20]);
    let v = run_json(
        Gpus::One,
        &[
            "bench",
            "--pairs",
            "self",
            "--gpus",
            "0",
            "--modes",
            "ce,sm-read,sm-write,staged,driver,max",
            "--sizes",
            "4K,64M",
            "--directions",
            "uni,bi",
            "--samples",
            "3",
            "--warmup",
            "2",
            "--no-progress",
            "--json",
            "-",
        ],
    );
    assert_eq!(
        v["gpus"][0]["ordinal"], 0,
        "the CUDA ordinal, not a position"
    );
    let results = v["results"].as_array().unwrap();
    // Six modes, two sizes, one-way only (a GPU with itself has no `bi`).
    assert_eq!(results.len(), 6 * sizes.len(), "{results:?}");
    for m in results {
        let bytes = m["bytes"].as_u64().unwrap();
        assert_eq!(m["direction"], "uni");
        assert_eq!((m["src"].as_u64(), m["dst"].as_u64()), (Some(0), Some(0)));
        assert_eq!(m["verification"]["mismatches"], 0, "{m}");
        assert_eq!(
            m["verification"]["checked_bytes"].as_u64().unwrap(),
            (samples + 1) * bytes,
            "warm-up and every sample compared: {m}"
        );
        assert_eq!(
            m["sample_seconds"].as_array().unwrap().len() as u64,
            samples
        );
        let parts = m["parts"].as_array();
        if m["mode"] == "max" {
            let parts = parts.expect("max reports its parts");
            let names: Vec<&str> = parts
                .iter()
                .map(|p| p["engine"].as_str().unwrap())
                .collect();
            assert_eq!(names[0], "ce0", "{names:?}");
            assert!(names.ends_with(&["sm-write", "sm-read"]), "{names:?}");
            let sum: u64 = parts.iter().map(|p| p["bytes"].as_u64().unwrap()).sum();
            assert_eq!(sum, bytes, "the parts cover the copy once: {m}");
            assert!(
                parts
                    .iter()
                    .all(|p| p["alone_gbps"].as_f64().unwrap() > 0.0),
                "{m}"
            );
            if bytes == 4096 {
                // Smaller than one 64 KiB granule per part: one part takes it.
                assert_eq!(parts.iter().filter(|p| p["bytes"] != 0).count(), 1, "{m}");
            }
        } else {
            assert!(parts.is_none(), "{m}");
        }
    }
}

/// `max` across a real pair: one transfer split over the copy engines and SM
/// kernels of both GPUs, verified like every mode; its figures beside each
/// single method (not asserted: a benchmark, printed for the README).
#[test]
#[ignore = "needs >= 2 NVIDIA GPUs and their driver: run scripts/gpu.sh build here, then scripts/gpu.sh run on a GPU VM"]
fn max_splits_one_transfer_over_every_engine_of_a_pair() {
    if !machine_has(2, "max_splits_one_transfer_over_every_engine_of_a_pair") {
        return;
    }
    let v = run_json(
        Gpus::Two,
        &[
            "bench",
            "--modes",
            "ce,sm-read,sm-write,max",
            "--sizes",
            "256M",
            "--directions",
            "uni,bi",
            "--samples",
            "5",
            "--no-progress",
            "--json",
            "-",
        ],
    );
    let results = v["results"].as_array().unwrap();
    assert!(results.iter().any(|m| m["mode"] == "max"), "max ran");
    for m in results {
        assert!(m["verification"]["mismatches"] == 0, "{m}");
        if m["mode"] == "max" {
            let sum: u64 = m["parts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["bytes"].as_u64().unwrap())
                .sum();
            assert_eq!(sum, 256 << 20, "{m}");
        }
        println!(
            "{} {} {}->{}: {:.1} GB/s {}",
            m["mode"], m["direction"], m["src"], m["dst"], m["gbps"]["median"], m["parts"]
        );
    }
}

/// `explain --confirm` output on `gpus`: exit status and the JSON report.
fn confirm_json(gpus: Gpus, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, Value) {
    let out = p2p_guest(gpus)
        .args(["nccl-topo", "explain", "--confirm", "--json"])
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("p2p-guest runs");
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "explain --confirm {args:?}: no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), v)
}

fn gpu_addresses(gpus: Gpus) -> Vec<String> {
    let probe = run_json(gpus, &["probe", "--json"]);
    probe["gpus"]
        .as_array()
        .expect("gpus")
        .iter()
        .map(|g| g["bdf"].as_str().expect("bdf").to_string())
        .collect()
}

/// Keeps NCCL's debug output and dump of one confirm run under $OUT (or the
/// temporary directory) for the record.
fn keep_confirm(dir: &std::path::Path, name: &str, v: &Value) {
    let kept = v["confirm"]["kept_in"].as_str().unwrap().to_string();
    let out = std::env::var("OUT").unwrap_or_else(|_| dir.display().to_string());
    let dest = std::path::Path::new(&out)
        .join("explain-confirm")
        .join(name.replace([' ', ',', '='], "-"));
    std::fs::create_dir_all(&dest).unwrap();
    for f in ["nccl-debug.txt", "nccl-topo-dump.xml"] {
        let _ = std::fs::copy(std::path::Path::new(&kept).join(f), dest.join(f));
    }
    std::fs::write(
        dest.join("explain.json"),
        serde_json::to_string_pretty(v).unwrap(),
    )
    .unwrap();
}

/// Writes the file `p2p-guest nccl-topo --hide-nvlink [--assume-clique ..]`
/// derives for `gpus` into `dir/name.xml`.
fn derived_file(gpus: Gpus, dir: &std::path::Path, name: &str, cliques: &[String]) -> String {
    let mut args = vec!["nccl-topo".to_string(), "--hide-nvlink".into()];
    for c in cliques {
        args.push("--assume-clique".into());
        args.push(c.clone());
    }
    let out = p2p_guest(gpus).args(&args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let p = dir.join(format!("{name}.xml"));
    std::fs::write(&p, &out.stdout).unwrap();
    p.display().to_string()
}

/// NCCL itself on CUDA's first GPU, with sysfs alone and with a derived
/// file: it initialises, runs a verified all-reduce, and the system it dumps
/// gives the net and GPUDirect RDMA verdict explain predicted. No pair, so
/// nothing confirmed and nothing left unconnected.
#[test]
#[ignore = "needs an NVIDIA GPU, its driver and libnccl: run scripts/gpu.sh build here, then the test binary on a GPU VM"]
fn explain_confirm_on_one_gpu() {
    let gpus = gpu_addresses(Gpus::One);
    assert_eq!(
        gpus.len(),
        1,
        "CUDA_VISIBLE_DEVICES=0 shows one GPU: {gpus:?}"
    );
    let clique = format!("{}=0", gpus[0]);
    for args in [vec![], vec!["--assume-clique", clique.as_str()]] {
        let (code, v) = confirm_json(Gpus::One, &args, &[]);
        assert_eq!(code, Some(0), "{args:?}: {v:#}");
        assert!(
            v["confirm"]["nccl_version"]
                .as_str()
                .unwrap_or("")
                .starts_with("2."),
            "{v:#}"
        );
        assert_eq!(v["pairs"], serde_json::json!([]), "{args:?}");
        for field in ["differences", "confirmed", "not_connected"] {
            assert_eq!(
                v["confirm"][field],
                serde_json::json!([]),
                "{field} {args:?}"
            );
        }
    }
}

/// NCCL on CUDA's first two GPUs with the four files of the recorded H200
/// run (NVLink hidden: flat, one clique, two cliques; and the real NVLink
/// view) and with NCCL_P2P_LEVEL / NCCL_P2P_DISABLE set: NCCL's channels use
/// exactly the predicted transport every time, and the pair is confirmed.
/// On an Intel host (the H200 and H100 VMs): flat SHM, clique P2P, split SHM,
/// NVLink P2P, PHB allowed by NCCL_P2P_LEVEL=SYS, P2P off with
/// NCCL_P2P_DISABLE=1.
#[test]
#[ignore = "needs >= 2 NVIDIA GPUs and their driver: run scripts/gpu.sh build here, then scripts/gpu.sh run on a GPU VM"]
fn explain_confirm_matches_nccl_on_two_gpus() {
    if !machine_has(2, "explain_confirm_matches_nccl_on_two_gpus") {
        return;
    }
    let gpus = gpu_addresses(Gpus::Two);
    assert_eq!(gpus.len(), 2, "{WHY}: {gpus:?}");
    let (a, b) = (gpus[0].as_str(), gpus[1].as_str());
    let dir = std::env::temp_dir().join("vp2p-gpu-explain");
    std::fs::create_dir_all(&dir).unwrap();
    let flat = derived_file(Gpus::Two, &dir, "flat", &[]);
    let clique = derived_file(
        Gpus::Two,
        &dir,
        "clique",
        &[format!("{a}=0"), format!("{b}=0")],
    );
    let split = derived_file(
        Gpus::Two,
        &dir,
        "split",
        &[format!("{a}=0"), format!("{b}=1")],
    );
    let intel = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap()
        .contains("GenuineIntel");
    type Case<'a> = (&'a str, Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        ("flat", vec!["--file", &flat], vec![], "SHM"),
        ("clique", vec!["--file", &clique], vec![], "P2P"),
        ("split", vec!["--file", &split], vec![], "SHM"),
        (
            "nvlink view",
            vec!["--default-path", "/nonexistent"],
            vec![],
            "P2P",
        ),
        (
            "flat, NCCL_P2P_LEVEL=SYS",
            vec!["--file", &flat],
            vec![("NCCL_P2P_LEVEL", "SYS")],
            "P2P",
        ),
        (
            "clique, NCCL_P2P_DISABLE=1",
            vec!["--file", &clique],
            vec![("NCCL_P2P_DISABLE", "1")],
            "SHM",
        ),
    ];
    for (name, args, env, want) in cases {
        let (code, v) = confirm_json(Gpus::Two, &args, &env);
        keep_confirm(&dir, name, &v);
        assert_eq!(
            v["confirm"]["differences"],
            serde_json::json!([]),
            "{name}: {v:#}"
        );
        assert_eq!(code, Some(0), "{name}");
        assert_eq!(
            v["confirm"]["confirmed"],
            serde_json::json!([format!("{a}-{b}")]),
            "{name}: {v:#}"
        );
        if intel {
            assert_eq!(v["pairs"][0]["transport"], want, "{name}: {v:#}");
        }
    }
}

/// NCCL over every GPU of the machine: besides the all-reduce, a send and a
/// receive between every ordered pair, so every pair has channels and is
/// confirmed (none left unconnected), exit 0; then with NVLink hidden by the
/// derived file, what NCCL did per pair, again every pair connected and as
/// predicted.
#[test]
#[ignore = "needs >= 2 NVIDIA GPUs and their driver: run scripts/gpu.sh build here, then scripts/gpu.sh run on a GPU VM"]
fn explain_confirm_connects_every_pair_of_the_machine() {
    if !machine_has(2, "explain_confirm_connects_every_pair_of_the_machine") {
        return;
    }
    let gpus = gpu_addresses(Gpus::All);
    assert!(gpus.len() >= 2, "{WHY}: {gpus:?}");
    let pairs = gpus.len() * (gpus.len() - 1) / 2;
    let dir = std::env::temp_dir().join("vp2p-gpu-explain-all");
    std::fs::create_dir_all(&dir).unwrap();
    let hidden = derived_file(Gpus::All, &dir, "all-nvlink-hidden", &[]);
    for (name, args) in [
        ("all, as the VM is", vec!["--default-path", "/nonexistent"]),
        ("all, nvlink hidden", vec!["--file", hidden.as_str()]),
    ] {
        let (code, v) = confirm_json(Gpus::All, &args, &[]);
        keep_confirm(&dir, name, &v);
        assert_eq!(v["pairs"].as_array().unwrap().len(), pairs, "{name}");
        assert_eq!(
            v["confirm"]["differences"],
            serde_json::json!([]),
            "{name}: {v:#}"
        );
        assert_eq!(
            v["confirm"]["not_connected"],
            serde_json::json!([]),
            "{name}: every pair exchanged data: {v:#}"
        );
        assert_eq!(
            v["confirm"]["confirmed"].as_array().unwrap().len(),
            pairs,
            "{name}: {v:#}"
        );
        assert_eq!(code, Some(0), "{name}");
        for p in v["pairs"].as_array().unwrap() {
            println!(
                "{name}: {}-{} {} {}",
                p["a"], p["b"], p["path"], p["transport"]
            );
        }
    }
}

/// `p2p-guest doctor` live over every GPU. On a machine of one GPU: the GPU
/// checked with itself (the verify core's 6 checks and a device-local
/// copy-engine copy, every byte arrived), no pair, verdict OK, exit 0, and
/// the text says "no pair". With more GPUs: every pair's verdict follows
/// from what was measured: every pair the driver allows had its data
/// checked and was measured; OK only with the measured one-way (and
/// two-way) figure at least 0.8 of the one it is held to, SLOW only with
/// one below and its reasons and likely causes; the VM's verdict is the
/// worst pair's and the exit status the verdict's.
#[test]
#[ignore = "needs an NVIDIA GPU and its driver: run scripts/gpu.sh build here, then the test binary on a GPU VM"]
fn doctor_on_the_gpus_of_this_machine() {
    let out = p2p_guest(Gpus::All)
        .args(["doctor", "--quick", "--json", "--no-progress"])
        .output()
        .expect("p2p-guest runs");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(v["schema"], "vp2p.doctor/1");
    assert_eq!(
        out.status.code(),
        v["exit_code"].as_i64().map(|c| c as i32),
        "{v:#}"
    );
    let gpus = v["gpus"].as_array().expect("gpus");
    assert!(!gpus.is_empty(), "no GPU seen: {v:#}");
    let not_checked = v["not_checked"].as_array().unwrap();
    assert!(
        !not_checked
            .iter()
            .any(|n| n["needs"].as_str().unwrap_or("").contains("NVIDIA driver")),
        "the driver is here: {not_checked:?}"
    );
    if gpus.len() == 1 {
        assert_eq!(v["verdict"], "ok", "{v:#}");
        assert_eq!(out.status.code(), Some(0));
        assert!(v["pairs"].as_array().unwrap().is_empty());
        let s = &gpus[0]["self_check"];
        assert_eq!(
            s["data_checks"], 7,
            "6 verify checks and the local copy: {v:#}"
        );
        assert_eq!(s["data_ok"], 7, "{v:#}");
        assert!(s["local_ce_gbps"].as_f64().unwrap() > 0.0);
        assert!(v["reason"].as_str().unwrap().contains("no pair"), "{v:#}");
        let text = p2p_guest(Gpus::All)
            .args(["doctor", "--quick", "--no-progress"])
            .output()
            .expect("p2p-guest runs");
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.starts_with("VERDICT: OK"), "{text}");
        assert!(text.contains("No pair: one GPU"), "{text}");
    } else {
        let pairs = v["pairs"].as_array().unwrap();
        assert_eq!(pairs.len(), gpus.len() * (gpus.len() - 1) / 2, "{v:#}");
        let rank = |x: &Value| match x.as_str().unwrap() {
            "ok" => 0,
            "slow" => 1,
            "broken" => 2,
            other => panic!("verdict {other}"),
        };
        let mut worst = 0;
        for p in pairs {
            worst = worst.max(rank(&p["verdict"]));
            let reasons = p["reasons"].as_array().unwrap();
            assert!(!reasons.is_empty(), "a verdict says why: {p:#}");
            if p["driver"] != "allowed" {
                continue;
            }
            assert_eq!(p["data_verified"], true, "{p:#}");
            let m = &p["measured"];
            let e = &p["expected"];
            assert!(
                m["ce_bi_gbps"].as_f64().is_some_and(|g| g > 0.0),
                "measured both ways: {p:#}"
            );
            // The one-way ratio, recomputed from the two figures reported.
            let a_b = m["ce_a_to_b_gbps"].as_f64().unwrap();
            let b_a = m["ce_b_to_a_gbps"].as_f64().unwrap();
            let want = e["uni_gbps"].as_f64().expect("held to a figure");
            let ratio = a_b.min(b_a) / want;
            assert!(
                (p["ratio"].as_f64().unwrap() - ratio).abs() < 1e-6,
                "ratio {} against {ratio}: {p:#}",
                p["ratio"]
            );
            let bi_low = p["bi_ratio"].as_f64().is_some_and(|r| r < 0.8);
            let low = ratio < 0.8 || bi_low;
            match p["verdict"].as_str().unwrap() {
                "ok" => assert!(!low, "OK below 0.8 of {}: {p:#}", e["source"]),
                "slow" => {
                    assert!(low, "SLOW though every ratio is at least 0.8: {p:#}");
                    assert!(!p["likely_causes"].as_array().unwrap().is_empty(), "{p:#}");
                }
                _ => {}
            }
            println!(
                "doctor {}-{}: {} ratio {ratio:.3} ({:.1} of {want:.1} GB/s, {})",
                p["a"],
                p["b"],
                p["verdict"],
                a_b.min(b_a),
                e["source"]
            );
        }
        // A GPU's own flag can only make the VM's verdict worse.
        let gpu_flags = !v["gpu_flags"].as_array().unwrap().is_empty();
        let verdict = rank(&v["verdict"]);
        assert!(
            verdict == worst || (verdict > worst && gpu_flags),
            "the VM's verdict is its worst pair's: {v:#}"
        );
        let worst = verdict;
        assert_eq!(out.status.code(), Some(worst), "{v:#}");
    }
}
