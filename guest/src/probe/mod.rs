//! `p2p-guest probe`: what the VM shows of its GPUs. Sysfs gives each GPU's
//! P2P clique capability, CPUID whether a hypervisor is visible (the driver
//! ignores the capability without one), NVML the NVLinks, and CUDA what the
//! driver itself decided; config space also the throughput registers
//! (relaxed ordering, payload and read request sizes, link, ATS) as the VM sees them.

pub mod hypervisor;
pub mod nvml;
pub mod pcie;
pub mod report;
pub mod sysfs;

use std::path::Path;

use crate::cuda::{peer, Cuda};
use crate::decide::{CudaPeer, Verdict};
use report::{CudaFacts, EnableResult, ProbeReport};

/// Options of one probe.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// Ask CUDA and NVML (off for sysfs-only runs on captured trees).
    pub use_driver: bool,
    /// Take NVIDIA functions of this class as GPUs instead of display
    /// controllers: stand-ins whose vendor id a VMM overrode.
    pub gpu_class: Option<p2p_topology::select::ClassPrefix>,
}

/// Gathers every fact and decides every pair. Returns the opened CUDA
/// driver too, so `--enable` and `bench` use the same contexts. With
/// `CUDA_VISIBLE_DEVICES` set and CUDA answering, only the GPUs CUDA shows
/// are probed.
pub fn probe(
    root: &Path,
    opts: &ProbeOptions,
) -> Result<(ProbeReport, Option<Cuda>), sysfs::ProbeError> {
    let mut gpus = sysfs::scan_gpus_of_class(root, opts.gpu_class)?;
    let hv = hypervisor::detect();
    let (nv, cuda) = if opts.use_driver {
        (nvml::read(), Cuda::open().map_err(|e| e.to_string()))
    } else {
        let off = "not asked (--no-driver)".to_string();
        let nv = nvml::NvLinkView {
            driver_version: None,
            gpus: Vec::new(),
            pairs: Vec::new(),
            unavailable: Some(off.clone()),
        };
        (nv, Err(off))
    };
    let restricted = std::env::var_os("CUDA_VISIBLE_DEVICES").is_some();
    if let Some(c) = cuda.as_ref().ok().filter(|_| restricted) {
        // The process may use only the GPUs CUDA shows it: the others are
        // left out of every pair, as NCCL and any CUDA program leave them.
        gpus.retain(|g| c.gpus.iter().any(|x| x.bdf == g.bdf));
    }
    let facts = match &cuda {
        Ok(c) => cuda_facts(c),
        Err(e) => Err(e.clone()),
    };
    let report = report::build(&root.display().to_string(), gpus, hv, &nv, facts);
    Ok((report, cuda.ok()))
}

fn cuda_facts(c: &Cuda) -> Result<CudaFacts, String> {
    let mut answers = Vec::new();
    for a in &c.gpus {
        for b in &c.gpus {
            if a.ordinal == b.ordinal {
                continue;
            }
            let q = peer::query(a, b).map_err(|e| e.to_string())?;
            answers.push((
                (a.ordinal, b.ordinal),
                CudaPeer {
                    can_access: q.can_access,
                    performance_rank: q.performance_rank,
                    native_atomics: q.native_atomics,
                },
            ));
        }
    }
    Ok(CudaFacts {
        ordinals: c.gpus.iter().map(|g| (g.bdf, g.ordinal)).collect(),
        answers,
        driver_api: c.driver_api,
    })
}

/// Enables peer access, both directions, for exactly the pairs decided
/// `enable`, and records what the driver answered.
pub fn enable_allowed(report: &mut ProbeReport, cuda: &Cuda) {
    let gpu_of = |b| cuda.gpus.iter().find(|g| g.bdf == b);
    let mut results = Vec::new();
    for p in report.pairs.iter().filter(|p| p.verdict == Verdict::Enable) {
        let (Some(a), Some(b)) = (gpu_of(p.a), gpu_of(p.b)) else {
            results.push(EnableResult {
                src: p.a,
                dst: p.b,
                ok: false,
                answer: "CUDA does not see both GPUs".into(),
            });
            continue;
        };
        for (s, d) in [(a, b), (b, a)] {
            let r = peer::enable(s, d);
            results.push(EnableResult {
                src: s.bdf,
                dst: d.bdf,
                ok: r.is_ok(),
                answer: match r {
                    Ok(()) => "enabled".into(),
                    Err(e) => e.to_string(),
                },
            });
        }
    }
    report.enabled = results;
}
