//! How fast `p2p-host topo` answers on a big host: a sysfs tree of 500+ PCI
//! functions laid out like a 2-socket HGX server, built from real captured
//! function directories. Target: under 50 ms.
//!
//!     cargo bench -p p2p-host --bench topo_scale
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

use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use p2p_host::sysfs::{self, SysfsRoot};
use p2p_shared::report::TopoReport;
use p2p_shared::{GpuSelector, PathClass};

const TARGET: Duration = Duration::from_millis(50);
const WARMUP: usize = 5;
const BIN_RUNS: usize = 20;
const CPUS: [&str; 2] = ["0-55,112-167", "56-111,168-223"];

/// The real function directories the tree is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A host-bridge-class function (8086:0d57 of the H200 machine).
    HostFn,
    RootPort,
    SwitchUp,
    SwitchDown,
    Gpu,
    Nic,
    Nvme,
    Isa,
    Sata,
    Smbus,
}

impl Kind {
    fn is_bridge(self) -> bool {
        matches!(self, Kind::RootPort | Kind::SwitchUp | Kind::SwitchDown)
    }

    fn driver(self) -> Option<&'static str> {
        Some(match self {
            Kind::RootPort | Kind::SwitchUp | Kind::SwitchDown => "pcieport",
            Kind::Gpu => "vfio-pci",
            Kind::Nic => "e1000e",
            Kind::Nvme => "nvme",
            Kind::Sata => "ahci",
            Kind::Smbus => "i801_smbus",
            Kind::HostFn | Kind::Isa => return None,
        })
    }
}

struct Sources {
    qemu: PathBuf,
    h200: PathBuf,
}

impl Sources {
    fn dir(&self, kind: Kind) -> PathBuf {
        let q = |p: &str| self.qemu.join("devices").join(p);
        let h = |p: &str| self.h200.join("devices").join(p);
        match kind {
            Kind::HostFn => h("pci0000:00/0000:00:00.0"),
            Kind::Gpu => h("pci0000:00/0000:00:06.0"),
            Kind::RootPort => q("pci0000:20/0000:20:00.0"),
            Kind::SwitchUp => q("pci0000:20/0000:20:00.0/0000:21:00.0"),
            Kind::SwitchDown => q("pci0000:20/0000:20:00.0/0000:21:00.0/0000:22:00.0"),
            Kind::Nvme => q("pci0000:20/0000:20:00.0/0000:21:00.0/0000:22:00.0/0000:23:00.0"),
            Kind::Nic => q("pci0000:20/0000:20:00.0/0000:21:00.0/0000:22:02.0/0000:25:00.0"),
            Kind::Isa => q("pci0000:00/0000:00:1f.0"),
            Kind::Sata => q("pci0000:00/0000:00:1f.2"),
            Kind::Smbus => q("pci0000:00/0000:00:1f.3"),
        }
    }
}

/// Where an endpoint sits, for the expected classes.
#[derive(Clone, Debug)]
struct Place {
    bdf: String,
    kind: Kind,
    node: u32,
    host_bridge: String,
    root_port: Option<String>,
    /// The switch (its upstream port) or root port right above the function.
    near: Option<String>,
}

/// A directory in the tree being built: its path below the root, its address,
/// and where it sits.
#[derive(Clone)]
struct Node {
    rel: PathBuf,
    node: u32,
    host_bridge: String,
    root_port: Option<String>,
    near: Option<String>,
}

struct Builder {
    root: PathBuf,
    src: Sources,
    next_group: u32,
    next_bus: u32,
    places: Vec<Place>,
    functions: usize,
    nic_ifaces: usize,
}

fn bdf(bus: u32, dev: u32, func: u32) -> String {
    format!("0000:{bus:02x}:{dev:02x}.{func:x}")
}

/// `../` as often as `rel` has components: from a function directory to the root.
fn up(rel: &Path) -> String {
    "../".repeat(rel.components().count())
}

impl Builder {
    fn new(root: &Path, src: Sources) -> Self {
        for d in ["bus/pci/devices", "bus/pci/drivers", "kernel/iommu_groups"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        for (i, cpus) in CPUS.iter().enumerate() {
            let d = root.join(format!("devices/system/node/node{i}"));
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("cpulist"), format!("{cpus}\n")).unwrap();
        }
        fs::write(root.join("devices/system/node/online"), "0-1\n").unwrap();
        Self {
            root: root.to_path_buf(),
            src,
            next_group: 0,
            next_bus: 0,
            places: Vec::new(),
            functions: 0,
            nic_ifaces: 0,
        }
    }

    /// `pci0000:BB` on NUMA node `node`, with the four device-0 functions every
    /// root bus of a Xeon has. Buses below it are numbered from BB + 1.
    fn host_bridge(&mut self, bus: u32, node: u32) -> Node {
        let name = format!("pci0000:{bus:02x}");
        fs::create_dir_all(self.root.join("devices").join(&name)).unwrap();
        self.next_bus = bus + 1;
        let hb = Node {
            rel: Path::new("devices").join(&name),
            node,
            host_bridge: name,
            root_port: None,
            near: None,
        };
        for f in [0, 1, 2, 4] {
            self.function(&hb, bus, 0, f, Kind::HostFn);
        }
        hb
    }

    /// Copies the real directory of `kind` to `parent/BDF` and links it in.
    fn function(&mut self, parent: &Node, bus: u32, dev: u32, func: u32, kind: Kind) -> Node {
        let addr = bdf(bus, dev, func);
        let rel = parent.rel.join(&addr);
        let dir = self.root.join(&rel);
        fs::create_dir_all(&dir).unwrap();
        for e in fs::read_dir(self.src.dir(kind)).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_file() {
                fs::copy(e.path(), dir.join(e.file_name())).unwrap();
            }
        }
        fs::write(dir.join("numa_node"), format!("{}\n", parent.node)).unwrap();
        fs::write(
            dir.join("local_cpulist"),
            format!("{}\n", CPUS[parent.node as usize]),
        )
        .unwrap();
        let back = up(&rel);
        symlink(
            format!("../../../{}", rel.display()),
            self.root.join("bus/pci/devices").join(&addr),
        )
        .unwrap();
        let group = self.next_group;
        self.next_group += 1;
        let gdir = self
            .root
            .join(format!("kernel/iommu_groups/{group}/devices"));
        fs::create_dir_all(&gdir).unwrap();
        symlink(format!("../../../../{}", rel.display()), gdir.join(&addr)).unwrap();
        symlink(
            format!("{back}kernel/iommu_groups/{group}"),
            dir.join("iommu_group"),
        )
        .unwrap();
        if let Some(drv) = kind.driver() {
            symlink(format!("{back}bus/pci/drivers/{drv}"), dir.join("driver")).unwrap();
        }
        if kind == Kind::Nic {
            let ifname = format!("ens{}np0", self.nic_ifaces);
            self.nic_ifaces += 1;
            fs::create_dir_all(dir.join("net").join(ifname)).unwrap();
        }
        self.functions += 1;
        let here = Node {
            rel,
            node: parent.node,
            host_bridge: parent.host_bridge.clone(),
            root_port: if kind == Kind::RootPort {
                Some(addr.clone())
            } else {
                parent.root_port.clone()
            },
            near: match kind {
                Kind::RootPort | Kind::SwitchUp => Some(addr.clone()),
                _ => parent.near.clone(),
            },
        };
        if !kind.is_bridge() && kind != Kind::HostFn {
            self.places.push(Place {
                bdf: addr,
                kind,
                node: here.node,
                host_bridge: here.host_bridge.clone(),
                root_port: here.root_port.clone(),
                near: parent.near.clone(),
            });
        }
        here
    }

    /// A bridge at `bus:dev.func` whose children `fill` adds on its secondary bus.
    fn bridge(
        &mut self,
        parent: &Node,
        bus: u32,
        dev: u32,
        kind: Kind,
        fill: impl FnOnce(&mut Self, &Node, u32),
    ) {
        let node = self.function(parent, bus, dev, 0, kind);
        let secondary = self.next_bus;
        self.next_bus += 1;
        fill(self, &node, secondary);
        let subordinate = self.next_bus - 1;
        let cfg = self.root.join(&node.rel).join("config");
        let mut bytes = fs::read(&cfg).unwrap();
        bytes[0x18] = bus as u8;
        bytes[0x19] = secondary as u8;
        bytes[0x1a] = subordinate as u8;
        fs::write(&cfg, bytes).unwrap();
    }

    /// A switch below `parent`'s secondary bus: its upstream port at device 0 and
    /// one downstream port per entry of `ports`, each filled by its closure.
    fn switch(&mut self, parent: &Node, bus: u32, ports: Vec<Fill>) {
        self.bridge(parent, bus, 0, Kind::SwitchUp, move |b, up, sec| {
            for (d, fill) in ports.into_iter().enumerate() {
                b.bridge(up, sec, d as u32, Kind::SwitchDown, fill);
            }
        });
    }
}

type Fill = Box<dyn FnOnce(&mut Builder, &Node, u32)>;

fn endpoint(kind: Kind) -> Fill {
    Box::new(move |b, n, bus| {
        b.function(n, bus, 0, 0, kind);
    })
}

fn empty() -> Fill {
    Box::new(|_, _, _| {})
}

/// A second-level switch with four downstream ports holding these endpoints.
fn l2_switch(kinds: [Kind; 4]) -> Fill {
    Box::new(move |b, n, bus| {
        b.switch(n, bus, kinds.into_iter().map(endpoint).collect());
    })
}

/// Root buses of one socket: GPU host bridges A and B, two storage host
/// bridges, two uncore buses (spaced so that no bus number repeats).
struct Buses {
    a: u32,
    b: u32,
    storage: [u32; 2],
    uncore: [u32; 2],
}

fn socket(b: &mut Builder, node: u32, buses: Buses) {
    use Kind::*;
    // Host bridge A: two GPUs and their NICs under one second-level switch.
    let hb = b.host_bridge(buses.a, node);
    b.bridge(&hb, buses.a, 1, RootPort, |b, rp, bus| {
        b.switch(
            rp,
            bus,
            vec![
                l2_switch([Gpu, Gpu, Nic, Nic]),
                l2_switch([Nvme; 4]),
                empty(),
                empty(),
            ],
        )
    });
    // Host bridge B: two GPUs under different second-level switches of one
    // first-level switch, and a dual-port NIC on a second root port.
    let hb = b.host_bridge(buses.b, node);
    b.bridge(&hb, buses.b, 1, RootPort, |b, rp, bus| {
        b.switch(
            rp,
            bus,
            vec![
                l2_switch([Gpu, Nic, Nvme, Nvme]),
                l2_switch([Gpu, Nic, Nvme, Nvme]),
                empty(),
                empty(),
            ],
        )
    });
    b.bridge(&hb, buses.b, 2, RootPort, |b, rp, bus| {
        b.function(rp, bus, 0, 0, Nic);
        b.function(rp, bus, 0, 1, Nic);
    });
    // Two storage host bridges, an NVMe drive on each of four root ports.
    for bus in buses.storage {
        let hb = b.host_bridge(bus, node);
        for dev in 1..=4 {
            b.bridge(&hb, bus, dev, RootPort, |b, rp, sec| {
                b.function(rp, sec, 0, 0, Nvme);
            });
        }
    }
    // Two uncore buses: many functions straight on the host bridge.
    for bus in buses.uncore {
        let hb = b.host_bridge(bus, node);
        for dev in 1..=24 {
            for f in 0..4 {
                b.function(&hb, bus, dev, f, if f == 3 { Smbus } else { HostFn });
            }
        }
    }
}

/// Lays the whole host out below `root` (the tree's `sysfs` directory).
fn build(root: &Path, src: Sources) -> Builder {
    let mut b = Builder::new(root, src);
    // Socket 0's legacy bus: chipset functions and the on-board NIC.
    let hb = b.host_bridge(0x00, 0);
    b.function(&hb, 0, 0x1f, 0, Kind::Isa);
    b.function(&hb, 0, 0x1f, 2, Kind::Sata);
    b.function(&hb, 0, 0x1f, 3, Kind::Smbus);
    b.bridge(&hb, 0x00, 0x1c, Kind::RootPort, |b, rp, bus| {
        b.function(rp, bus, 0, 0, Kind::Nic);
    });
    let buses = |a: u32| Buses {
        a,
        b: a + 0x20,
        storage: [a + 0x40, a + 0x50],
        uncore: [a + 0x6e, a + 0x6f],
    };
    socket(&mut b, 0, buses(0x10));
    socket(&mut b, 1, buses(0x90));
    b
}

/// The class the design gives two endpoints of the tree.
fn expected(a: &Place, b: &Place) -> PathClass {
    if a.bdf == b.bdf {
        PathClass::X
    } else if a.near.is_some() && a.near == b.near {
        PathClass::Pix
    } else if a.root_port.is_some() && a.root_port == b.root_port {
        PathClass::Pxb
    } else if a.host_bridge == b.host_bridge {
        PathClass::Phb
    } else if a.node == b.node {
        PathClass::Node
    } else {
        PathClass::Sys
    }
}

/// Checks the real binary's report on the tree against the layout.
fn check_classes(report: &TopoReport, b: &Builder, functions: usize) -> Result<String, String> {
    let place = |bdf: &str| {
        b.places
            .iter()
            .find(|p| p.bdf == bdf)
            .ok_or_else(|| format!("{bdf} is in the report but not in the tree"))
    };
    let want_gpus = b.places.iter().filter(|p| p.kind == Kind::Gpu).count();
    let want_nics = b.places.iter().filter(|p| p.kind == Kind::Nic).count();
    if report.gpus.len() != want_gpus || report.nics.len() != want_nics {
        return Err(format!(
            "report has {} GPUs and {} NICs, the tree {want_gpus} and {want_nics}",
            report.gpus.len(),
            report.nics.len()
        ));
    }
    let members: Vec<&Place> = report
        .gpus
        .iter()
        .chain(&report.nics)
        .map(|d| place(&d.bdf.to_string()))
        .collect::<Result<_, _>>()?;
    let mut counts = [0usize; 6];
    for (i, a) in members.iter().enumerate() {
        for (j, b) in members.iter().enumerate() {
            let (want, got) = (expected(a, b), report.matrix.cells[i][j]);
            if want != got {
                return Err(format!(
                    "{} {}: {got}, the layout says {want}",
                    a.bdf, b.bdf
                ));
            }
            if i < j && i < want_gpus && j < want_gpus {
                let k = [
                    PathClass::Pix,
                    PathClass::Pxb,
                    PathClass::Phb,
                    PathClass::Node,
                    PathClass::Sys,
                ]
                .iter()
                .position(|c| *c == got)
                .unwrap_or(5);
                counts[k] += 1;
            }
        }
    }
    if counts[0] == 0 || counts[1] == 0 || counts[3] == 0 || counts[4] == 0 {
        return Err(format!(
            "GPU pairs PIX/PXB/PHB/NODE/SYS = {counts:?}: a class is missing"
        ));
    }
    let bridges = report.bridges.len();
    Ok(format!(
        "{functions} functions, {want_gpus} GPUs, {want_nics} NICs, {} host bridges, {} NUMA nodes; \
         GPU pairs PIX {} PXB {} PHB {} NODE {} SYS {}; {bridges} bridges on their paths: as laid out",
        report.host_bridges.len(),
        report.numa_nodes.len(),
        counts[0],
        counts[1],
        counts[2],
        counts[3],
        counts[4]
    ))
}

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
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
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
    if scratch.keep {
        let _ = writeln!(out, "tree kept: {}", tree.display());
    }
    print!("{out}");
}
