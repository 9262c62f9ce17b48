//! The figures of a run's counts ([`RunCount`]): the table of counts per
//! regime, policy and VM size (means over seeds, the spread beside them and
//! a share only next to its count), the runs' stranded GPUs and GPU-hours,
//! and the goals checked seed by seed.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::tally::{OptimumRecord, RunCount};
use super::trees::Class;

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

/// The nearest-rank percentile of sorted `xs`.
pub fn percentile(xs: &[f64], p: f64) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * xs.len() as f64).ceil().max(1.0) as usize;
    Some(xs[rank.min(xs.len()) - 1])
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

fn cell(xs: &[f64]) -> String {
    match mean_sd(xs) {
        Some((m, sd)) if sd >= 0.05 => format!("{m:.1}±{sd:.1}"),
        Some((m, _)) => format!("{m:.1}"),
        None => "-".into(),
    }
}

/// The regimes of `runs` in the order they first appear.
fn regimes(runs: &[RunCount]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in runs {
        if !out.contains(&r.regime) {
            out.push(r.regime.clone());
        }
    }
    out
}

/// The runs of each regime (in order of appearance) and policy (in
/// `policies` order) that has any.
fn groups<'a, 'p>(
    runs: &'a [RunCount],
    policies: &[&'p str],
) -> Vec<(String, &'p str, Vec<&'a RunCount>)> {
    let mut out = Vec::new();
    for regime in regimes(runs) {
        for &policy in policies {
            let rs: Vec<&RunCount> = runs
                .iter()
                .filter(|r| r.regime == regime && r.policy == policy)
                .collect();
            if !rs.is_empty() {
                out.push((regime.clone(), policy, rs));
            }
        }
    }
    out
}

/// The table: per regime, policy and VM size the VMs arrived, placed, well
/// placed (its share of the arrived beside it), refused, and placed by
/// worst class; the NIC near its GPUs (PHB or nearer) for sizes that ask
/// one; the scheduler's p50 and p99. Means over seeds (± sd where it is not 0).
pub fn table(runs: &[RunCount], policies: &[&str]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<10} {:<13} {:>4} {:>8} {:>10} {:>17} {:>9}  {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}  {:>8}  {:>6} {:>6}",
        "REGIME", "POLICY", "GPUS", "ARRIVED", "PLACED", "WELL (of arrived)", "REFUSED",
        "NV", "PIX", "PXB", "PHB", "NODE", "SYS", "NIC<=PHB", "P50ms", "P99ms"
    );
    for (regime, policy, rs) in groups(runs, policies) {
        for i in 0..rs[0].sizes.len() {
            let of =
                |f: &dyn Fn(&RunCount) -> f64| -> Vec<f64> { rs.iter().map(|r| f(r)).collect() };
            let arrived = of(&|r| f64::from(r.sizes[i].arrived));
            let placed = of(&|r| f64::from(r.sizes[i].placed));
            let well = of(&|r| f64::from(r.sizes[i].well_placed));
            let share = mean_sd(&well)
                .zip(mean_sd(&arrived))
                .filter(|(_, a)| a.0 > 0.0)
                .map(|(w, a)| format!(" ({:.0}%)", 100.0 * w.0 / a.0))
                .unwrap_or_default();
            let mut line = format!(
                "{:<10} {:<13} {:>4} {:>8} {:>10} {:>17} {:>9} ",
                regime,
                policy,
                rs[0].sizes[i].vm_gpus,
                cell(&arrived),
                cell(&placed),
                format!("{}{share}", cell(&well)),
                cell(&of(&|r| f64::from(r.sizes[i].refused))),
            );
            for c in Class::ALL {
                let xs: Vec<f64> = rs
                    .iter()
                    .filter_map(|r| r.sizes[i].by_class.as_ref())
                    .map(|m| f64::from(m.get(c.name()).copied().unwrap_or(0)))
                    .collect();
                let _ = write!(line, " {:>7}", cell(&xs));
            }
            let nic: Vec<f64> = rs
                .iter()
                .filter_map(|r| r.sizes[i].nic_classes.as_ref())
                .map(|m| {
                    [Class::Nv, Class::Pix, Class::Pxb, Class::Phb]
                        .iter()
                        .map(|c| f64::from(m.get(c.name()).copied().unwrap_or(0)))
                        .sum()
                })
                .collect();
            let _ = write!(line, "  {:>8}", cell(&nic));
            for p in [
                of(&|r| r.sizes[i].schedule_ms_p50.unwrap_or(f64::NAN)),
                of(&|r| r.sizes[i].schedule_ms_p99.unwrap_or(f64::NAN)),
            ] {
                let p: Vec<f64> = p.into_iter().filter(|x| !x.is_nan()).collect();
                let _ = write!(
                    line,
                    " {:>6}",
                    mean_sd(&p)
                        .map(|m| format!("{:.0}", m.0))
                        .unwrap_or_else(|| "-".into())
                );
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
    }
    out
}

/// Per regime and policy: GPUs stranded, and in churn the GPU-hours served
/// of those asked; means over seeds.
pub fn runs(runs: &[RunCount], policies: &[&str]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<10} {:<13} {:>10} {:>14} {:>14} {:>8}",
        "REGIME", "POLICY", "STRANDED", "GPU-H SERVED", "GPU-H ASKED", "SERVED%"
    );
    for (regime, policy, rs) in groups(runs, policies) {
        let stranded: Vec<f64> = rs.iter().filter_map(|r| r.stranded_gpus).collect();
        let served: Vec<f64> = rs.iter().filter_map(|r| r.gpu_hours_served).collect();
        let asked: Vec<f64> = rs.iter().filter_map(|r| r.gpu_hours_asked).collect();
        let pct = mean_sd(&served)
            .zip(mean_sd(&asked))
            .filter(|(_, a)| a.0 > 0.0)
            .map(|(s, a)| format!("{:.1}", 100.0 * s.0 / a.0))
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "{:<10} {:<13} {:>10} {:>14} {:>14} {:>8}",
            regime,
            policy,
            cell(&stranded),
            cell(&served),
            cell(&asked),
            pct
        );
    }

    out
}

/// One goal's verdict on the counts, seed by seed.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// What the goal says.
    pub goal: String,
    /// The regime it was checked in.
    pub regime: String,
    /// Met on every seed.
    pub met: bool,
    /// The figures behind it, per seed.
    pub detail: String,
}

/// "seed 1: 3 vs 4, seed 2: ..." of (seed, vp2p's count, the other's).
fn seed_by_seed(per: &[(u64, u32, u32)]) -> String {
    per.iter()
        .map(|(s, v, o)| format!("seed {s}: {v} vs {o}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn run_of<'a>(runs: &'a [RunCount], policy: &str, regime: &str, seed: u64) -> Option<&'a RunCount> {
    runs.iter()
        .find(|r| r.policy == policy && r.regime == regime && r.seed == seed)
}

/// The goals, checked on every seed of every regime that has the
/// policies they compare: refusals no more than counting's (one VM of
/// slack a seed), 4-GPU VMs within one NUMA node and 2-GPU VMs on a
/// switch-local pair at least NVIDIA's, well-placed VMs within 5 % of the
/// optimum's, every size's p99 under 500 ms.
pub fn goals(runs: &[RunCount]) -> Vec<Verdict> {
    let mut out = Vec::new();
    let seeds: Vec<u64> = {
        let mut s: Vec<u64> = runs.iter().map(|r| r.seed).collect();
        s.sort_unstable();
        s.dedup();
        s
    };
    for regime in regimes(runs) {
        let pairs = |a: &str, b: &str| -> Vec<(u64, &RunCount, &RunCount)> {
            seeds
                .iter()
                .filter_map(|&s| {
                    Some((
                        s,
                        run_of(runs, a, &regime, s)?,
                        run_of(runs, b, &regime, s)?,
                    ))
                })
                .collect()
        };
        let vc = pairs("vp2p", "count");
        if !vc.is_empty() {
            for i in 0..vc[0].1.sizes.len() {
                let size = vc[0].1.sizes[i].vm_gpus;
                let per: Vec<(u64, u32, u32)> = vc
                    .iter()
                    .map(|(s, v, c)| (*s, v.sizes[i].refused, c.sizes[i].refused))
                    .collect();
                out.push(Verdict {
                    goal: format!("{size}-GPU VMs refused: vp2p at most counting's + 1"),
                    regime: regime.clone(),
                    met: per.iter().all(|(_, v, c)| *v <= c + 1),
                    detail: seed_by_seed(&per),
                });
            }
        }
        let vn = pairs("vp2p", "nvidia");
        for (size, what) in [(4u8, "within one NUMA node"), (2, "on a switch-local pair")] {
            let per: Vec<(u64, u32, u32)> = vn
                .iter()
                .filter_map(|(s, v, n)| {
                    let i = v.sizes.iter().position(|x| x.vm_gpus == size)?;
                    Some((*s, v.sizes[i].well_placed, n.sizes[i].well_placed))
                })
                .collect();
            if per.is_empty() {
                continue;
            }
            out.push(Verdict {
                goal: format!("{size}-GPU VMs {what}: vp2p at least NVIDIA's"),
                regime: regime.clone(),
                met: per.iter().all(|(_, v, n)| v >= n),
                detail: seed_by_seed(&per),
            });
        }
        let vo = pairs("vp2p", "optimum-well");
        if !vo.is_empty() {
            let well = |r: &RunCount| r.sizes.iter().map(|s| s.well_placed).sum::<u32>();
            out.push(Verdict {
                goal: "well-placed VMs: vp2p within 5 % of the optimum".into(),
                regime: regime.clone(),
                met: vo
                    .iter()
                    .all(|(_, v, o)| f64::from(well(v)) >= 0.95 * f64::from(well(o))),
                detail: vo
                    .iter()
                    .map(|(s, v, o)| {
                        format!(
                            "seed {s}: {} of {} ({:.1} %)",
                            well(v),
                            well(o),
                            100.0 * f64::from(well(v)) / f64::from(well(o).max(1))
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        let p99: Vec<(u64, f64)> = seeds
            .iter()
            .filter_map(|&s| {
                let v = run_of(runs, "vp2p", &regime, s)?;
                let worst = v
                    .sizes
                    .iter()
                    .filter_map(|x| x.schedule_ms_p99)
                    .fold(0.0, f64::max);
                Some((s, worst))
            })
            .collect();
        if !p99.is_empty() {
            out.push(Verdict {
                goal: "vp2p's scheduling time per pod, p99 of every size, under 500 ms".into(),
                regime: regime.clone(),
                met: p99.iter().all(|(_, p)| *p < 500.0),
                detail: p99
                    .iter()
                    .map(|(s, p)| format!("seed {s}: {p:.0} ms"))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
    }
    out
}

/// Per seed and regime, the optimum (fill, exact) or the bound (churn) of
/// VMs placed and of VMs well placed, and vp2p's counts against them.
pub fn bounds_text(runs: &[RunCount], optima: &[OptimumRecord]) -> String {
    let mut out = String::new();
    for o in optima {
        let what = if o.objective == "well" {
            "well placed"
        } else {
            "placed"
        };
        let every = o.scope.as_deref() == Some("every");
        let best = match o.count {
            Some(c) if o.exact == Some(false) => {
                format!("best packing found {c}, LP bound {:.1}", o.bound)
            }
            Some(c) => format!("optimum {c} (LP bound {:.1})", o.bound),
            None => format!(
                "upper bound {:.1} (migration allowed, {} instants{})",
                o.bound,
                o.instants.unwrap_or(0),
                if every {
                    ", every arrival, warm-up included"
                } else {
                    ""
                }
            ),
        };
        let mut line = format!("[{}] seed {}: VMs {what}: {best}", o.regime, o.seed);
        if let Some(v) = run_of(runs, "vp2p", &o.regime, o.seed) {
            let well = o.objective == "well";
            let pick = |placed: u32, well_placed: u32| if well { well_placed } else { placed };
            let got: Option<u32> = if every {
                v.every_arrival.map(|e| pick(e.placed, e.well_placed))
            } else {
                Some(v.sizes.iter().map(|s| pick(s.placed, s.well_placed)).sum())
            };
            // A packing not proven the most is no reference; its bound is.
            let (reference, of) = match o.count {
                Some(c) if o.exact != Some(false) => (f64::from(c), "it"),
                _ => (o.bound, "the bound"),
            };
            if let Some(got) = got {
                let _ = write!(
                    line,
                    "; vp2p {got}, {:.1} % of {of}",
                    100.0 * f64::from(got) / reference.max(1.0),
                );
            }
        }
        let _ = writeln!(out, "{line}");
    }
    out
}

/// The goals as text, one line each.
pub fn goals_text(runs: &[RunCount]) -> String {
    let mut out = String::new();
    for v in goals(runs) {
        let _ = writeln!(
            out,
            "{} [{}] {}: {}",
            if v.met { "met    " } else { "NOT met" },
            v.regime,
            v.goal,
            v.detail
        );
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
}
