//! What NCCL makes of a topology file in a given VM (`ncclTopoGetSystem`):
//! GPUs of the communicator keep the place the file gives them, the others
//! are placed from sysfs, GPUs named by the file but absent from the VM drop
//! out, NVLinks come from NVML unless the file lists some, NICs from the net
//! plugin, and missing CPU attributes from the CPU itself.

use serde::{Deserialize, Serialize};

use super::xml::{TopoXml, XmlCpu, XmlGpu, XmlNet, XmlNvLink, XmlPci};
use p2p_topology::bdf::Bdf;

/// The CPU as NCCL identifies it (`arch`, `vendor`, `familyid`, `modelid`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CpuIdentity {
    /// `x86_64`, `arm64`, `ppc64`.
    pub arch: String,
    /// x86 vendor string (`GenuineIntel`, `AuthenticAMD`).
    pub vendor: Option<String>,
    /// CPU family.
    pub familyid: Option<u32>,
    /// CPU model.
    pub modelid: Option<u32>,
}

/// A PCI function as the VM's sysfs shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VmFunction {
    /// Its address in the VM.
    pub busid: Bdf,
    /// 24-bit class code.
    pub class: u32,
    /// NUMA node; -1 when unknown.
    pub numa: i32,
    /// The bridges above it, root port first (empty on a flat bus).
    pub bridges: Vec<Bdf>,
    /// Link speed as the kernel spells it.
    pub link_speed: Option<String>,
    /// Link width.
    pub link_width: Option<u32>,
}

/// An RDMA NIC port as NCCL's IB plugin would list it, or the socket
/// transport's interface (no `function`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VmNic {
    /// `mlx5_0`, `eth0`.
    pub name: String,
    /// The PCI function; None for a socket interface, which NCCL hangs below the CPU.
    pub function: Option<VmFunction>,
    /// Speed in Mb/s.
    pub speed_mbps: u64,
    /// Whether the plugin reports GPUDirect RDMA (IB: nvidia-peermem loaded;
    /// sockets: never).
    pub gdr: bool,
}

/// Everything NCCL learns from the VM rather than from the file.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VmFacts {
    /// The CPU.
    pub cpu: CpuIdentity,
    /// The communicator's GPUs, in CUDA order (NCCL's `dev`).
    pub gpus: Vec<VmFunction>,
    /// NICs the net plugin would list.
    pub nics: Vec<VmNic>,
    /// NVLinks NVML reports, per unordered pair (a, b, links); None when NVML
    /// could not be asked.
    pub nvlinks: Option<Vec<(Bdf, Bdf, u32)>>,
}

impl VmFacts {
    /// The VM a file describes, for a file explained outside any VM
    /// (`explain --file F` with no GPU here): its GPUs in file order with the
    /// places the file gives them, no NIC, no NVML, and `cpu` as the CPU.
    pub fn from_file(xml: &TopoXml, cpu: CpuIdentity) -> VmFacts {
        let gpus = xml
            .pci_nodes()
            .into_iter()
            .filter(|(_, n)| n.class >> 16 == 0x03)
            .map(|(numa, n)| VmFunction {
                busid: n.busid,
                class: n.class,
                numa,
                bridges: Vec::new(),
                link_speed: n.link_speed.clone(),
                link_width: n.link_width,
            })
            .collect();
        VmFacts {
            cpu,
            gpus,
            nics: Vec::new(),
            nvlinks: None,
        }
    }
}

/// The system NCCL builds, and what it took from where.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Effective {
    /// The filled and trimmed tree.
    pub xml: TopoXml,
    /// One line per decision: where each GPU and NIC was placed from, what
    /// was dropped, which CPU attributes were filled.
    pub notes: Vec<String>,
}

fn remove_gpu(pci: &mut Vec<XmlPci>, busid: Bdf) -> Option<XmlPci> {
    if let Some(i) = pci.iter().position(|p| p.busid == busid) {
        return Some(pci.remove(i));
    }
    pci.iter_mut()
        .find_map(|p| remove_gpu(&mut p.children, busid))
}

fn find_mut(pci: &mut [XmlPci], busid: Bdf) -> Option<&mut XmlPci> {
    for p in pci {
        if p.busid == busid {
            return Some(p);
        }
        if let Some(f) = find_mut(&mut p.children, busid) {
            return Some(f);
        }
    }
    None
}

fn cpu_mut(xml: &mut TopoXml, numa: i32) -> &mut XmlCpu {
    if let Some(i) = xml.cpus.iter().position(|c| c.numaid == numa) {
        return &mut xml.cpus[i];
    }
    xml.cpus.push(XmlCpu {
        numaid: numa,
        arch: None,
        vendor: None,
        familyid: None,
        modelid: None,
        pci: Vec::new(),
        nets: Vec::new(),
        line: 0,
    });
    xml.cpus.last_mut().expect("just pushed")
}

fn node(busid: Bdf, class: u32, f: &VmFunction) -> XmlPci {
    XmlPci {
        busid,
        class,
        link_speed: f.link_speed.clone(),
        link_width: f.link_width,
        gpu: None,
        nets: Vec::new(),
        children: Vec::new(),
        line: 0,
    }
}

/// Places `f` as NCCL's sysfs walk does: from the device, two levels up at a
/// time (a switch's downstream port is skipped, so a switch is one node keyed
/// by its upstream port) until the root bus, whose CPU is the device's NUMA
/// node. Parents already in the tree keep their place.
fn place(xml: &mut TopoXml, f: &VmFunction, leaf: XmlPci) {
    let mut chain = Vec::new();
    let mut i = f.bridges.len() as isize - 2;
    while i >= 0 {
        chain.push(f.bridges[i as usize]);
        i -= 2;
    }
    // chain: nearest parent first. Attach below the nearest one already present.
    let mut child = leaf;
    for parent in chain {
        let existing = xml
            .cpus
            .iter_mut()
            .find_map(|c| find_mut(&mut c.pci, parent));
        if let Some(p) = existing {
            p.children.push(child);
            return;
        }
        let mut p = node(parent, 0x060400, f);
        p.children.push(child);
        child = p;
    }
    cpu_mut(xml, f.numa).pci.push(child);
}

fn fill_cpu(cpu: &mut XmlCpu, id: &CpuIdentity, notes: &mut Vec<String>) {
    let mut filled = Vec::new();
    if cpu.arch.is_none() {
        cpu.arch = Some(id.arch.clone());
        filled.push(format!("arch={}", id.arch));
    }
    if cpu.arch.as_deref() == Some("x86_64") && cpu.vendor.is_none() {
        if let Some(v) = &id.vendor {
            cpu.vendor = Some(v.clone());
            filled.push(format!("vendor={v}"));
        }
    }
    if cpu.familyid.is_none() && id.familyid.is_some() {
        cpu.familyid = id.familyid;
        filled.push(format!("familyid={}", id.familyid.unwrap_or(0)));
    }
    if cpu.modelid.is_none() && id.modelid.is_some() {
        cpu.modelid = id.modelid;
        filled.push(format!("modelid={}", id.modelid.unwrap_or(0)));
    }
    if !filled.is_empty() {
        notes.push(format!(
            "<cpu numaid=\"{}\">: {} from the CPU's identity in cpuinfo (the file leaves them to NCCL)",
            cpu.numaid,
            filled.join(" ")
        ));
    }
}

/// NCCL's system for `file` (None: no file, NCCL reads sysfs alone) in the VM
/// `vm`.
pub fn effective(file: Option<&TopoXml>, vm: &VmFacts) -> Effective {
    let mut notes = Vec::new();
    let mut xml = file.cloned().unwrap_or_default();
    // GPUs the file names that are not the communicator's drop out (NCCL
    // trims every <pci> it did not mark `keep`).
    for b in xml.gpu_busids() {
        if !vm.gpus.iter().any(|g| g.busid == b) {
            let mut cpus = std::mem::take(&mut xml.cpus);
            for c in &mut cpus {
                remove_gpu(&mut c.pci, b);
            }
            xml.cpus = cpus;
            notes.push(format!(
                "{b}: in the file but not a GPU of this VM: NCCL drops it"
            ));
        }
    }
    for g in &vm.gpus {
        let in_file = xml
            .cpus
            .iter_mut()
            .find_map(|c| find_mut(&mut c.pci, g.busid));
        match in_file {
            Some(p) => {
                if p.gpu.is_none() {
                    p.gpu = Some(XmlGpu::default());
                }
                notes.push(format!("{}: placed by the file", g.busid));
            }
            None => {
                let mut leaf = node(g.busid, g.class, g);
                leaf.gpu = Some(XmlGpu::default());
                place(&mut xml, g, leaf);
                notes.push(format!(
                    "{}: not in the file: placed from sysfs ({})",
                    g.busid,
                    if g.bridges.is_empty() {
                        "on the root bus, below its CPU".to_string()
                    } else {
                        format!("below {} bridge(s)", g.bridges.len())
                    }
                ));
            }
        }
    }
    // NVLinks: a GPU whose <gpu> already lists any keeps exactly those.
    for g in &vm.gpus {
        let Some(p) = xml
            .cpus
            .iter_mut()
            .find_map(|c| find_mut(&mut c.pci, g.busid))
        else {
            continue;
        };
        let gpu = p.gpu.get_or_insert_with(XmlGpu::default);
        if !gpu.nvlinks.is_empty() {
            notes.push(format!(
                "{}: the file lists {} <nvlink>: NCCL does not ask NVML for this GPU's NVLinks",
                g.busid,
                gpu.nvlinks.len()
            ));
            continue;
        }
        if let Some(links) = &vm.nvlinks {
            for (a, b, n) in links {
                let peer = if *a == g.busid {
                    *b
                } else if *b == g.busid {
                    *a
                } else {
                    continue;
                };
                gpu.nvlinks.push(XmlNvLink {
                    target: peer.to_string(),
                    count: *n,
                    tclass: 0x030200,
                });
            }
        }
    }
    if vm.nvlinks.is_none() {
        notes.push("NVML not asked: NVLinks only as the file lists them".into());
    }
    // NICs: NCCL adds what the net plugin lists; the file's own <nic>s are
    // kept when the plugin lists none (a dump explained outside its VM).
    if !vm.nics.is_empty() {
        for c in &mut xml.cpus {
            c.nets.clear();
            clear_nets(&mut c.pci);
        }
    }
    for n in &vm.nics {
        let net = XmlNet {
            name: n.name.clone(),
            speed_mbps: Some(n.speed_mbps),
            gdr: Some(n.gdr),
        };
        match &n.function {
            None => {
                let numa = vm.gpus.first().map_or(-1, |g| g.numa);
                cpu_mut(&mut xml, numa).nets.push(net);
            }
            Some(f) => {
                let existing = xml
                    .cpus
                    .iter_mut()
                    .find_map(|c| find_mut(&mut c.pci, f.busid));
                match existing {
                    Some(p) => p.nets.push(net),
                    None => {
                        let mut leaf = node(f.busid, f.class, f);
                        leaf.nets.push(net);
                        place(&mut xml, f, leaf);
                    }
                }
            }
        }
    }
    for c in &mut xml.cpus {
        fill_cpu(c, &vm.cpu, &mut notes);
    }
    Effective { xml, notes }
}

fn clear_nets(pci: &mut [XmlPci]) {
    for p in pci {
        p.nets.clear();
        clear_nets(&mut p.children);
    }
}

/// Hides NVLink from NCCL in `eff`, as the placeholder `<nvlink>` in a file
/// does: every GPU keeps one link to a target that is no GPU, so no NVLink
/// path remains and NVML is not asked.
pub fn hide_nvlink(eff: &mut Effective) {
    fn walk(p: &mut [XmlPci]) {
        for n in p {
            if let Some(g) = &mut n.gpu {
                g.nvlinks = vec![XmlNvLink {
                    target: p2p_topology::nccl_topo::PLACEHOLDER_NVLINK_TARGET.into(),
                    count: 1,
                    tclass: 0x030200,
                }];
            }
            walk(&mut n.children);
        }
    }
    for c in &mut eff.xml.cpus {
        walk(&mut c.pci);
    }
    eff.notes
        .push("--hide-nvlink: a placeholder <nvlink> under every GPU; NCCL sees no NVLink".into());
}
