//! How fast `p2p-host topo` answers on a big host: a sysfs tree of 500+ PCI
//! functions laid out like a 2-socket HGX server, built from real captured
//! function directories. Target: under 50 ms.
//!
//!     cargo bench -p p2p-host-cli --bench topo_scale
//!
//! `cargo bench` builds the `p2p-host` binary with the bench (release) profile
//! and hands its path to this program (CARGO_BIN_EXE_p2p-host), so the end-to-end
//! figure is the real optimised binary. Environment:
//!   VP2P_BENCH_TREE=DIR  build the tree in DIR/sysfs and keep it (for strace,
//!                        perf, or `p2p-host topo --sysfs-root DIR`); default a
//!                        temporary directory, removed at the end
//!   VP2P_BENCH_RUNS=N    timed library runs (default 50; the binary gets 20)
//!
//! The tree. Every function directory is a copy of a real one (its config,
//! vendor, device, class, link and resource files): the H200 GPU and the host
//! bridge of the 2x H200 machine (tests/fixtures/h200x2-passthrough-guest), and
//! the root port, switch ports, NVMe, e1000e NIC, ISA, SATA and SMBus functions
//! that QEMU 11.1 built (tests/fixtures/qemu-11.1-two-socket-iommu-on). What is
//! rewritten: bus/device numbers (directory names, `bus/pci/devices` links,
//! IOMMU groups), `numa_node`, `local_cpulist`, and the bridges' primary,
//! secondary and subordinate bus registers so that config space agrees with
//! the tree. Layout, per socket (NUMA node 0 and 1):
//!
//!   host bridge A: root port -> switch L1 -> dn0 -> switch L2 -> GPU, GPU, NIC, NIC
//!                                         -> dn1 -> switch L2 -> 4 NVMe
//!                                         -> dn2, dn3 (empty slots)
//!   host bridge B: root port -> switch L1 -> dn0 -> switch L2 -> GPU, NIC, NVMe, NVMe
//!                                         -> dn1 -> switch L2 -> GPU, NIC, NVMe, NVMe
//!                                         -> dn2, dn3 (empty slots)
//!                  root port -> dual-port NIC (2 functions)
//!   two storage host bridges: 4 root ports -> NVMe each
//!   two uncore host bridges: 24 devices x 4 functions each
//!   every host bridge bus: 4 functions at device 0 (VT-d, mesh, RAS, IEH)
//!
//! plus, on socket 0, pci0000:00 with the chipset functions (host bridge, ISA,
//! SATA, SMBus) and a root port with the on-board NIC. So GPU pairs are PIX
//! (host bridge A), PXB (host bridge B), NODE (A vs B) and SYS (across sockets);
//! the bench checks that the real binary classifies them so before timing.

mod tree;

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use p2p_host::sysfs::{self, SysfsRoot};
use p2p_report::TopoReport;
use p2p_topology::GpuSelector;

use tree::{build, check_classes, Sources};

const TARGET: Duration = Duration::from_millis(50);
const WARMUP: usize = 5;
const BIN_RUNS: usize = 20;

struct Stats {
    median: Duration,
    min: Duration,
    max: Duration,
}

fn stats(mut v: Vec<Duration>) -> Stats {
    v.sort();
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2
    };
    Stats {
        median,
        min: v[0],
        max: v[n - 1],
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// The library path the `topo` subcommand takes: scan, report, text.
fn library_once(root: &Path) -> (Duration, Duration, Duration, usize) {
    let t0 = Instant::now();
    let sroot = SysfsRoot::new(root).expect("a sysfs tree");
    let topo = sysfs::scan(&sroot).expect("the tree scans");
    let t1 = Instant::now();
    let report = TopoReport::build(
        &topo,
        &GpuSelector::Nvidia,
        &sroot.path().display().to_string(),
    );
    let t2 = Instant::now();
    let text = report.render_text();
    let t3 = Instant::now();
    std::hint::black_box(&text);
    (t1 - t0, t2 - t1, t3 - t2, topo.functions.len())
}

struct LibFigures {
    total: Stats,
    scan: Stats,
    build: Stats,
    render: Stats,
    runs: usize,
    functions: usize,
}

fn time_library(root: &Path, runs: usize) -> LibFigures {
    for _ in 0..WARMUP {
        library_once(root);
    }
    let (mut total, mut scan, mut build, mut render) = (vec![], vec![], vec![], vec![]);
    let mut functions = 0;
    for _ in 0..runs {
        let (s, b, r, n) = library_once(root);
        total.push(s + b + r);
        scan.push(s);
        build.push(b);
        render.push(r);
        functions = n;
    }
    LibFigures {
        total: stats(total),
        scan: stats(scan),
        build: stats(build),
        render: stats(render),
        runs,
        functions,
    }
}

fn binary_once(bin: &Path, root: &Path) -> (Duration, Vec<u8>) {
    let t0 = Instant::now();
    let out = Command::new(bin)
        .args(["topo", "--json", "--sysfs-root"])
        .arg(root)
        .stdin(Stdio::null())
        .output()
        .expect("p2p-host runs");
    let t = t0.elapsed();
    assert!(
        out.status.success(),
        "p2p-host topo --sysfs-root {} failed: {}",
        root.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    (t, out.stdout)
}

fn time_binary(bin: &Path, root: &Path) -> Stats {
    for _ in 0..WARMUP {
        binary_once(bin, root);
    }
    stats((0..BIN_RUNS).map(|_| binary_once(bin, root).0).collect())
}

/// A directory removed when dropped, unless the user asked to keep it.
struct Scratch {
    path: PathBuf,
    keep: bool,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.keep {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

fn main() {
    // host/cli -> the repository.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_p2p-host"));
    let runs: usize = std::env::var("VP2P_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let scratch = match std::env::var_os("VP2P_BENCH_TREE") {
        Some(d) => Scratch {
            path: PathBuf::from(d),
            keep: true,
        },
        None => Scratch {
            path: std::env::temp_dir().join(format!("vp2p-topo-scale-{}", std::process::id())),
            keep: false,
        },
    };
    // Only what this program writes there is cleared: DIR/sysfs and DIR/h200x2.
    for sub in ["sysfs", "h200x2"] {
        let _ = fs::remove_dir_all(scratch.path.join(sub));
    }
    fs::create_dir_all(&scratch.path).unwrap();

    // The real function directories: the H200 machine's tree is packed.
    let h200 = scratch.path.join("h200x2");
    fs::create_dir_all(&h200).unwrap();
    let tgz = repo.join("tests/fixtures/h200x2-passthrough-guest/sysfs.tgz");
    let ok = Command::new("tar")
        .arg("xzf")
        .arg(&tgz)
        .arg("-C")
        .arg(&h200)
        .status()
        .expect("tar runs")
        .success();
    assert!(ok, "tar xzf {} failed", tgz.display());
    let src = Sources {
        qemu: repo.join("tests/fixtures/qemu-11.1-two-socket-iommu-on/sysfs"),
        h200: h200.join("sysfs"),
    };

    let tree = scratch.path.join("sysfs");
    let t0 = Instant::now();
    let b = build(&tree, src);
    let built = t0.elapsed();
    fs::remove_dir_all(&h200).unwrap();
    assert!(b.functions >= 500, "only {} functions", b.functions);

    // The tree must scan to exactly what was laid out, and the real binary
    // must classify it as designed, before any figure means anything.
    let lib = time_library(&tree, runs);
    assert_eq!(
        lib.functions, b.functions,
        "scan found a different number of functions"
    );
    let (_, json) = binary_once(&bin, &tree);
    let report: TopoReport = serde_json::from_slice(&json).expect("topo --json parses");
    let check = check_classes(&report, &b, b.functions)
        .unwrap_or_else(|e| panic!("the bench tree is wrong: {e}"));
    let exe = time_binary(&bin, &tree);

    // The live /sys of this machine, for comparison.
    let live = Path::new("/sys");
    let live_figures = live.join("bus/pci/devices").is_dir().then(|| {
        let lib = time_library(live, runs);
        let exe = time_binary(&bin, live);
        (lib, exe)
    });

    let mut out = String::new();
    let _ = writeln!(
        out,
        "\ntopo_scale: 2-socket HGX-like sysfs tree of {} PCI functions from captured function \
         directories (built in {})",
        b.functions,
        ms(built)
    );
    let _ = writeln!(out, "check: {check}");
    let _ = writeln!(
        out,
        "machine: {} CPU(s), {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| c
                .lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string()))
            .unwrap_or_else(|| "unknown CPU".into())
    );
    let _ = writeln!(out, "target: under 50 ms\n");
    let _ = writeln!(
        out,
        "{:<52} {:>9} {:>5} {:>10} {:>10} {:>10}",
        "what", "functions", "runs", "median", "min", "max"
    );
    let mut rows: Vec<(String, usize, usize, &Stats)> = vec![
        (
            "library: scan + TopoReport::build + render_text".into(),
            lib.functions,
            lib.runs,
            &lib.total,
        ),
        (
            "  of which sysfs::scan".into(),
            lib.functions,
            lib.runs,
            &lib.scan,
        ),
        (
            "  of which TopoReport::build".into(),
            lib.functions,
            lib.runs,
            &lib.build,
        ),
        (
            "  of which render_text".into(),
            lib.functions,
            lib.runs,
            &lib.render,
        ),
        (
            "binary: p2p-host topo --json (spawn, wait)".into(),
            lib.functions,
            BIN_RUNS,
            &exe,
        ),
    ];
    if let Some((l, e)) = &live_figures {
        rows.push(("live /sys, library".into(), l.functions, l.runs, &l.total));
        rows.push((
            "live /sys, binary topo --json".into(),
            l.functions,
            BIN_RUNS,
            e,
        ));
    }
    for (what, n, runs, s) in rows {
        let _ = writeln!(
            out,
            "{what:<52} {n:>9} {runs:>5} {:>10} {:>10} {:>10}",
            ms(s.median),
            ms(s.min),
            ms(s.max)
        );
    }
    let verdict = |s: &Stats| if s.median < TARGET { "under" } else { "OVER" };
    let _ = writeln!(
        out,
        "\nlibrary median {} and binary median {}: {} / {} the 50 ms target",
        ms(lib.total.median),
        ms(exe.median),
        verdict(&lib.total),
        verdict(&exe)
    );
    // The picture of the same tree (`topo --svg`): its size, against the
    // 1 MB a picture of a large tree stays under.
    let root = SysfsRoot::new(&tree).unwrap();
    let topo = sysfs::scan(&root).unwrap();
    let t0 = Instant::now();
    let picture = p2p_report::picture::topo_svg(&topo, &report, "topo_scale tree");
    let drew = t0.elapsed();
    let _ = writeln!(
        out,
        "picture (topo --svg): {} bytes for {} GPUs and {} NICs of {} functions, laid out in {}: {} 1 MB",
        picture.len(),
        report.gpus.len(),
        report.nics.len(),
        b.functions,
        ms(drew),
        if picture.len() < 1 << 20 { "under" } else { "OVER" }
    );
    if scratch.keep {
        let _ = fs::write(scratch.path.join("topo.svg"), &picture);
        let _ = writeln!(
            out,
            "tree kept: {} (picture: topo.svg beside it)",
            tree.display()
        );
    }
    print!("{out}");
}
