//! Helpers for the `nccl-topo explain` tests: VM facts, NCCL variables and
//! the recorded H200 runs.

use std::path::Path;
use std::process::Command;

use p2p_nccl::{
    effective, CpuIdentity, DriverP2p, Graph, NcclEnv, PathType, Prediction, Transport, VmFacts,
    VmFunction,
};
use p2p_topology::Bdf;

use crate::{binary, fixture_dir};

/// A bus id from text.
pub fn b(s: &str) -> Bdf {
    s.parse().unwrap()
}

/// The H200 VM's CPU as NCCL saw it (GenuineIntel, family 6, model 207).
pub fn intel() -> CpuIdentity {
    CpuIdentity {
        arch: "x86_64".into(),
        vendor: Some("GenuineIntel".into()),
        familyid: Some(6),
        modelid: Some(207),
    }
}

/// An AMD x86 CPU (family 25).
pub fn amd() -> CpuIdentity {
    CpuIdentity {
        arch: "x86_64".into(),
        vendor: Some("AuthenticAMD".into()),
        familyid: Some(25),
        modelid: Some(1),
    }
}

/// A GPU on the flat root bus (as in a Firecracker or plain QEMU VM).
pub fn flat_gpu(bus: &str) -> VmFunction {
    VmFunction {
        busid: b(bus),
        class: 0x030200,
        numa: -1,
        bridges: Vec::new(),
        link_speed: Some("32.0 GT/s PCIe".into()),
        link_width: Some(16),
    }
}

/// A VM with `gpus` on its flat root bus, no NICs, NVML asked (no NVLink).
pub fn facts(cpu: CpuIdentity, gpus: &[&str]) -> VmFacts {
    VmFacts {
        cpu,
        gpus: gpus.iter().map(|g| flat_gpu(g)).collect(),
        nics: Vec::new(),
        nvlinks: Some(Vec::new()),
    }
}

/// NCCL variables as if set in the environment.
pub fn env(vars: &[(&str, &str)]) -> NcclEnv {
    NcclEnv::from_sources(vars.iter().map(|(k, v)| (*k, *v, "environment")))
}

/// NCCL's verdicts on `file` (None: no file) in `vm`, the driver answering `driver` for every pair.
pub fn run(file: Option<&str>, vm: &VmFacts, e: &NcclEnv, driver: DriverP2p) -> Prediction {
    let xml = file.map(|t| p2p_nccl::parse(t).expect("test file parses"));
    let eff = effective(xml.as_ref(), vm);
    let g = Graph::build(&eff.xml);
    let order: Vec<Bdf> = vm.gpus.iter().map(|g| g.busid).collect();
    p2p_nccl::predict(&g, e, &order, &|_, _| driver)
}

/// The path and transport of the pair `a`-`c`, either order.
pub fn pair(p: &Prediction, a: &str, c: &str) -> (PathType, Transport) {
    let v = p
        .pairs
        .iter()
        .find(|v| (v.a, v.b) == (b(a), b(c)) || (v.a, v.b) == (b(c), b(a)))
        .unwrap_or_else(|| panic!("no pair {a}-{c} in {p:#?}"));
    (v.path, v.transport)
}

/// NCCL's recorded runs on the 2x H200 VM.
pub const RESULTS: &str = "docs/results/h200x2-2026-11-24/nccl-transport";

/// `p2p-guest nccl-topo explain --json --no-driver` on `tree` with the H200 VM's CPU identity, no NCCL variables inherited.
pub fn explain_json(tree: &Path, args: &[&str], envs: &[(&str, &str)]) -> serde_json::Value {
    let out = Command::new(binary("p2p-guest"))
        .args([
            "nccl-topo",
            "explain",
            "--json",
            "--no-driver",
            "--sysfs-root",
        ])
        .arg(tree)
        .arg("--cpuinfo")
        .arg(fixture_dir("h200x2-passthrough-guest").join("cpuinfo-identity.txt"))
        .args(args)
        .env_remove("NCCL_TOPO_FILE")
        .env_remove("NCCL_P2P_LEVEL")
        .env_remove("NCCL_P2P_DISABLE")
        .env("HOME", "/nonexistent")
        .envs(envs.iter().copied())
        .output()
        .expect("p2p-guest runs");
    assert!(
        out.status.success(),
        "explain {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// `p2p-guest nccl-topo explain --no-driver --json --file FILE` in the VM
/// whose sysfs is `sysfs`, with the CPU identity of `cpuinfo` and no NCCL
/// variable, whatever it exits with: its exit status and report.
pub fn explain_file(sysfs: &Path, cpuinfo: &Path, file: &Path) -> (Option<i32>, serde_json::Value) {
    let out = Command::new(binary("p2p-guest"))
        .args([
            "nccl-topo",
            "explain",
            "--no-driver",
            "--json",
            "--sysfs-root",
        ])
        .arg(sysfs)
        .arg("--cpuinfo")
        .arg(cpuinfo)
        .arg("--file")
        .arg(file)
        .env_remove("NCCL_TOPO_FILE")
        .env("HOME", "/nonexistent")
        .output()
        .expect("p2p-guest runs");
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), report)
}

/// NCCL's first WARN in a log, as explain quotes it (`NCCL WARN ...`).
pub fn nccl_warn(log: &str) -> Option<String> {
    log.lines()
        .find_map(|l| l.split(" NCCL WARN ").nth(1))
        .map(|w| format!("NCCL WARN {w}"))
}

/// The first pair's transport in an explain report.
pub fn transport(report: &serde_json::Value) -> String {
    report["pairs"][0]["transport"]
        .as_str()
        .unwrap()
        .to_string()
}
