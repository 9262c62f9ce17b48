//! Messages that say the fix, and refusals that leave nothing behind: each
//! case runs the real binaries on captured trees and checks what a user reads.

use p2p_tests::process::SpawnOwned;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use p2p_tests::{binary, fixture_dir, repo_root, run};

const TWO_SOCKET: &str = "qemu-11.1-two-socket-iommu-on";
const NESTED: &str = "qemu-11.1-nested-switch-iommu-on";

fn root(name: &str) -> String {
    fixture_dir(name).to_str().unwrap().to_string()
}

#[test]
fn plan_names_the_real_mistake() {
    let r = run(
        "p2p-host",
        &[
            "plan",
            "--sysfs-root",
            &root(TWO_SOCKET),
            "--gpu-class",
            "0108",
            "--vm",
            "a=0000:23:00.0,0000:23:00.0",
        ],
    );
    assert_ne!(r.code, Some(0));
    assert!(
        r.stderr.contains("VM a: 0000:23:00.0 is listed twice"),
        "{}",
        r.stderr
    );
    // Enum values in any case.
    let r = run(
        "p2p-host",
        &[
            "plan",
            "--sysfs-root",
            &root(TWO_SOCKET),
            "--gpu-class",
            "0108",
            "--emit",
            "QEMU",
            "--guest-topology",
            "Mirror",
            "--max-level",
            "Phb",
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stdout.contains("-device pxb-pcie"));
}

/// A bad `--vm` value is refused by the argument parser, naming the option,
/// the value and what is wrong with it (exit 2, clap's usage error).
#[test]
fn vm_values_say_what_is_wrong() {
    let cases: [(&str, &str); 6] = [
        ("a", "'a': want NAME=BDF,BDF,..."),
        ("a=", "VM a: no devices after '='"),
        // A Proxmox-style slot without the function is not one function.
        (
            "a=0000:23:00.0,0000:24:00",
            "VM a: '0000:24:00' is not a PCI address (want DDDD:BB:DD.F or BB:DD.F): missing '.F'",
        ),
        ("a b=0000:23:00.0", "'a b': a VM name is letters, digits"),
        // The count form: at least one GPU, and only nics= after the colon.
        ("a=0", "VM a: want NAME=COUNT or NAME=COUNT:nics=M"),
        ("a=2:gpus=1", "VM a: want NAME=COUNT or NAME=COUNT:nics=M"),
    ];
    for (value, needle) in cases {
        let r = run(
            "p2p-host",
            &["plan", "--sysfs-root", &root(TWO_SOCKET), "--vm", value],
        );
        assert_eq!(r.code, Some(2), "{value}: {}", r.stderr);
        assert!(
            r.stderr.contains(&format!(
                "invalid value '{value}' for '--vm <NAME=BDF,...|NAME=COUNT[:nics=M]>'"
            )),
            "{value}: {}",
            r.stderr
        );
        assert!(r.stderr.contains(needle), "{value}: {}", r.stderr);
    }
}

#[test]
fn plans_vfio_cannot_start_are_refused_or_warned() {
    // nested-switch, IOMMU on: group 9 holds switch B's ports and gpu0/gpu1
    // (25:00.0, 26:00.0); see the fixture's kernel/iommu_groups.
    let split = run(
        "p2p-host",
        &[
            "plan",
            "--sysfs-root",
            &root(NESTED),
            "--gpu-class",
            "0108",
            "--vm",
            "a=0000:25:00.0",
            "--vm",
            "b=0000:26:00.0",
        ],
    );
    assert_ne!(split.code, Some(0));
    assert!(
        split
            .stderr
            .contains("IOMMU group 9 is split between VMs (0000:25:00.0 to a, 0000:26:00.0 to b)"),
        "{}",
        split.stderr
    );
    let half = run(
        "p2p-host",
        &[
            "plan",
            "--sysfs-root",
            &root(NESTED),
            "--gpu-class",
            "0108",
            "--vm",
            "a=0000:25:00.0",
            "--json",
        ],
    );
    assert_eq!(half.code, Some(0), "{}", half.stderr);
    assert!(
        half.stderr
            .contains("IOMMU group 9 also holds 0000:26:00.0"),
        "{}",
        half.stderr
    );
    let v: serde_json::Value = serde_json::from_str(&half.stdout).unwrap();
    let g = &v["iommu_groups"][0];
    assert_eq!(g["group"], 9);
    // Four bridges (switch B's ports) need nothing; only the other endpoint warns.
    let members = g["members"].as_array().unwrap();
    assert_eq!(members.len(), 6);
    assert_eq!(members.iter().filter(|m| m["bridge"] == true).count(), 4);
    assert!(g["warning"]
        .as_str()
        .unwrap()
        .contains("bind them to vfio-pci"));
    // Both GPUs to one VM: no warning.
    let whole = run(
        "p2p-host",
        &[
            "plan",
            "--sysfs-root",
            &root(NESTED),
            "--gpu-class",
            "0108",
            "--vm",
            "a=0000:25:00.0,0000:26:00.0",
        ],
    );
    assert_eq!(whole.code, Some(0));
    assert!(!whole.stdout.contains("warning"), "{}", whole.stdout);
}

#[test]
fn unknown_numa_is_said_to_be_unknown() {
    // gpu6 (01:00.0) sits on pcie.0, which QEMU gives no _PXM.
    let r = run(
        "p2p-host",
        &[
            "topo",
            "--sysfs-root",
            &root(TWO_SOCKET),
            "--gpu-class",
            "0108",
        ],
    );
    assert_eq!(r.code, Some(0));
    let line = r.stdout.lines().find(|l| l.contains("GPU0-GPU1 ")).unwrap();
    assert!(
        line.contains("a NUMA node unknown (-1): counted as SYS"),
        "{line}"
    );
}

#[test]
fn inject_keeps_the_capture_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config");
    std::fs::copy(
        fixture_dir(TWO_SOCKET).join(
            "sysfs/devices/pci0000:20/0000:20:00.0/0000:21:00.0/0000:22:00.0/0000:23:00.0/config",
        ),
        &cfg,
    )
    .unwrap();
    let before = std::fs::read(&cfg).unwrap();
    let c = cfg.to_str().unwrap();
    let inject = |extra: &[&str]| {
        let mut args = vec!["inject", "--config", c, "--clique", "1"];
        args.extend_from_slice(extra);
        run("p2p-host", &args)
    };
    let r = inject(&["--out", c, "--allow-non-nvidia"]);
    assert_ne!(r.code, Some(0));
    assert!(
        r.stderr.contains("is the captured config itself") && r.stderr.contains("--force"),
        "{}",
        r.stderr
    );
    assert_eq!(std::fs::read(&cfg).unwrap(), before, "nothing written");
    // An NVMe is refused with the flag that allows it named.
    let out = dir.path().join("v");
    let r = inject(&["--out", out.to_str().unwrap()]);
    assert!(r.stderr.contains("pass --allow-non-nvidia"), "{}", r.stderr);
    let r = inject(&["--out", c, "--allow-non-nvidia", "--force"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_ne!(std::fs::read(&cfg).unwrap(), before);
}

#[test]
fn probe_without_a_gpu_says_so_with_status_2() {
    let r = run(
        "p2p-guest",
        &[
            "probe",
            "--no-driver",
            "--sysfs-root",
            &root("dev-vm-firecracker"),
        ],
    );
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stdout
            .contains("No NVIDIA GPU (vendor 0x10de, display class 0x03)"),
        "{}",
        r.stdout
    );
}

#[test]
fn compare_checks_the_svg_path_before_printing() {
    let results = repo_root().join("docs/results/h200x2-2026-11-22");
    let (a, b) = (
        results.join("bench-p2p.json"),
        results.join("bench-nop2p.json"),
    );
    let r = run(
        "p2p-guest",
        &[
            "compare",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--svg",
            "/nonexistent-dir/plot.svg",
        ],
    );
    assert_ne!(r.code, Some(0));
    assert!(
        r.stdout.is_empty(),
        "printed before failing: {}",
        &r.stdout[..r.stdout.len().min(200)]
    );
    assert!(
        r.stderr
            .contains("directory /nonexistent-dir does not exist"),
        "{}",
        r.stderr
    );
}

#[test]
fn serve_binds_before_its_banner_and_removes_its_socket_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let tgz = fixture_dir("h200x2-passthrough-guest").join("sysfs.tgz");
    let rel = "sysfs/devices/pci0000:00/0000:00:06.0";
    assert!(Command::new("tar")
        .arg("xzf")
        .arg(&tgz)
        .arg("-C")
        .arg(dir.path())
        .arg(rel)
        .status()
        .unwrap()
        .success());
    let sock = dir.path().join("gpu.sock");
    let child = Command::new(binary("p2p-host"))
        .arg("serve")
        .arg("--gpu")
        .arg(format!(
            "socket={},config={}/{rel}/config,clique=2,max-bar=256M",
            sock.display(),
            dir.path().display()
        ))
        .stderr(Stdio::piped())
        .spawn_owned()
        .unwrap();
    let t0 = Instant::now();
    while !sock.exists() && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(sock.exists(), "no socket after 20 s");
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) on the child's pid, which we own and have not reaped.
    let rc = unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!sock.exists(), "the socket was left behind");
    let banner = err.find("gpu0: ").expect("banner");
    let ready = err.find("ready: 1 GPU(s)").expect("ready line");
    assert!(banner < ready, "{err}");
    assert!(
        err.contains("signal 15: stopping and removing the sockets"),
        "{err}"
    );
    assert_eq!(
        err.matches("capability at 0xc8").count(),
        1,
        "said once: {err}"
    );
}

#[test]
fn serve_says_each_error_once() {
    let r = run(
        "p2p-host",
        &[
            "serve",
            "--gpu",
            "socket=/tmp/vp2p-never.sock,config=/nonexistent/config,clique=1",
        ],
    );
    assert_ne!(r.code, Some(0));
    assert_eq!(
        r.stderr.matches("/nonexistent/config").count(),
        1,
        "{}",
        r.stderr
    );
    assert_eq!(
        r.stderr.matches("No such file or directory").count(),
        1,
        "{}",
        r.stderr
    );
}

/// What this machine's CUDA driver says, asked without vp2p: None when the
/// dynamic loader finds no `libcuda.so.1` (or `libcuda.so`), else the status
/// `cuInit(0)` returns (0: CUDA works here).
fn cuda_here() -> Option<i32> {
    for name in [c"libcuda.so.1", c"libcuda.so"] {
        // SAFETY: a NUL-terminated name; the handle is never closed, so the
        // symbol stays valid (the driver stays loaded, as in any CUDA program).
        let lib = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if lib.is_null() {
            continue;
        }
        // SAFETY: as above; the name is NUL-terminated.
        let sym = unsafe { libc::dlsym(lib, c"cuInit".as_ptr()) };
        assert!(!sym.is_null(), "{name:?} loads but has no cuInit");
        // SAFETY: cuInit is `CUresult cuInit(unsigned int Flags)` (cuda.h).
        let cu_init: extern "C" fn(u32) -> i32 = unsafe { std::mem::transmute(sym) };
        return Some(cu_init(0));
    }
    None
}

#[test]
fn probe_verify_needs_cuda_and_says_so() {
    let r = run("p2p-guest", &["probe", "--verify", "--no-driver"]);
    assert_ne!(r.code, Some(0));
    assert!(r.stderr.contains("--no-driver"), "{}", r.stderr);
    // --verify with the driver asked: what it must say follows from what the
    // loader and the driver answer this test directly. Each case asserts.
    let root = fixture_dir("qemu-11.1-vfio-user-gpus");
    let r = run(
        "p2p-guest",
        &[
            "probe",
            "--json",
            "--verify",
            "--sysfs-root",
            root.to_str().unwrap(),
        ],
    );
    match cuda_here() {
        None => {
            eprintln!("no libcuda here: --verify must refuse and name the library");
            assert_eq!(
                r.code,
                Some(1),
                "no libcuda, yet --verify did not refuse: {}",
                r.stderr
            );
            assert!(
                r.stderr.contains(
                    "--verify needs CUDA: the CUDA driver library (libcuda.so) is not installed"
                ),
                "{}",
                r.stderr
            );
            assert!(r.stdout.is_empty(), "{}", r.stdout);
        }
        Some(status) if status != 0 => {
            eprintln!("libcuda loads but cuInit returns {status}: --verify must refuse");
            assert_eq!(r.code, Some(1), "{}", r.stderr);
            assert!(
                r.stderr.contains("--verify needs CUDA: cuInit"),
                "{}",
                r.stderr
            );
        }
        Some(_) => {
            // CUDA works: --verify runs and reports the capture's six GPUs.
            // Their addresses are a QEMU guest's, so CUDA normally sees none
            // of them and no pair is verified; where they happen to be this
            // machine's, the data moved must arrive (else the exit status is 1).
            eprintln!("CUDA works here: --verify must run");
            assert_eq!(r.code, Some(0), "{}", r.stderr);
            assert!(!r.stderr.contains("needs CUDA"), "{}", r.stderr);
            let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("JSON report");
            assert_eq!(v["cuda"]["available"], true, "{}", r.stdout);
            assert_eq!(v["gpus"].as_array().map(Vec::len), Some(6));
        }
    }
}
