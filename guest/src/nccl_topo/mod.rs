//! NCCL's topology file in the guest: derived from the cliques the GPUs'
//! capabilities name (no host help), or installed from the file the host
//! handed over through fw_cfg after checking it against the guest's own PCI
//! functions. Either way it ends where NCCL looks by default.

pub mod explain;
mod file;
mod functions;
pub mod loader;
pub mod vm_facts;

use std::path::{Path, PathBuf};

use p2p_nccl::loader::LoaderRefusal;
use p2p_nccl::CpuIdentity;
use p2p_topology::nccl_topo::{self, CliqueGpu, NcclSystem, FW_CFG_NAME};
use p2p_topology::Bdf;
use serde::{Deserialize, Serialize};

pub use file::parse;
pub use functions::{read_functions, GuestFunction};

use crate::probe::sysfs::{resolve_root, scan_gpus, ProbeError};

/// Schema tag of `p2p-guest nccl-topo --json`.
pub const NCCL_TOPO_SCHEMA: &str = "vp2p.nccl-topo/1";

/// Why a file could not be made, read or installed.
#[derive(Debug, thiserror::Error)]
pub enum NcclTopoError {
    /// A file or directory could not be read or written.
    #[error("{path}: {why}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error, or what is wrong with the contents.
        why: String,
    },
    /// The topology XML is malformed or lacks something NCCL needs.
    #[error("{path}:{line}: {why}")]
    Parse {
        /// The file read.
        path: PathBuf,
        /// Line of the offending element, counting from 1.
        line: u32,
        /// What is wrong.
        why: String,
    },
    /// Scanning the guest's GPUs in sysfs failed.
    #[error(transparent)]
    Probe(#[from] ProbeError),
    /// The host's file is not in the guest's fw_cfg directory.
    #[error("{path}: no fw_cfg file here: the VM was started without `-fw_cfg name={FW_CFG_NAME},...`, or the guest lacks the qemu_fw_cfg driver (`modprobe qemu_fw_cfg`); or pass --from FILE")]
    NoFwCfg {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// The file's `<pci>` nodes do not match this VM's PCI functions.
    #[error("{path} does not match this VM: {}", mismatches.join("; "))]
    Mismatch {
        /// The file read.
        path: PathBuf,
        /// One line per `<pci>` that did not match.
        mismatches: Vec<String>,
    },
    /// The sysfs tree holds no NVIDIA GPU.
    #[error("no NVIDIA GPU in {0}")]
    NoGpu(PathBuf),
    /// `--assume-clique` named an address that is not an NVIDIA GPU of this VM.
    #[error("--assume-clique: {0} is not an NVIDIA GPU of this VM")]
    NotAGpu(Bdf),
    /// NCCL 2.28.3 would refuse the file at initialisation in this VM.
    #[error(
        "{path}: NCCL 2.28.3 refuses this file at initialisation (ncclCommInitAll fails): {}",
        refusals.iter().map(|r| r.to_string()).collect::<Vec<_>>().join("; ")
    )]
    NcclRefuses {
        /// The file.
        path: PathBuf,
        /// Each reason, with its line, element, attribute and NCCL's message.
        refusals: Vec<LoaderRefusal>,
    },
}

/// Where the host's file appears in the guest's sysfs.
pub fn fw_cfg_path(sysfs_root: &Path) -> PathBuf {
    resolve_root(sysfs_root)
        .join("firmware/qemu_fw_cfg/by_name")
        .join(FW_CFG_NAME)
        .join("raw")
}

/// One GPU of a derived file: its clique and the switch it was put below.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DerivedGpu {
    /// The GPU's PCI address in the guest (its `<pci busid>`).
    pub busid: Bdf,
    /// Its clique (from `--assume-clique` or its capability); None when it has
    /// none.
    pub clique: Option<u8>,
    /// The invented switch's bus id; None when the GPU hangs from its CPU.
    pub switch: Option<Bdf>,
}

/// One check of a file against the guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FileCheck {
    /// The `<pci busid>` checked.
    pub busid: Bdf,
    /// What the file says: `GPU 0x10de:0x2335`, `switch`.
    pub expected: String,
    /// What the guest has there.
    pub found: String,
    /// Whether the guest's function fits what the file says.
    pub ok: bool,
}

/// What `p2p-guest nccl-topo` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NcclTopoReport {
    /// Always `vp2p.nccl-topo/1`.
    pub schema: String,
    /// `cliques` (derived here) or the file read (`fw_cfg` path or --from).
    pub source: String,
    /// The GPUs of a derived file; empty when a file was read.
    pub gpus: Vec<DerivedGpu>,
    /// Each `<pci>` of a read file against the guest; empty when derived.
    pub checks: Vec<FileCheck>,
    /// Where the file was written, when it was.
    pub installed: Option<PathBuf>,
    /// The topology XML, as written or as it would be written.
    pub xml: String,
}

/// Highest bus number no guest function uses, for invented switches.
fn free_bus(used: impl Iterator<Item = Bdf>) -> u8 {
    let used: std::collections::BTreeSet<u8> = used.map(|b| b.bus).collect();
    (0..=0xffu8)
        .rev()
        .find(|b| !used.contains(b))
        .unwrap_or(0xff)
}

/// The file that makes NCCL agree with the driver: GPUs of one clique below
/// one invented switch, cliques apart.
///
/// `assume` gives cliques to GPUs by address, over what their capability says
/// (a what-if for VMs whose hypervisor injects none).
pub fn derive(
    sysfs_root: &Path,
    assume: &[(Bdf, u8)],
) -> Result<(NcclSystem, Vec<DerivedGpu>), NcclTopoError> {
    let gpus = scan_gpus(sysfs_root)?;
    if gpus.is_empty() {
        return Err(NcclTopoError::NoGpu(resolve_root(sysfs_root)));
    }
    if let Some((b, _)) = assume
        .iter()
        .find(|(b, _)| !gpus.iter().any(|g| g.bdf == *b))
    {
        return Err(NcclTopoError::NotAGpu(*b));
    }
    let functions = read_functions(sysfs_root)?;
    let bus = free_bus(functions.keys().copied());
    let input: Vec<CliqueGpu> = gpus
        .iter()
        .map(|g| {
            let f = functions.get(&g.bdf);
            CliqueGpu {
                busid: g.bdf,
                class: g.class,
                vendor: g.vendor,
                device: g.device,
                subsystem_vendor: f.and_then(|f| f.subsystem_vendor),
                subsystem_device: f.and_then(|f| f.subsystem_device),
                link: f.map(|f| f.link.clone()).unwrap_or_default(),
                numa_node: f.and_then(|f| f.numa_node),
                clique: assume
                    .iter()
                    .find(|(b, _)| *b == g.bdf)
                    .map(|(_, c)| *c)
                    .or_else(|| g.capability.clique().map(|c| c.id())),
            }
        })
        .collect();
    let system = nccl_topo::from_cliques(&input, bus);
    let mut derived = Vec::new();
    for g in &input {
        let switch = system
            .all_pci()
            .into_iter()
            .find(|p| p.is_bridge() && p.children.iter().any(|c| c.busid == g.busid))
            .map(|p| p.busid);
        derived.push(DerivedGpu {
            busid: g.busid,
            clique: g.clique,
            switch,
        });
    }
    Ok((system, derived))
}

/// Checks every `<pci>` of a file against the guest: endpoints must exist with
/// the file's vendor and device; switches may be invented (absent) but must
/// not land on a guest function that is not a bridge (NCCL would take that
/// function's class).
pub fn check(
    system: &NcclSystem,
    functions: &std::collections::BTreeMap<Bdf, GuestFunction>,
) -> Vec<FileCheck> {
    let mut out = Vec::new();
    for p in system.all_pci() {
        let expected = if p.is_bridge() {
            "switch".to_string()
        } else {
            format!(
                "class {:#08x} {}:{}",
                p.class,
                p.vendor.map_or("*".into(), |v| format!("{v:#06x}")),
                p.device.map_or("*".into(), |d| format!("{d:#06x}"))
            )
        };
        let got = functions.get(&p.busid);
        let (found, ok) = match (got, p.is_bridge()) {
            (None, true) => ("absent (invented switch)".to_string(), true),
            (None, false) => ("no such function".to_string(), false),
            (Some(f), bridge) => {
                let found = format!("class {:#08x} {:#06x}:{:#06x}", f.class, f.vendor, f.device);
                let ok = if bridge {
                    f.class >> 8 == 0x0604
                } else {
                    p.vendor.is_none_or(|v| v == f.vendor) && p.device.is_none_or(|d| d == f.device)
                };
                (found, ok)
            }
        };
        out.push(FileCheck {
            busid: p.busid,
            expected,
            found,
            ok,
        });
    }
    out
}

/// Fills each `<cpu>`'s missing `affinity` from the guest's own NUMA node
/// (`devices/system/node/node<N>/cpumap`), the mask NCCL would read itself.
pub fn fill_affinity(system: &mut NcclSystem, sysfs_root: &Path) {
    let root = resolve_root(sysfs_root);
    for c in &mut system.cpus {
        if c.affinity.is_some() || c.numaid < 0 {
            continue;
        }
        let p = root.join(format!("devices/system/node/node{}/cpumap", c.numaid));
        if let Ok(t) = std::fs::read_to_string(&p) {
            c.affinity = Some(t.trim().to_string());
        }
    }
}

/// Refuses `text` (to be installed at, or read from, `path`) when NCCL
/// 2.28.3 would refuse it at initialisation in this VM: with the VM's GPUs
/// and nets in use, its sysfs, and this CPU's architecture (its vendor
/// unknown, so no family or model is asked of a `<cpu>` NCCL fills).
pub fn nccl_accepts(path: &Path, text: &str, sysfs_root: &Path) -> Result<(), NcclTopoError> {
    let root = resolve_root(sysfs_root);
    let functions = read_functions(sysfs_root)?;
    let gpus: Vec<Bdf> = scan_gpus(sysfs_root)?.iter().map(|g| g.bdf).collect();
    let nets = vm_facts::read_nics(&root, &functions);
    let cpu = CpuIdentity {
        arch: std::env::consts::ARCH.to_string(),
        ..CpuIdentity::default()
    };
    let refusals = loader::refusals_in_vm(text, sysfs_root, &gpus, &nets, &cpu);
    if refusals.is_empty() {
        Ok(())
    } else {
        Err(NcclTopoError::NcclRefuses {
            path: path.to_path_buf(),
            refusals,
        })
    }
}

/// Reads, checks and (unless `dry_run`) writes the host's file to `out`.
pub fn install_from(
    from: &Path,
    sysfs_root: &Path,
    out: &Path,
    dry_run: bool,
) -> Result<NcclTopoReport, NcclTopoError> {
    let text = match std::fs::read_to_string(from) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && from == fw_cfg_path(sysfs_root) => {
            return Err(NcclTopoError::NoFwCfg {
                path: from.to_path_buf(),
            })
        }
        Err(e) => {
            return Err(NcclTopoError::Io {
                path: from.to_path_buf(),
                why: e.to_string(),
            })
        }
    };
    // NCCL's refusal first: vp2p's reader may stop at the same place with
    // less to say.
    nccl_accepts(from, &text, sysfs_root)?;
    let mut system = parse(from, &text)?;
    let functions = read_functions(sysfs_root)?;
    let checks = check(&system, &functions);
    let mismatches: Vec<String> = checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| {
            format!(
                "{}: file says {}, guest has {}",
                c.busid, c.expected, c.found
            )
        })
        .collect();
    if !mismatches.is_empty() {
        return Err(NcclTopoError::Mismatch {
            path: from.to_path_buf(),
            mismatches,
        });
    }
    fill_affinity(&mut system, sysfs_root);
    let xml = nccl_topo::render(&system);
    nccl_accepts(out, &xml, sysfs_root)?;
    let installed = if dry_run {
        None
    } else {
        write(out, &xml)?;
        Some(out.to_path_buf())
    };
    Ok(NcclTopoReport {
        schema: NCCL_TOPO_SCHEMA.into(),
        source: from.display().to_string(),
        gpus: Vec::new(),
        checks,
        installed,
        xml,
    })
}

/// Writes the file, creating its directory.
pub fn write(out: &Path, xml: &str) -> Result<(), NcclTopoError> {
    let io = |p: &Path, e: std::io::Error| NcclTopoError::Io {
        path: p.to_path_buf(),
        why: e.to_string(),
    };
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    }
    std::fs::write(out, xml).map_err(|e| io(out, e))
}
