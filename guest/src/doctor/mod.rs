//! `p2p-guest doctor`: one answer to "is peer-to-peer on here, will NCCL use
//! it, and is it as fast as bare metal?". It sets the facts the other
//! commands gather (probe's capability, cliques and driver answers, the
//! verify core's data check, explain's NCCL transport, a short bench) beside
//! the expected bare-metal figure of each pair's link
//! ([`crate::doctor::bare_metal`]) or a baseline bench of the user's own, and
//! gives a verdict per pair and for the VM: OK, SLOW (with the likely causes
//! of its route, [`p2p_topology::pcie_cost::route_cost`]) or BROKEN, and the
//! one next step.
//!
//! [`diagnose`] is pure: the live run ([`live`]) and recorded reports (the
//! tests, `--recorded-*`) feed it the same [`Inputs`].

pub mod bare_metal;
pub mod live;
mod pair;

use p2p_report::bench::{BenchReport, Direction, Mode};
use p2p_topology::Bdf;

pub use p2p_report::doctor::{
    DoctorGpu, DoctorPair, DoctorReport, ExpectedFigure, Measured, NotChecked, SelfCheck, Verdict,
    DOCTOR_SCHEMA,
};

use crate::bench::host_plan::HostRoutes;
use crate::nccl_topo::explain::ExplainReport;
use crate::probe::report::ProbeReport;

pub use pair::{SLOW_RATIO, SLOW_RATIO_LATENCY};

/// Exit status when there is no GPU to check (3), apart from the verdicts'.
pub const NOTHING_CHECKED_EXIT: i32 = 3;

/// What doctor judges from: each part recorded or gathered live.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The probe, with `verify` filled where data was checked.
    pub probe: ProbeReport,
    /// The short bench; None when CUDA is unavailable.
    pub bench: Option<BenchReport>,
    /// Why there is no bench (no CUDA, a failed run).
    pub bench_missing: Option<String>,
    /// NCCL's verdicts; None when explain could not run.
    pub explain: Option<ExplainReport>,
    /// Why there is no explain report.
    pub explain_missing: Option<String>,
    /// The host plan's routes (`--host-plan`).
    pub host_routes: Option<HostRoutes>,
    /// A bench of the user's own (`--baseline FILE`): its file and report.
    pub baseline: Option<(String, BenchReport)>,
    /// Where each part came from (`live`, or a file), for the report.
    pub sources: Vec<String>,
}

/// The bench's index of the GPU at `bdf`.
fn bench_index(bench: &BenchReport, bdf: Bdf) -> Option<usize> {
    bench
        .gpus
        .iter()
        .position(|g| g.bdf.parse::<Bdf>().ok() == Some(bdf))
}

/// The median GB/s (or µs for ping-pong) of one measurement, and whether it
/// was verified; the bench's headline size for copies.
fn figure(
    bench: &BenchReport,
    mode: Mode,
    direction: Direction,
    (s, d): (usize, usize),
    bytes: Option<u64>,
) -> Option<(f64, bool)> {
    bench
        .results
        .iter()
        .find(|m| {
            m.mode == mode
                && m.direction == direction
                && m.src.map(|g| g.0) == Some(s)
                && m.dst.map(|g| g.0) == Some(d)
                && bytes.is_none_or(|b| m.bytes == b)
        })
        .map(|m| {
            let v = if mode == Mode::Pingpong {
                m.latency_us.median
            } else {
                m.gbps.median
            };
            (v, m.verification.ok())
        })
}

/// Judges every GPU and pair and the VM.
pub fn diagnose(inputs: &Inputs) -> DoctorReport {
    let probe = &inputs.probe;
    let cuda = probe.cuda.available;
    let mut checked = vec!["the P2P clique capability of every GPU (config space)".to_string()];
    let mut not_checked = Vec::new();
    let driver_needed = |what: &str| NotChecked {
        what: what.into(),
        needs: format!(
            "the NVIDIA driver (CUDA: {})",
            probe.cuda.why.as_deref().unwrap_or("unavailable")
        ),
    };
    if cuda {
        checked.push("the driver's P2P answer per pair (cuDeviceCanAccessPeer)".into());
    } else {
        not_checked.push(driver_needed("the driver's P2P answer per pair"));
        not_checked.push(driver_needed("data moved between GPUs"));
        not_checked.push(driver_needed("bandwidth and latency against bare metal"));
    }
    if probe.nvml.is_none() {
        checked.push("NVLink (NVML)".into());
    } else {
        not_checked.push(NotChecked {
            what: "NVLink".into(),
            needs: format!("NVML: {}", probe.nvml.as_deref().unwrap_or("")),
        });
    }
    if !probe.verify.is_empty() {
        checked.push(format!(
            "data moved both ways, byte for byte ({} checks)",
            probe.verify.len()
        ));
    }
    match (&inputs.explain, &inputs.explain_missing) {
        (Some(_), _) => {
            checked.push("NCCL's transport per pair (nccl-topo explain's rules)".into())
        }
        (None, why) => not_checked.push(NotChecked {
            what: "NCCL's transport per pair".into(),
            needs: why.clone().unwrap_or_else(|| "an explain report".into()),
        }),
    }
    match (&inputs.bench, &inputs.bench_missing) {
        (Some(b), _) => checked.push(format!(
            "a verified copy-engine bench at {} ({} samples)",
            p2p_topology::ByteSize(b.method.headline_bytes),
            b.method.samples
        )),
        (None, Some(why)) if cuda => not_checked.push(NotChecked {
            what: "bandwidth and latency against bare metal".into(),
            needs: why.clone(),
        }),
        _ => {}
    }
    let gpus: Vec<DoctorGpu> = probe.gpus.iter().map(|g| pair::gpu(inputs, g)).collect();
    let pairs: Vec<DoctorPair> = probe.pairs.iter().map(|d| pair::judge(inputs, d)).collect();
    let gpu_broken = gpus.iter().find(|g| {
        g.self_check
            .as_ref()
            .is_some_and(|s| s.data_ok < s.data_checks)
    });
    let worst = pairs.iter().max_by_key(|p| p.verdict);
    let verdict = match (gpu_broken, worst) {
        (Some(_), _) => Verdict::Broken,
        (None, Some(p)) => p.verdict,
        (None, None) => Verdict::Ok,
    };
    let (reason, next_step) = summary(inputs, &gpus, &pairs, gpu_broken, verdict);
    DoctorReport {
        schema: DOCTOR_SCHEMA.into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        host: inputs
            .bench
            .as_ref()
            .map_or_else(|| probe.sysfs_root.clone(), |b| b.machine.hostname.clone()),
        verdict,
        // No GPU: nothing was checked, apart from the verdicts' statuses.
        exit_code: if gpus.is_empty() {
            NOTHING_CHECKED_EXIT
        } else {
            verdict.exit_code()
        },
        reason,
        next_step,
        sources: inputs.sources.clone(),
        checked,
        not_checked,
        gpus,
        pairs,
        gpu_flags: probe.flags.iter().map(|f| f.message.clone()).collect(),
    }
}

/// The VM's reason and its one next step.
fn summary(
    inputs: &Inputs,
    gpus: &[DoctorGpu],
    pairs: &[DoctorPair],
    gpu_broken: Option<&DoctorGpu>,
    verdict: Verdict,
) -> (String, String) {
    let cuda = inputs.probe.cuda.available;
    if gpus.is_empty() {
        return (
            format!(
                "no NVIDIA GPU under {}/bus/pci/devices: nothing to check",
                inputs.probe.sysfs_root
            ),
            "check that the VM has its GPUs passed through (lspci -d 10de:)".into(),
        );
    }
    if let Some(g) = gpu_broken {
        return (
            format!("{} loses data copying within itself", g.bdf),
            format!("the GPU itself is faulty or its driver broken: send `p2p-guest probe --verify --json` to the host operator and stop using {}", g.bdf),
        );
    }
    if pairs.is_empty() {
        let own = gpus[0].self_check.as_ref();
        let how = match own {
            Some(s) => format!(
                "{} of {} data checks within the GPU arrived whole{}",
                s.data_ok,
                s.data_checks,
                s.local_ce_gbps
                    .map_or(String::new(), |g| format!(", local copy {g:.1} GB/s"))
            ),
            None if cuda => "the GPU was not exercised".into(),
            None => "without the driver, only its config space was read".into(),
        };
        return (
            format!(
                "one GPU ({}): no pair, so no peer-to-peer here; {how}",
                gpus[0].bdf
            ),
            if cuda {
                "nothing to do: give the VM a second GPU for peer-to-peer".into()
            } else {
                "install the NVIDIA driver and run doctor again to check the GPU".into()
            },
        );
    }
    let n = pairs.iter().filter(|p| p.verdict == verdict).count();
    let Some(p) = pairs.iter().find(|p| p.verdict == verdict) else {
        return (String::new(), String::new());
    };
    let first_reason = p.reasons.first().cloned().unwrap_or_default();
    match verdict {
        Verdict::Ok => {
            let step = if !cuda {
                "install the NVIDIA driver and run doctor again: data and bandwidth need it".into()
            } else if inputs.bench.is_none() {
                format!(
                    "see why the bench did not run ({}): `p2p-guest bench --modes ce,pingpong`",
                    inputs.bench_missing.as_deref().unwrap_or("no bench")
                )
            } else {
                "nothing to do".into()
            };
            (
                format!(
                    "all {} pair(s) OK{}",
                    pairs.len(),
                    if cuda { "" } else { " as far as checked without the driver" }
                ),
                step,
            )
        }
        Verdict::Slow => (
            format!("{n} of {} pair(s) SLOW; {}-{}: {first_reason}", pairs.len(), p.a, p.b),
            match (p.ask_host.first(), p.likely_causes.first()) {
                (Some(a), _) => format!("ask the host operator: {a}"),
                (None, Some(c)) => format!("see to the likely cause: {c}"),
                (None, None) => "rerun with --host-plan FILE (`p2p-host plan --json` on the host) to name the host route".into(),
            },
        ),
        Verdict::Broken => (
            format!("{n} of {} pair(s) BROKEN; {}-{}: {first_reason}", pairs.len(), p.a, p.b),
            pair::broken_step(p),
        ),
    }
}
