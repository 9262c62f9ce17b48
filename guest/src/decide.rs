//! Per GPU pair: enable peer access or not, why, and every inconsistency
//! between the capability, NVLink, the hypervisor check and what CUDA says.
//! Pure: the probe gathers the facts, this decides.

use serde::{Deserialize, Serialize};

pub use p2p_report::probe::{CudaPeer, Flag, FlagKind, PeerDecision, Verdict};

use crate::probe::sysfs::{CapabilityState, GuestGpu};
use p2p_topology::Bdf;

/// Facts about one unordered pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PairFacts {
    /// One GPU of the pair (the lower address, as the probe orders them).
    pub a: Bdf,
    /// The other GPU of the pair.
    pub b: Bdf,
    /// NVLinks between them (NVML), if any.
    pub nvlinks: Option<u32>,
    /// CUDA's answers a->b and b->a, when CUDA is available.
    pub cuda: Option<[CudaPeer; 2]>,
}

fn flag(kind: FlagKind, message: String) -> Flag {
    Flag { kind, message }
}

/// Flags about single GPUs: truncated reads, invalid capabilities, and a
/// capability the driver will ignore because no hypervisor is visible.
pub fn gpu_flags(gpus: &[GuestGpu], hypervisor_detected: bool) -> Vec<Flag> {
    let mut out = Vec::new();
    for g in gpus {
        match &g.capability {
            CapabilityState::Unreadable { why } => out.push(flag(
                FlagKind::ConfigTruncated,
                format!("{}: capability not visible: {why}", g.bdf),
            )),
            CapabilityState::Invalid { offset, why } => out.push(flag(
                FlagKind::InvalidCapability,
                format!("{}: capability at {offset:#04x} would be rejected by the driver: {why}", g.bdf),
            )),
            CapabilityState::Present { clique, .. } if !hypervisor_detected => out.push(flag(
                FlagKind::HypervisorHidden,
                format!(
                    "{}: clique {clique} is present but CPUID shows no hypervisor, so the NVIDIA driver ignores it",
                    g.bdf
                ),
            )),
            _ => {}
        }
        if g.pcie.as_ref().is_some_and(|p| !p.relaxed_ordering) {
            out.push(flag(
                FlagKind::RelaxedOrderingOff,
                format!(
                    "{}: Enable Relaxed Ordering (Device Control bit 4) reads off in the VM: strictly ordered writes cost P2P and GPUDirect RDMA bandwidth with ACS and ATS on (NVIDIA/nccl#1205); set it on the host (setpci -s BDF CAP_EXP+8.w=0010:0010) and NCCL_IB_PCI_RELAXED_ORDERING=1",
                    g.bdf
                ),
            ));
        }
    }
    out
}

/// Decides one pair from the two GPUs' capabilities and the pair's facts.
pub fn decide(a: &GuestGpu, b: &GuestGpu, facts: &PairFacts) -> PeerDecision {
    let mut reasons = Vec::new();
    let mut flags = Vec::new();
    let (ca, cb) = (a.capability.clique(), b.capability.clique());
    let verdict = match (ca, cb, facts.nvlinks) {
        (Some(x), Some(y), nv) if x == y => {
            reasons.push(format!("both in clique {x}"));
            if let Some(n) = nv {
                reasons.push(format!("NV{n}"));
            }
            Verdict::Enable
        }
        (Some(x), Some(y), Some(n)) => {
            reasons.push(format!("NV{n}: NVLink peer access needs no capability"));
            flags.push(flag(
                FlagKind::NvLinkAcrossCliques,
                format!("{} (clique {x}) and {} (clique {y}) share NVLink but not a clique; NCCL may treat them apart", a.bdf, b.bdf),
            ));
            Verdict::Enable
        }
        (Some(x), Some(y), None) => {
            reasons.push(format!("cliques differ ({x} vs {y})"));
            Verdict::Disable
        }
        (_, _, Some(n)) => {
            reasons.push(format!("NV{n}: NVLink peer access needs no capability"));
            Verdict::Enable
        }
        (None, None, None) => {
            reasons.push("no capability and no NVLink: nothing says whether PCIe P2P works".into());
            Verdict::Unknown
        }
        (Some(_), None, None) | (None, Some(_), None) => {
            let (has, lacks) = if ca.is_some() { (a, b) } else { (b, a) };
            reasons.push(format!("capability on {} only", has.bdf));
            flags.push(flag(
                FlagKind::CapabilityOnOneSide,
                format!(
                    "{} carries the capability but {} does not ({})",
                    has.bdf,
                    lacks.bdf,
                    describe(&lacks.capability)
                ),
            ));
            Verdict::Unknown
        }
    };
    if let Some([ab, ba]) = facts.cuda {
        let both = ab.can_access && ba.can_access;
        if ab.can_access != ba.can_access {
            flags.push(flag(
                FlagKind::AsymmetricCuda,
                format!(
                    "CUDA says {}->{} {} but {}->{} {}",
                    a.bdf,
                    b.bdf,
                    yes(ab.can_access),
                    b.bdf,
                    a.bdf,
                    yes(ba.can_access)
                ),
            ));
        }
        match verdict {
            Verdict::Enable if !both => flags.push(flag(
                FlagKind::CudaRefusesAllowedPair,
                format!(
                    "{} and {} should do P2P ({}) but cuDeviceCanAccessPeer says no: hypervisor hidden, driver too old, or the capability not reaching the driver",
                    a.bdf,
                    b.bdf,
                    reasons.join("; ")
                ),
            )),
            Verdict::Disable if ab.can_access || ba.can_access => flags.push(flag(
                FlagKind::CudaAllowsAcrossCliques,
                format!("{} and {} are in different cliques but CUDA allows peer access", a.bdf, b.bdf),
            )),
            _ => {}
        }
    }
    PeerDecision {
        a: a.bdf,
        b: b.bdf,
        verdict,
        reasons,
        nvlinks: facts.nvlinks,
        cuda: facts.cuda,
        flags,
    }
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn describe(c: &CapabilityState) -> String {
    match c {
        CapabilityState::Present { clique, .. } => format!("clique {clique}"),
        CapabilityState::Absent => "no capability".into(),
        CapabilityState::Invalid { why, .. } => format!("invalid: {why}"),
        CapabilityState::Unreadable { why } => format!("unreadable: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p2p_topology::Clique;

    fn gpu(addr: &str, cap: CapabilityState) -> GuestGpu {
        GuestGpu {
            bdf: addr.parse().unwrap(),
            vendor: 0x10de,
            device: 0x2335,
            class: 0x030200,
            config_len: 4096,
            capability: cap,
            bts: None,
            pcie: None,
        }
    }

    fn clique(n: u8) -> CapabilityState {
        CapabilityState::Present {
            offset: 0xc8,
            clique: Clique::new(n).unwrap(),
        }
    }

    fn facts(
        a: &GuestGpu,
        b: &GuestGpu,
        nvlinks: Option<u32>,
        cuda: Option<(bool, bool)>,
    ) -> PairFacts {
        let peer = |can| CudaPeer {
            can_access: can,
            performance_rank: 0,
            native_atomics: can,
        };
        PairFacts {
            a: a.bdf,
            b: b.bdf,
            nvlinks,
            cuda: cuda.map(|(x, y)| [peer(x), peer(y)]),
        }
    }

    fn kinds(d: &PeerDecision) -> Vec<FlagKind> {
        d.flags.iter().map(|f| f.kind).collect()
    }

    #[test]
    fn the_design_rules() {
        let (a, b) = (
            gpu("0000:00:06.0", clique(0)),
            gpu("0000:00:07.0", clique(0)),
        );
        assert_eq!(
            decide(&a, &b, &facts(&a, &b, None, None)).verdict,
            Verdict::Enable
        );
        let c = gpu("0000:00:08.0", clique(1));
        let d = decide(&a, &c, &facts(&a, &c, None, None));
        assert_eq!(d.verdict, Verdict::Disable);
        assert_eq!(d.reasons, ["cliques differ (0 vs 1)"]);
        let (x, y) = (
            gpu("0000:00:06.0", CapabilityState::Absent),
            gpu("0000:00:07.0", CapabilityState::Absent),
        );
        assert_eq!(
            decide(&x, &y, &facts(&x, &y, None, None)).verdict,
            Verdict::Unknown
        );
        let d = decide(&x, &y, &facts(&x, &y, Some(18), None));
        assert_eq!(d.verdict, Verdict::Enable);
        assert_eq!(d.reasons, ["NV18: NVLink peer access needs no capability"]);
        assert!(d.flags.is_empty());
    }

    #[test]
    fn recorded_cuda_answers_are_cross_checked() {
        // The real 2x H200 VM: no capability, NV18, CUDA says yes both ways.
        let (x, y) = (
            gpu("0000:00:06.0", CapabilityState::Absent),
            gpu("0000:00:07.0", CapabilityState::Absent),
        );
        assert!(decide(&x, &y, &facts(&x, &y, Some(18), Some((true, true))))
            .flags
            .is_empty());
        // Capability says yes, CUDA no.
        let (a, b) = (
            gpu("0000:00:06.0", clique(2)),
            gpu("0000:00:07.0", clique(2)),
        );
        assert_eq!(
            kinds(&decide(&a, &b, &facts(&a, &b, None, Some((false, false))))),
            [FlagKind::CudaRefusesAllowedPair]
        );
        // CUDA yes across cliques, and asymmetric.
        let c = gpu("0000:00:08.0", clique(3));
        assert_eq!(
            kinds(&decide(&a, &c, &facts(&a, &c, None, Some((true, false))))),
            [FlagKind::AsymmetricCuda, FlagKind::CudaAllowsAcrossCliques]
        );
        // NVLink across cliques is allowed but flagged.
        let d = decide(&a, &c, &facts(&a, &c, Some(4), Some((true, true))));
        assert_eq!(d.verdict, Verdict::Enable);
        assert_eq!(kinds(&d), [FlagKind::NvLinkAcrossCliques]);
    }

    #[test]
    fn one_sided_and_unreadable_capabilities_are_flagged() {
        let a = gpu("0000:00:06.0", clique(0));
        let b = gpu(
            "0000:00:07.0",
            CapabilityState::Unreadable {
                why: "64 bytes".into(),
            },
        );
        let d = decide(&a, &b, &facts(&a, &b, None, None));
        assert_eq!(d.verdict, Verdict::Unknown);
        assert_eq!(kinds(&d), [FlagKind::CapabilityOnOneSide]);
        assert!(d.flags[0].message.contains("unreadable: 64 bytes"));
        let flags = gpu_flags(&[a.clone(), b.clone()], false);
        let k: Vec<FlagKind> = flags.iter().map(|f| f.kind).collect();
        assert_eq!(k, [FlagKind::HypervisorHidden, FlagKind::ConfigTruncated]);
        assert_eq!(gpu_flags(&[a], true).len(), 0);
    }

    #[test]
    fn relaxed_ordering_off_in_the_guest_is_flagged() {
        // Device Control 0x0000 (QEMU's NVMe) has bit 4 clear; 0x0010 sets it.
        let view = |dc: u16| {
            let mut raw = vec![0u8; 256];
            raw[0..2].copy_from_slice(&0x10deu16.to_le_bytes());
            raw[6] = 0x10; // Status bit 4: capability list present
            raw[0x34] = 0x60; // PCI Express capability at 0x60, the H200's place
            raw[0x60] = 0x10;
            raw[0x68..0x6a].copy_from_slice(&dc.to_le_bytes());
            crate::probe::pcie::pcie_view(&raw)
        };
        let mut off = gpu("0000:00:06.0", CapabilityState::Absent);
        off.pcie = view(0x0000);
        let mut on = gpu("0000:00:07.0", CapabilityState::Absent);
        on.pcie = view(0x0010);
        let flags = gpu_flags(&[off, on], true);
        assert_eq!(flags.len(), 1, "{flags:?}");
        assert_eq!(flags[0].kind, FlagKind::RelaxedOrderingOff);
        assert!(flags[0].message.starts_with("0000:00:06.0"));
    }
}
