//! NCCL 2.28's verdicts on a graph: the transport between every pair of GPUs
//! (`ncclTopoCheckP2p`, `ncclTopoCheckNet` in src/graph/paths.cc; the P2P and
//! SHM transports' `canConnect` in src/transport/p2p.cc and shm.cc), the NIC
//! each GPU gets (`ncclTopoGetLocalNet`, src/graph/topo.cc) and whether
//! GPUDirect RDMA is used with it (`ncclTopoCheckGdr`).

use serde::{Deserialize, Serialize};

use super::env::NcclEnv;
use super::graph::{Graph, NodeKind, Path};
use super::path::PathType;
use p2p_topology::bdf::Bdf;

/// What the GPU driver says of peer access between two GPUs (NVML's P2P
/// status, which NCCL checks once its topology allows P2P).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DriverP2p {
    /// The driver allows peer access.
    Allowed,
    /// The driver refuses it.
    Refused,
    /// Not known here (no driver, or a file explained outside its VM); taken as allowed.
    Unknown,
}

/// The transport NCCL picks between two GPUs of one process or node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum Transport {
    /// Peer-to-peer over NVLink or PCIe.
    P2p,
    /// Through host shared memory.
    Shm,
    /// Through the network (loopback through a NIC).
    Net,
    /// NCCL refuses to initialise (NVLink-connected GPUs the driver will not peer).
    Error,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::P2p => "P2P",
            Self::Shm => "SHM",
            Self::Net => "NET",
            Self::Error => "ERROR",
        })
    }
}

/// NCCL's verdict on one pair of GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PairVerdict {
    /// One GPU (the lower CUDA index).
    pub a: Bdf,
    /// The other.
    pub b: Bdf,
    /// The path type NCCL computes between them.
    pub path: PathType,
    /// The narrowest link of that path, GB/s, as NCCL models it.
    pub bw_gbs: f64,
    /// The P2P level in force.
    pub p2p_level: PathType,
    /// Whether `path` is within `p2p_level`.
    pub topology_allows_p2p: bool,
    /// What the driver says.
    pub driver: DriverP2p,
    /// The transport NCCL will use.
    pub transport: Transport,
    /// Why, step by step.
    pub reasons: Vec<String>,
    /// Every variable or machine fact that moved the verdict off NCCL's
    /// default (empty when defaults decided).
    pub decided_by: Vec<String>,
}

/// The NIC NCCL gives a GPU (channel 0) and GPUDirect RDMA with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuVerdict {
    /// The GPU.
    pub gpu: Bdf,
    /// The net port NCCL pairs it with; None when NCCL sees no net.
    pub net: Option<String>,
    /// The NIC's bus id; None for a NIC below the CPU (sockets) or none.
    pub nic: Option<Bdf>,
    /// The path from the GPU to that NIC.
    pub path: Option<PathType>,
    /// Every net tied as nearest (NCCL spreads channels over them).
    pub candidates: Vec<String>,
    /// GPUDirect RDMA for receives (the NIC writes GPU memory).
    pub gdr_write: bool,
    /// GPUDirect RDMA for sends (the NIC reads GPU memory).
    pub gdr_read: bool,
    /// Why, step by step.
    pub reasons: Vec<String>,
    /// Variables or facts that moved the verdict off NCCL's default.
    pub decided_by: Vec<String>,
}

impl GpuVerdict {
    /// `gpu` with no network device (none seen, or NCCL does not start),
    /// and why.
    pub fn without_net(gpu: Bdf, reasons: Vec<String>, decided_by: Vec<String>) -> Self {
        Self {
            gpu,
            net: None,
            nic: None,
            path: None,
            candidates: Vec::new(),
            gdr_write: false,
            gdr_read: false,
            reasons,
            decided_by,
        }
    }
}

/// Every verdict for one system.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Prediction {
    /// Per pair, in CUDA order.
    pub pairs: Vec<PairVerdict>,
    /// Per GPU, in CUDA order.
    pub gpus: Vec<GpuVerdict>,
}

struct Ctx<'a> {
    g: &'a Graph,
    env: &'a NcclEnv,
    /// Graph index of each GPU, CUDA order.
    gpus: Vec<usize>,
    nets: Vec<usize>,
    /// paths_to(gpu) per GPU position.
    to_gpu: Vec<Vec<Path>>,
    /// paths_to(net) per net position.
    to_net: Vec<Vec<Path>>,
    /// paths_to(node) for every CPU node, by graph index.
    to_cpu: Vec<(usize, Vec<Path>)>,
}

fn is_pow2(v: usize) -> bool {
    v & v.wrapping_sub(1) == 0
}

/// `mirrorBits` (src/graph/topo.h): `val`'s bits reversed within `pow2`.
fn mirror_bits(val: usize, pow2: usize) -> usize {
    let (mut mirror, mut b, mut mb) = (0, 1, pow2 >> 1);
    while b < pow2 {
        if val & b != 0 {
            mirror |= mb;
        }
        b <<= 1;
        mb >>= 1;
    }
    mirror
}

impl Ctx<'_> {
    fn cpu_paths(&self, cpu: usize) -> &[Path] {
        &self
            .to_cpu
            .iter()
            .find(|(c, _)| *c == cpu)
            .expect("every CPU has paths")
            .1
    }

    /// A path diverted through `cpu` (`addInterStep`): the worse type, the narrower link.
    fn via_cpu(&self, from: usize, cpu: usize, to_paths: &[Path]) -> (PathType, f64) {
        let up = self.cpu_paths(cpu)[from];
        let down = to_paths[cpu];
        (up.ty.max(down.ty), up.bw.min(down.bw))
    }

    fn gpu_info(&self, gi: usize) -> (Bdf, u32, bool) {
        match &self.g.nodes[self.gpus[gi]].kind {
            NodeKind::Gpu { busid, sm, gdr } => (*busid, *sm, *gdr),
            _ => unreachable!("gpus holds GPU nodes"),
        }
    }

    /// `ncclTopoCheckGdr` for GPU `gi` and net `ni`.
    fn gdr(
        &self,
        gi: usize,
        ni: usize,
        read: bool,
        why: &mut Vec<String>,
        by: &mut Vec<String>,
    ) -> bool {
        let (_, sm, gpu_gdr) = self.gpu_info(gi);
        let NodeKind::Net {
            name, gdr: net_gdr, ..
        } = &self.g.nodes[self.nets[ni]].kind
        else {
            unreachable!("nets holds net nodes")
        };
        if !net_gdr {
            why.push(format!("{name}: the net plugin reports no GPUDirect RDMA (sockets never; InfiniBand needs nvidia-peermem or DMA-BUF)"));
            return false;
        }
        if !gpu_gdr {
            why.push("the GPU reports no GPUDirect RDMA support".into());
            return false;
        }
        if read {
            let (r, s) = self.env.gdr_read();
            if r == 0 {
                by.extend(s.map(|s| s.to_string()));
                why.push("GPUDirect RDMA reads off: NCCL_NET_GDR_READ=0".into());
                return false;
            }
            if r < 0 && sm < 80 {
                let gpu = self.gpus[gi];
                let nvlink = self.gpus.len() == 1
                    || (0..self.gpus.len())
                        .any(|o| o != gi && self.to_gpu[o][gpu].ty == PathType::Nvl);
                if !nvlink {
                    why.push(format!(
                        "GPUDirect RDMA reads off: SM {sm} (before Ampere) without an NVLink peer"
                    ));
                    return false;
                }
            }
        }
        let (level, src) = match self.env.gdr_level() {
            Some((l, s)) => (l, Some(s)),
            None => (PathType::Pxb, None),
        };
        let distance = self.to_net[ni][self.gpus[gi]].ty;
        if distance > level {
            by.extend(src.map(|s| s.to_string()));
            why.push(format!(
                "{name}: GPUDirect RDMA off, distance {distance} beyond the GDR level {level}{}",
                if src.is_some() {
                    ""
                } else {
                    " (NCCL's default; NCCL_NET_GDR_LEVEL raises it)"
                }
            ));
            return false;
        }
        if let Some(s) = src {
            by.push(s.to_string());
        }
        true
    }

    /// The GPU-to-net path after NCCL diverts non-GDR traffic through the
    /// GPU's CPU (done for paths nearer than PHB).
    fn final_net_path(&self, gi: usize, ni: usize) -> (PathType, f64) {
        let gpu = self.gpus[gi];
        let p = self.to_net[ni][gpu];
        if p.ty < PathType::Phb && !self.gdr(gi, ni, false, &mut Vec::new(), &mut Vec::new()) {
            if let Some(cpu) = self.g.local_cpu_of(gpu) {
                return self.via_cpu(gpu, cpu, &self.to_net[ni]);
            }
        }
        (p.ty, p.bw)
    }

    /// `ncclTopoCheckNet`: the network is faster than the GPUs' own path.
    fn net_faster(&self, a: usize, b: usize, speed: f64) -> bool {
        if self.env.net_intra_disabled().is_some() {
            return false;
        }
        let best = |gi: usize| {
            (0..self.nets.len())
                .map(|ni| self.final_net_path(gi, ni))
                .filter(|(t, _)| *t <= PathType::Pxb)
                .map(|(_, bw)| bw)
                .fold(0.0, f64::max)
        };
        best(a) > speed && best(b) > speed
    }

    fn pair(&self, a: usize, b: usize, driver: DriverP2p) -> PairVerdict {
        let (ba, ..) = self.gpu_info(a);
        let (bb, ..) = self.gpu_info(b);
        let path = self.to_gpu[b][self.gpus[a]];
        let mut reasons = vec![format!(
            "path {} ({} hop(s), {:.1} GB/s as NCCL models it)",
            path.ty, path.hops, path.bw
        )];
        let mut by = Vec::new();
        let mut level = PathType::Pxb;
        let mut level_why = "NCCL's default: no P2P through a CPU host bridge".to_string();
        if self.g.cpu.is_amd_x86() && self.gpus.len() <= 2 {
            level = PathType::Sys;
            level_why = "AMD x86 CPU with at most two GPUs: NCCL lifts the cutoff to SYS (src/graph/paths.cc)".into();
            by.push(format!(
                "CPU vendor {} with {} GPU(s)",
                self.g.cpu.vendor.as_deref().unwrap_or("?"),
                self.gpus.len()
            ));
        }
        if let Some((l, s)) = self.env.p2p_level() {
            level = l;
            level_why = format!("set by {s}");
            by.push(s.to_string());
        }
        reasons.push(format!("P2P level {level}: {level_why}"));
        let topo_ok = path.ty <= level;
        let mut p2p = topo_ok;
        let mut transport = None;
        if topo_ok {
            reasons.push(format!("{} <= {level}: the topology allows P2P", path.ty));
            let (ignore, s) = self.env.ignore_disabled_p2p();
            if ignore == 2 {
                by.extend(s.map(|s| s.to_string()));
                reasons.push("NCCL_IGNORE_DISABLED_P2P=2: the driver is not asked".into());
            } else {
                match driver {
                    DriverP2p::Allowed => reasons.push("the driver allows peer access".into()),
                    DriverP2p::Unknown => reasons
                        .push("the driver's answer is not known here; taken as allowed".into()),
                    DriverP2p::Refused => {
                        p2p = false;
                        if path.ty <= PathType::Nvb && ignore == 0 {
                            reasons.push("the driver refuses peer access between NVLink-connected GPUs: NCCL stops with an error (NCCL_IGNORE_DISABLED_P2P=1 goes on without P2P)".into());
                            transport = Some(Transport::Error);
                        } else {
                            by.extend(s.map(|s| s.to_string()));
                            reasons.push("the driver refuses peer access: no P2P".into());
                        }
                    }
                }
            }
        } else {
            reasons.push(format!("{} beyond {level}: no P2P", path.ty));
        }
        let speed = if p2p {
            path.bw
        } else {
            match self.g.local_cpu_of(self.gpus[b]) {
                Some(cpu) => self.via_cpu(self.gpus[a], cpu, &self.to_gpu[b]).1,
                None => path.bw,
            }
        };
        let transport = transport.unwrap_or_else(|| {
            let net = self.net_faster(a, b, speed);
            if p2p && !net {
                Transport::P2p
            } else if net {
                reasons.push(format!(
                    "both GPUs reach a GPUDirect RDMA NIC (PXB or nearer) faster than {speed:.1} GB/s: NCCL goes through the network"
                ));
                Transport::Net
            } else if let Some(s) = self.env.shm_disabled() {
                by.push(s.to_string());
                reasons.push("SHM disabled: the network is the only transport left".into());
                Transport::Net
            } else {
                reasons.push("NCCL uses shared memory through the CPU".into());
                Transport::Shm
            }
        });
        PairVerdict {
            a: ba,
            b: bb,
            path: path.ty,
            bw_gbs: path.bw,
            p2p_level: level,
            topology_allows_p2p: topo_ok,
            driver,
            transport,
            reasons,
            decided_by: by,
        }
    }

    fn gpu(&self, gi: usize) -> GpuVerdict {
        let (busid, ..) = self.gpu_info(gi);
        let mut reasons = Vec::new();
        let mut by = Vec::new();
        // ncclTopoGetLocal: the widest path, then the nearest type.
        let mut best: Vec<usize> = Vec::new();
        let (mut max_bw, mut min_ty) = (0.0, PathType::Dis);
        for ni in 0..self.nets.len() {
            let (ty, bw) = self.final_net_path(gi, ni);
            if bw > max_bw || (bw == max_bw && ty < min_ty) {
                max_bw = bw;
                min_ty = ty;
                best.clear();
            }
            if bw == max_bw && ty == min_ty {
                best.push(ni);
            }
        }
        let name = |ni: usize| self.g.label(self.nets[ni]);
        if best.is_empty() {
            reasons.push("NCCL sees no network device".into());
            return GpuVerdict::without_net(busid, reasons, by);
        }
        let mut idx = gi;
        if is_pow2(best.len()) {
            idx = mirror_bits(idx, best.len());
        }
        let ni = best[idx % best.len()];
        let nic = self.g.nodes[self.nets[ni]]
            .links
            .iter()
            .find_map(|l| match self.g.nodes[l.to].kind {
                NodeKind::Nic { busid } => Some(busid),
                _ => None,
            })
            .flatten();
        let path = self.to_net[ni][self.gpus[gi]].ty;
        reasons.push(format!(
            "{}: path {path}, {max_bw:.1} GB/s{}",
            name(ni),
            if best.len() > 1 {
                format!(
                    " ({} nets tie; channel 0 takes this one, later channels the others)",
                    best.len()
                )
            } else {
                String::new()
            }
        ));
        let gdr_write = self.gdr(gi, ni, false, &mut reasons, &mut by);
        let gdr_read = gdr_write && self.gdr(gi, ni, true, &mut reasons, &mut by);
        if gdr_write {
            reasons.push(format!(
                "GPUDirect RDMA: writes on, reads {}",
                if gdr_read { "on" } else { "off" }
            ));
        }
        by.sort();
        by.dedup();
        GpuVerdict {
            gpu: busid,
            net: Some(name(ni)),
            nic,
            path: Some(path),
            candidates: best.iter().map(|&n| name(n)).collect(),
            gdr_write,
            gdr_read,
            reasons,
            decided_by: by,
        }
    }
}

/// NCCL's verdicts on `graph` under `env`. `order` lists the GPUs in CUDA
/// order (NCCL's `dev`; GPUs of the graph not in it come last); `driver`
/// answers for an unordered pair.
pub fn predict(
    graph: &Graph,
    env: &NcclEnv,
    order: &[Bdf],
    driver: &dyn Fn(Bdf, Bdf) -> DriverP2p,
) -> Prediction {
    let mut gpus = graph.gpus();
    let rank = |i: &usize| match &graph.nodes[*i].kind {
        NodeKind::Gpu { busid, .. } => order.iter().position(|b| b == busid).unwrap_or(usize::MAX),
        _ => usize::MAX,
    };
    gpus.sort_by_key(rank);
    let nets = graph.nets();
    let ctx = Ctx {
        g: graph,
        env,
        to_gpu: gpus.iter().map(|&g| graph.paths_to(g)).collect(),
        to_net: nets.iter().map(|&n| graph.paths_to(n)).collect(),
        to_cpu: graph
            .cpus()
            .into_iter()
            .map(|c| (c, graph.paths_to(c)))
            .collect(),
        gpus,
        nets,
    };
    let n = ctx.gpus.len();
    let mut pairs = Vec::new();
    for a in 0..n {
        for b in a + 1..n {
            let (ba, ..) = ctx.gpu_info(a);
            let (bb, ..) = ctx.gpu_info(b);
            pairs.push(ctx.pair(a, b, driver(ba, bb)));
        }
    }
    Prediction {
        pairs,
        gpus: (0..n).map(|g| ctx.gpu(g)).collect(),
    }
}
