//! The bench's sysfs tree: a two-socket HGX-like layout built from copies of
//! real captured function directories, and the classes it must scan to.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use p2p_report::TopoReport;
use p2p_topology::PathClass;

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

pub(crate) struct Sources {
    pub(crate) qemu: PathBuf,
    pub(crate) h200: PathBuf,
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

pub(crate) struct Builder {
    root: PathBuf,
    src: Sources,
    next_group: u32,
    next_bus: u32,
    places: Vec<Place>,
    pub(crate) functions: usize,
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
            // An RDMA NIC of an HGX node (ConnectX): a netdev and an RDMA
            // device, which makes it a NIC row as in nvidia-smi.
            let ifname = format!("ens{}np0", self.nic_ifaces);
            let rdma = format!("mlx5_{}", self.nic_ifaces);
            self.nic_ifaces += 1;
            fs::create_dir_all(dir.join("net").join(ifname)).unwrap();
            fs::create_dir_all(dir.join("infiniband").join(rdma)).unwrap();
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
pub(crate) fn build(root: &Path, src: Sources) -> Builder {
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
pub(crate) fn check_classes(
    report: &TopoReport,
    b: &Builder,
    functions: usize,
) -> Result<String, String> {
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
