//! The probe report (schema `vp2p.probe/1`, [`p2p_report::probe`]) assembled
//! from what the probe read: GPUs with their capability and clique, the
//! hypervisor check, NVLink, what CUDA says, and the decision and
//! inconsistencies per pair.

use p2p_topology::{Bdf, CudaOrdinal};

pub use p2p_report::probe::{CudaStatus, EnableResult, ProbeGpu, ProbeReport, PROBE_SCHEMA};

use super::hypervisor::HypervisorInfo;
use super::nvml::NvLinkView;
use super::sysfs::GuestGpu;
use crate::decide::{self, CudaPeer, PairFacts};

/// CUDA's view of the GPUs: ordinal per address and answers per ordered pair.
pub struct CudaFacts {
    /// CUDA's ordinal for each GPU address it sees.
    pub ordinals: Vec<(Bdf, CudaOrdinal)>,
    /// CUDA's peer answers per ordered (source, destination) ordinal pair.
    pub answers: Vec<((CudaOrdinal, CudaOrdinal), CudaPeer)>,
    /// cuDriverGetVersion (for example 13000).
    pub driver_api: i32,
}

/// Assembles the report and decides every pair.
pub fn build(
    sysfs_root: &str,
    gpus: Vec<GuestGpu>,
    hypervisor: HypervisorInfo,
    nvlink: &NvLinkView,
    cuda: Result<CudaFacts, String>,
) -> ProbeReport {
    let (cuda_status, facts) = match cuda {
        Ok(f) => (
            CudaStatus {
                available: true,
                why: None,
                driver_api: Some(f.driver_api),
            },
            Some(f),
        ),
        Err(why) => (
            CudaStatus {
                available: false,
                why: Some(why),
                driver_api: None,
            },
            None,
        ),
    };
    let ordinal = |b: Bdf| {
        facts
            .as_ref()
            .and_then(|f| f.ordinals.iter().find(|(x, _)| *x == b).map(|(_, o)| *o))
    };
    let answer = |s: CudaOrdinal, d: CudaOrdinal| {
        facts.as_ref().and_then(|f| {
            f.answers
                .iter()
                .find(|(k, _)| *k == (s, d))
                .map(|(_, a)| *a)
        })
    };
    let mut pairs = Vec::new();
    for (i, a) in gpus.iter().enumerate() {
        for b in &gpus[i + 1..] {
            let cuda = match (ordinal(a.bdf), ordinal(b.bdf)) {
                (Some(x), Some(y)) => answer(x, y).zip(answer(y, x)).map(|(p, q)| [p, q]),
                _ => None,
            };
            let pf = PairFacts {
                a: a.bdf,
                b: b.bdf,
                nvlinks: nvlink.count_between(a.bdf, b.bdf),
                cuda,
            };
            pairs.push(decide::decide(a, b, &pf));
        }
    }
    let flags = decide::gpu_flags(&gpus, hypervisor.detected());
    let probe_gpus = gpus
        .into_iter()
        .map(|g| ProbeGpu {
            bdf: g.bdf,
            vendor: format!("{:#06x}", g.vendor),
            device: format!("{:#06x}", g.device),
            config_len: g.config_len,
            clique: g.capability.clique().map(|c| c.id()),
            capability: g.capability,
            bts: g.bts,
            pcie: g.pcie,
            cuda_ordinal: ordinal(g.bdf),
            nvlink: nvlink.gpus.iter().find(|l| l.bdf == g.bdf).cloned(),
        })
        .collect();
    ProbeReport {
        schema: PROBE_SCHEMA.into(),
        sysfs_root: sysfs_root.into(),
        hypervisor,
        cuda: cuda_status,
        nvml: nvlink.unavailable.clone(),
        gpus: probe_gpus,
        pairs,
        flags,
        enabled: Vec::new(),
        verify: Vec::new(),
    }
}
