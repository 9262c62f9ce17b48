//! The figures: one record per policy, load, VM size and seed (what
//! `--json` holds, so every share can be recomputed), and the table of
//! means and spreads over seeds.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::trees::Class;

/// One VM of a run, as the figures need it.
#[derive(Debug, Clone)]
pub struct VmResult {
    /// GPUs it asked for.
    pub gpus: u8,
    /// Worst GPU-pair class and GPU-to-NIC class when admitted.
    pub admitted: Option<(Class, Option<Class>)>,
    /// The alternative its GPUs and its NIC got ("switch", "root-complex", ..), when tiered.
    pub tiers: BTreeMap<String, String>,
    /// Milliseconds from creating the pod to seeing it bound or refused (None for the oracle).
    pub took_ms: Option<f64>,
    /// Scheduling attempts that hit the DRA filter's timeout.
    pub filter_timeouts: u32,
}

/// Counts per class, every class present (zeros included), in column order.
pub fn class_counts<'a>(classes: impl Iterator<Item = &'a Class>) -> BTreeMap<String, u32> {
    let mut m: BTreeMap<String, u32> = Class::ALL
        .iter()
        .map(|c| (c.name().to_string(), 0))
        .collect();
    for c in classes {
        *m.entry(c.name().to_string()).or_default() += 1;
    }
    m
}

/// One record of `--json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// `vp2p`, `nvidia`, `count` or `oracle`.
    pub policy: String,
    /// The load (share of the fleet's GPUs taken) this record was taken at.
    pub load: f64,
    /// VM size in GPUs.
    pub vm_gpus: u8,
    /// The seed of nodes and arrivals.
    pub seed: u64,
    /// Admitted VMs of this size by worst GPU-pair class: NV, PIX, PXB, PHB, NODE, SYS.
    pub classes: BTreeMap<String, u32>,
    /// Admitted VMs of this size that asked for a NIC, by worst GPU-to-NIC class.
    pub nic_classes: Option<BTreeMap<String, u32>>,
    /// VMs of this size no node was found for.
    pub rejected: u32,
    /// Admitted VMs of this size by the alternative their GPUs got (tiered claims).
    pub gpu_tiers: BTreeMap<String, u32>,
    /// The scheduler's time per pod of this size, create to bound or refused, median (ms).
    pub schedule_ms_p50: Option<f64>,
    /// The same, 99th percentile (ms).
    pub schedule_ms_p99: Option<f64>,
    /// Scheduling attempts of this size's pods that hit the DRA filter's 10 s timeout.
    pub filter_timeouts: u32,
}

/// The records of one run's VMs (in arrival order) for a load and seed.
pub fn records(policy: &str, load: f64, seed: u64, vms: &[VmResult]) -> Vec<Record> {
    [2u8, 4, 8]
        .into_iter()
        .map(|size| {
            let of: Vec<&VmResult> = vms.iter().filter(|v| v.gpus == size).collect();
            let admitted: Vec<&(Class, Option<Class>)> =
                of.iter().filter_map(|v| v.admitted.as_ref()).collect();
            let nic: Vec<&Class> = admitted.iter().filter_map(|(_, n)| n.as_ref()).collect();
            let mut gpu_tiers = BTreeMap::new();
            for v in of.iter().filter(|v| v.admitted.is_some()) {
                if let Some(t) = v.tiers.get("gpus") {
                    *gpu_tiers.entry(t.clone()).or_default() += 1;
                }
            }
            let mut times: Vec<f64> = of.iter().filter_map(|v| v.took_ms).collect();
            times.sort_by(f64::total_cmp);
            Record {
                policy: policy.to_string(),
                load,
                vm_gpus: size,
                seed,
                classes: class_counts(admitted.iter().map(|(c, _)| c)),
                nic_classes: (!nic.is_empty()).then(|| class_counts(nic.into_iter())),
                rejected: of.iter().filter(|v| v.admitted.is_none()).count() as u32,
                gpu_tiers,
                schedule_ms_p50: percentile(&times, 50.0),
                schedule_ms_p99: percentile(&times, 99.0),
                filter_timeouts: of.iter().map(|v| v.filter_timeouts).sum(),
            }
        })
        .collect()
}

/// The nearest-rank percentile of sorted `xs`.
pub fn percentile(xs: &[f64], p: f64) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * xs.len() as f64).ceil().max(1.0) as usize;
    Some(xs[rank.min(xs.len()) - 1])
}

/// Share of `r`'s admitted VMs whose class is one of `within`, in percent.
pub fn share(r: &Record, within: &[Class]) -> Option<f64> {
    let total: u32 = r.classes.values().sum();
    (total > 0).then(|| {
        let n: u32 = within
            .iter()
            .map(|c| r.classes.get(c.name()).copied().unwrap_or(0))
            .sum();
        100.0 * f64::from(n) / f64::from(total)
    })
}

/// Mean and standard deviation (population) of `xs`.
pub fn mean_sd(xs: &[f64]) -> Option<(f64, f64)> {
    if xs.is_empty() {
        return None;
    }
    let m = xs.iter().sum::<f64>() / xs.len() as f64;
    let v = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / xs.len() as f64;
    Some((m, v.sqrt()))
}

/// Classes as the goals group them.
pub const SWITCH_LOCAL: [Class; 3] = [Class::Nv, Class::Pix, Class::Pxb];
/// Below one root complex (or NVLink).
pub const ROOT_COMPLEX: [Class; 4] = [Class::Nv, Class::Pix, Class::Pxb, Class::Phb];
/// Within one NUMA node (or NVLink).
pub const ONE_NUMA: [Class; 5] = [Class::Nv, Class::Pix, Class::Pxb, Class::Phb, Class::Node];

/// Mean ± spread over seeds of a share, for (policy, load, size).
pub fn seed_share(
    records: &[Record],
    policy: &str,
    load: f64,
    size: u8,
    within: &[Class],
) -> Option<(f64, f64)> {
    let xs: Vec<f64> = records
        .iter()
        .filter(|r| r.policy == policy && (r.load - load).abs() < 1e-9 && r.vm_gpus == size)
        .filter_map(|r| share(r, within))
        .collect();
    mean_sd(&xs)
}

/// The table: per policy, load and size, each class's share of admitted VMs
/// (mean over seeds, ± standard deviation), rejections, NIC locality and the
/// scheduler's times.
pub fn table(records: &[Record], policies: &[&str], loads: &[f64]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<7} {:>4} {:>4} {:>6}  {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}  {:>9}  {:>9}  {:>7} {:>7}",
        "POLICY", "LOAD", "GPUS", "VMS", "NV%", "PIX%", "PXB%", "PHB%", "NODE%", "SYS%", "REJECTED", "NIC<=PHB%", "P50 ms", "P99 ms"
    );
    for &load in loads {
        for &policy in policies {
            for size in [2u8, 4, 8] {
                let rs: Vec<&Record> = records
                    .iter()
                    .filter(|r| {
                        r.policy == policy && (r.load - load).abs() < 1e-9 && r.vm_gpus == size
                    })
                    .collect();
                if rs.is_empty() {
                    continue;
                }
                let admitted: Vec<f64> = rs
                    .iter()
                    .map(|r| f64::from(r.classes.values().sum::<u32>()))
                    .collect();
                let mut line = format!(
                    "{:<7} {:>3.0}% {:>4} {:>6.1} ",
                    policy,
                    load * 100.0,
                    size,
                    mean_sd(&admitted).map(|m| m.0).unwrap_or(0.0)
                );
                for c in Class::ALL {
                    let xs: Vec<f64> = rs.iter().filter_map(|r| share(r, &[c])).collect();
                    let cell = match mean_sd(&xs) {
                        Some((m, sd)) => format!("{m:5.1}±{sd:<4.1}"),
                        None => "-".into(),
                    };
                    let _ = write!(line, " {cell:>11}");
                }
                let rej: Vec<f64> = rs.iter().map(|r| f64::from(r.rejected)).collect();
                let _ = write!(line, "  {:>9.1}", mean_sd(&rej).map(|m| m.0).unwrap_or(0.0));
                let nic: Vec<f64> = rs
                    .iter()
                    .filter_map(|r| r.nic_classes.as_ref())
                    .filter_map(|m| {
                        let t: u32 = m.values().sum();
                        (t > 0).then(|| {
                            let n: u32 = ROOT_COMPLEX
                                .iter()
                                .map(|c| m.get(c.name()).copied().unwrap_or(0))
                                .sum();
                            100.0 * f64::from(n) / f64::from(t)
                        })
                    })
                    .collect();
                let _ = write!(
                    line,
                    "  {:>9}",
                    mean_sd(&nic)
                        .map(|m| format!("{:.1}", m.0))
                        .unwrap_or_else(|| "-".into())
                );
                for p in [
                    rs.iter()
                        .filter_map(|r| r.schedule_ms_p50)
                        .collect::<Vec<_>>(),
                    rs.iter()
                        .filter_map(|r| r.schedule_ms_p99)
                        .collect::<Vec<_>>(),
                ] {
                    let _ = write!(
                        line,
                        " {:>7}",
                        mean_sd(&p)
                            .map(|m| format!("{:.0}", m.0))
                            .unwrap_or_else(|| "-".into())
                    );
                }
                let _ = writeln!(out, "{}", line.trim_end());
            }
        }
    }
    out
}

/// The goals' shares per load and policy: 2-GPU VMs on a switch-local pair
/// (NV, PIX, PXB), 4-GPU VMs below one root complex (NV .. PHB) and within
/// one NUMA node (NV .. NODE), mean ± sd over seeds.
pub fn goals(records: &[Record], policies: &[&str], loads: &[f64]) -> String {
    let mut out = String::new();
    let groups: [(u8, &str, &[Class]); 3] = [
        (
            2,
            "2-GPU on a switch-local pair (NV, PIX, PXB)",
            &SWITCH_LOCAL,
        ),
        (4, "4-GPU below one root complex (NV .. PHB)", &ROOT_COMPLEX),
        (4, "4-GPU within one NUMA node (NV .. NODE)", &ONE_NUMA),
    ];
    for (size, what, within) in groups {
        let _ = writeln!(out, "{what}, % of admitted:");
        for &load in loads {
            let cells: Vec<String> = policies
                .iter()
                .filter_map(|p| {
                    seed_share(records, p, load, size, within)
                        .map(|(m, sd)| format!("{p} {m:.1}±{sd:.1}"))
                })
                .collect();
            let _ = writeln!(out, "  {:>3.0}%: {}", load * 100.0, cells.join("  "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles_of_one_to_one_hundred() {
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&xs, 50.0), Some(50.0));
        assert_eq!(percentile(&xs, 99.0), Some(99.0));
        assert_eq!(percentile(&xs[..1], 99.0), Some(1.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn records_count_every_class_and_the_rejected() {
        let vm = |gpus, admitted| VmResult {
            gpus,
            admitted,
            tiers: BTreeMap::new(),
            took_ms: Some(10.0),
            filter_timeouts: 0,
        };
        let vms = [
            vm(2, Some((Class::Pix, None))),
            vm(2, Some((Class::Sys, None))),
            vm(2, None),
            vm(4, Some((Class::Phb, Some(Class::Pix)))),
        ];
        let rs = records("vp2p", 0.5, 1, &vms);
        assert_eq!(rs[0].classes["PIX"], 1);
        assert_eq!(rs[0].classes["SYS"], 1);
        assert_eq!(rs[0].classes["NV"], 0);
        assert_eq!(rs[0].rejected, 1);
        assert_eq!(share(&rs[0], &SWITCH_LOCAL), Some(50.0));
        assert_eq!(rs[1].nic_classes.as_ref().map(|m| m["PIX"]), Some(1));
        assert_eq!(rs[2].classes.values().sum::<u32>(), 0);
    }
}
