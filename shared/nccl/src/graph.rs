//! NCCL's node graph of a system and the paths between its nodes, built as
//! NCCL 2.28 builds them (`src/graph/topo.cc` for nodes, links and their
//! bandwidths in GB/s; `ncclTopoSetPaths` in `src/graph/paths.cc` for the
//! breadth-first search and the path types).

use super::path::PathType;
use super::xml::{TopoXml, XmlCpu, XmlPci};
use p2p_topology::bdf::Bdf;

/// NCCL's "local" bandwidth (`LOC_BW`), GB/s.
pub const LOC_BW: f64 = 5000.0;
/// NVLink bandwidth per link for SM 9.x (`SM90_NVLINK_BW`), GB/s.
const SM90_NVLINK_BW: f64 = 20.6;

/// A node's kind (NCCL's `GPU`, `PCI`, `NVS`, `CPU`, `NIC`, `NET`).
#[derive(Debug, Clone, PartialEq)]
pub enum NodeKind {
    /// A GPU of the communicator.
    Gpu {
        /// Its bus id.
        busid: Bdf,
        /// Compute capability x 10.
        sm: u32,
        /// GPUDirect RDMA support.
        gdr: bool,
    },
    /// A PCIe switch (its upstream port) or other bridge.
    Pci {
        /// Its bus id.
        busid: Bdf,
    },
    /// The NVSwitch fabric.
    Nvs,
    /// A CPU (NUMA node).
    Cpu {
        /// `numaid`.
        numaid: i32,
    },
    /// A NIC (one per PCI device, ports merged).
    Nic {
        /// Its bus id; None for a NIC NCCL hangs directly below the CPU.
        busid: Option<Bdf>,
    },
    /// A network port the net plugin lists.
    Net {
        /// `mlx5_0`, `eth0`.
        name: String,
        /// Bandwidth, GB/s (`speed` / 8000).
        bw: f64,
        /// GPUDirect RDMA support reported by the plugin.
        gdr: bool,
    },
}

/// A directed link.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    /// Index of the node at the other end.
    pub to: usize,
    /// Link type on NCCL's path scale: LOC, NVL, C2C, PIX (a PCI link), SYS, NET.
    pub ty: PathType,
    /// GB/s.
    pub bw: f64,
}

/// A node and its links.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// What it is.
    pub kind: NodeKind,
    /// Its outgoing links.
    pub links: Vec<Link>,
}

/// The path from one node to a base node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Path {
    /// NCCL's classification.
    pub ty: PathType,
    /// The narrowest link on the way, GB/s.
    pub bw: f64,
    /// Hops.
    pub hops: usize,
    /// The next node on the way to the base (None at the base or when unreachable).
    pub next: Option<usize>,
}

impl Path {
    const NONE: Path = Path {
        ty: PathType::Dis,
        bw: 0.0,
        hops: 0,
        next: None,
    };
}

/// The x86 identity of the system's first CPU, which NCCL's rules consult
/// (`ncclTopoCpuType`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CpuType {
    /// `x86_64`, ...
    pub arch: Option<String>,
    /// `GenuineIntel`, `AuthenticAMD`, ...
    pub vendor: Option<String>,
    /// Family.
    pub familyid: Option<u32>,
    /// Model.
    pub modelid: Option<u32>,
}

impl CpuType {
    /// x86 with an AMD vendor string.
    pub fn is_amd_x86(&self) -> bool {
        self.arch.as_deref() == Some("x86_64") && self.vendor.as_deref() == Some("AuthenticAMD")
    }
}

/// NCCL's graph of one system.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Graph {
    /// Every node.
    pub nodes: Vec<Node>,
    /// The first CPU's identity.
    pub cpu: CpuType,
}

/// Per-lane speed in units of 100 Mb/s (`kvDictPciGen`), 60 when unknown.
fn lane_speed(s: Option<&str>) -> f64 {
    match s.unwrap_or("") {
        "2.5 GT/s" | "2.5 GT/s PCIe" => 15.0,
        "5 GT/s" | "5.0 GT/s PCIe" => 30.0,
        "8 GT/s" | "8.0 GT/s PCIe" => 60.0,
        "16 GT/s" | "16.0 GT/s PCIe" => 120.0,
        "32 GT/s" | "32.0 GT/s PCIe" => 240.0,
        "64.0 GT/s PCIe" => 480.0,
        _ => 60.0,
    }
}

/// A PCI link's bandwidth as NCCL computes it: width (0 or absent: 16) x
/// per-lane speed / 80, GB/s.
pub fn pci_bw(speed: Option<&str>, width: Option<u32>) -> f64 {
    let w = match width {
        None | Some(0) => 16,
        Some(w) => w,
    };
    f64::from(w) * lane_speed(speed) / 80.0
}

/// Bandwidth between two CPUs (`ncclTopoGetInterCpuBw`), GB/s.
fn inter_cpu_bw(c: &XmlCpu) -> f64 {
    let x86 = c.arch.as_deref() == Some("x86_64");
    match (c.arch.as_deref(), c.vendor.as_deref()) {
        (Some("ppc64"), _) => 32.0,
        (Some("arm64"), _) => 6.0,
        (_, Some("GenuineIntel")) if x86 => {
            let (f, m) = (c.familyid.unwrap_or(0), c.modelid.unwrap_or(0));
            if f == 6 && m >= 0xCF {
                40.0
            } else if f == 6 && m >= 0x8F {
                22.0
            } else if f == 6 && m >= 0x55 {
                10.0
            } else {
                6.0
            }
        }
        (_, Some("AuthenticAMD")) if x86 => 16.0,
        (_, Some("CentaurHauls" | "  Shanghai  ")) if x86 => {
            if c.familyid == Some(7) && c.modelid == Some(0x5B) {
                9.0
            } else {
                6.0
            }
        }
        _ => LOC_BW,
    }
}

impl Graph {
    fn add(&mut self, kind: NodeKind) -> usize {
        self.nodes.push(Node {
            kind,
            links: Vec::new(),
        });
        self.nodes.len() - 1
    }

    fn connect(&mut self, a: usize, b: usize, ty: PathType, bw: f64) {
        // NCCL adds the bandwidth of a second link of the same type.
        if let Some(l) = self.nodes[a]
            .links
            .iter_mut()
            .find(|l| l.to == b && l.ty == ty)
        {
            l.bw += bw;
        } else {
            self.nodes[a].links.push(Link { to: b, ty, bw });
        }
    }

    fn both(&mut self, a: usize, b: usize, ty: PathType, bw: f64) {
        self.connect(a, b, ty, bw);
        self.connect(b, a, ty, bw);
    }

    /// Index of the GPU at `busid`.
    pub fn gpu(&self, busid: Bdf) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| matches!(n.kind, NodeKind::Gpu { busid: b, .. } if b == busid))
    }

    /// Indices of the GPUs, in the order they were added.
    pub fn gpus(&self) -> Vec<usize> {
        self.of(|k| matches!(k, NodeKind::Gpu { .. }))
    }

    /// Indices of the nets.
    pub fn nets(&self) -> Vec<usize> {
        self.of(|k| matches!(k, NodeKind::Net { .. }))
    }

    /// Indices of the CPUs.
    pub fn cpus(&self) -> Vec<usize> {
        self.of(|k| matches!(k, NodeKind::Cpu { .. }))
    }

    fn of(&self, f: impl Fn(&NodeKind) -> bool) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| f(&self.nodes[i].kind))
            .collect()
    }

    /// A short name for a node: its bus id, `cpu N`, `nvswitch`, a net's name.
    pub fn label(&self, i: usize) -> String {
        match &self.nodes[i].kind {
            NodeKind::Gpu { busid, .. } | NodeKind::Pci { busid } => busid.to_string(),
            NodeKind::Nvs => "nvswitch".into(),
            NodeKind::Cpu { numaid } => format!("cpu {numaid}"),
            NodeKind::Nic { busid } => busid.map_or("nic".into(), |b| b.to_string()),
            NodeKind::Net { name, .. } => name.clone(),
        }
    }

    fn add_pci(&mut self, p: &XmlPci, parent: usize) {
        let node = if let Some(g) = &p.gpu {
            Some(self.add(NodeKind::Gpu {
                busid: p.busid,
                sm: g.sm.unwrap_or(90),
                gdr: g.gdr.unwrap_or(true),
            }))
        } else if !p.nets.is_empty() {
            // Ports of one device are merged into one NIC (function ignored).
            let key = Bdf {
                function: 0,
                ..p.busid
            };
            let existing = self.of(|k| matches!(k, NodeKind::Nic { busid: Some(b) } if *b == key));
            let (nic, new) = match existing.first() {
                Some(&n) => (n, false),
                None => (self.add(NodeKind::Nic { busid: Some(key) }), true),
            };
            self.add_nets(nic, p);
            new.then_some(nic)
        } else if matches!(p.class, 0x060400 | 0x080100)
            || !matches!(p.class >> 16, 0x02 | 0x03) && !matches!(p.class, 0x068000 | 0x068001)
        {
            let n = self.add(NodeKind::Pci { busid: p.busid });
            for c in &p.children {
                self.add_pci(c, n);
            }
            Some(n)
        } else {
            // A GPU NCCL did not fill (not the communicator's), a NIC class
            // without a <nic>: no node.
            None
        };
        if let Some(n) = node {
            let bw = pci_bw(p.link_speed.as_deref(), p.link_width);
            self.both(n, parent, PathType::Pix, bw);
        }
    }

    fn add_nets(&mut self, nic: usize, p: &XmlPci) {
        for n in &p.nets {
            self.add_net(nic, n);
        }
    }

    fn add_net(&mut self, nic: usize, n: &super::xml::XmlNet) {
        let bw = n.speed_mbps.unwrap_or(0) as f64 / 8000.0;
        let net = self.add(NodeKind::Net {
            name: n.name.clone(),
            bw,
            gdr: n.gdr.unwrap_or(false),
        });
        self.both(nic, net, PathType::Net, bw);
    }

    /// NCCL's graph of `xml` (a filled system, [`super::fill::effective`]).
    pub fn build(xml: &TopoXml) -> Graph {
        let mut g = Graph::default();
        if let Some(c) = xml.cpus.first() {
            g.cpu = CpuType {
                arch: c.arch.clone(),
                vendor: c.vendor.clone(),
                familyid: c.familyid,
                modelid: c.modelid,
            };
        }
        let mut cpu_nodes = Vec::new();
        for c in &xml.cpus {
            let cpu = g.add(NodeKind::Cpu { numaid: c.numaid });
            cpu_nodes.push(cpu);
            for p in &c.pci {
                g.add_pci(p, cpu);
            }
            if !c.nets.is_empty() {
                let nic = g.add(NodeKind::Nic { busid: None });
                g.both(cpu, nic, PathType::Pix, LOC_BW);
                for n in &c.nets {
                    g.add_net(nic, n);
                }
            }
        }
        // NVLinks, second pass: every GPU node exists now.
        let mut nvs = None;
        let listed: Vec<(Bdf, &super::xml::XmlGpu)> = xml
            .pci_nodes()
            .into_iter()
            .filter_map(|(_, n)| n.gpu.as_ref().map(|g| (n.busid, g)))
            .collect();
        for (busid, xg) in listed {
            let Some(gpu) = g.gpu(busid) else { continue };
            let per_link = if xg.sm.unwrap_or(90) >= 100 {
                40.1
            } else {
                SM90_NVLINK_BW
            };
            for l in &xg.nvlinks {
                let bw = f64::from(l.count) * per_link;
                match l.tclass {
                    t if t >> 16 == 0x03 => {
                        if let Some(peer) = l.target.parse().ok().and_then(|b| g.gpu(b)) {
                            g.connect(gpu, peer, PathType::Nvl, bw);
                        }
                    }
                    0x068001 => {
                        if let Some(cpu) = g.local_cpu_of(gpu) {
                            g.both(gpu, cpu, PathType::Nvl, bw);
                        }
                    }
                    _ => {
                        let s = *nvs.get_or_insert_with(|| g.add(NodeKind::Nvs));
                        g.both(gpu, s, PathType::Nvl, bw);
                    }
                }
            }
        }
        for (i, &a) in cpu_nodes.iter().enumerate() {
            for (j, &b) in cpu_nodes.iter().enumerate() {
                if i != j {
                    let bw = inter_cpu_bw(&xml.cpus[i]);
                    g.connect(a, b, PathType::Sys, bw);
                }
            }
        }
        g
    }

    /// The CPU a node hangs below (following PCI links up).
    pub fn local_cpu_of(&self, from: usize) -> Option<usize> {
        let mut seen = vec![false; self.nodes.len()];
        let mut stack = vec![from];
        while let Some(n) = stack.pop() {
            if seen[n] {
                continue;
            }
            seen[n] = true;
            if matches!(self.nodes[n].kind, NodeKind::Cpu { .. }) {
                return Some(n);
            }
            for l in &self.nodes[n].links {
                if l.ty == PathType::Pix {
                    stack.push(l.to);
                }
            }
        }
        None
    }

    /// Paths from every node to `base` (`ncclTopoSetPaths`): breadth first,
    /// a path replaced only by a wider one no longer in hops; GPUs relay only
    /// NVLink-to-GPU traffic, one hop.
    pub fn paths_to(&self, base: usize) -> Vec<Path> {
        let mut paths = vec![Path::NONE; self.nodes.len()];
        paths[base] = Path {
            ty: PathType::Loc,
            bw: LOC_BW,
            hops: 0,
            next: None,
        };
        let mut list = vec![base];
        while !list.is_empty() {
            let mut next: Vec<usize> = Vec::new();
            for &node in &list {
                let path = paths[node];
                for link in &self.nodes[node].links {
                    let rem = link.to;
                    let is_gpu = |i: usize| matches!(self.nodes[i].kind, NodeKind::Gpu { .. });
                    if node != base
                        && is_gpu(node)
                        && (link.ty != PathType::Nvl || !is_gpu(rem) || path.hops > 1)
                    {
                        continue;
                    }
                    let bw = path.bw.min(link.bw);
                    let rp = paths[rem];
                    if (rp.bw == 0.0 || rp.hops > path.hops) && rp.bw < bw {
                        let is_pci = |i: usize| matches!(self.nodes[i].kind, NodeKind::Pci { .. });
                        let is_cpu = |i: usize| matches!(self.nodes[i].kind, NodeKind::Cpu { .. });
                        let mut ty = if link.ty == PathType::Net {
                            PathType::Loc
                        } else {
                            link.ty
                        };
                        if is_pci(node) && is_pci(rem) {
                            ty = PathType::Pxb;
                        }
                        if link.ty == PathType::Pix && (is_cpu(node) || is_cpu(rem)) {
                            ty = PathType::Phb;
                        }
                        let hops = path.hops + 1;
                        if is_gpu(node)
                            && path.ty == PathType::Nvl
                            && ty == PathType::Nvl
                            && hops > 1
                        {
                            ty = PathType::Nvb;
                        }
                        paths[rem] = Path {
                            ty: path.ty.max(ty),
                            bw,
                            hops,
                            next: Some(node),
                        };
                        if !next.contains(&rem) {
                            next.push(rem);
                        }
                    }
                }
            }
            list = next;
        }
        paths
    }
}
