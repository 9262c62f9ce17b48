//! Doctor's live run: the probe with the driver, the verify core on every
//! pair the decision enables (each GPU with itself when it has no peer),
//! explain's NCCL verdicts, and a short verified bench (copy engine one way
//! and both ways at one size, one-way latency), gathered into the
//! [`Inputs`] that [`super::diagnose`] judges.

use std::path::PathBuf;

use p2p_report::bench::{Direction, Mode};
use p2p_topology::ByteSize;

use super::Inputs;
use crate::bench::host_plan::HostRoutes;
use crate::bench::{self, BenchConfig, PairSelection, PeerPolicy, Progress, SmCopy};
use crate::cuda::Cuda;
use crate::decide::Verdict;
use crate::nccl_topo::explain::{self, ExplainInputs, WhatIf};
use crate::probe::{self, sysfs::ProbeError, ProbeOptions};
use crate::verify::{self, VerifyCheck};

/// How much the live run measures.
#[derive(Debug, Clone)]
pub struct LiveOptions {
    /// The guest's sysfs.
    pub sysfs_root: PathBuf,
    /// Ask CUDA and NVML (off: sysfs facts and NCCL's rules only).
    pub use_driver: bool,
    /// Where explain reads the rest (file, cpuinfo, environment).
    pub explain: ExplainInputs,
    /// Bytes per bench copy.
    pub size: ByteSize,
    /// Timed samples per measurement.
    pub samples: u32,
    /// Bytes per verification copy.
    pub verify_size: ByteSize,
    /// `--host-plan`'s routes.
    pub host_routes: Option<HostRoutes>,
    /// `--baseline`'s file and report.
    pub baseline: Option<(String, p2p_report::bench::BenchReport)>,
}

/// Verifies every pair decided "enable" that CUDA sees, or each GPU with
/// itself when there is one GPU. A pair whose setup fails (peer access
/// refused) is recorded as a failed check carrying the driver's error.
fn verify_all(report: &probe::report::ProbeReport, cuda: &Cuda, bytes: usize) -> Vec<VerifyCheck> {
    let ordinal = |b| {
        report
            .gpus
            .iter()
            .find(|g| g.bdf == b)
            .and_then(|g| g.cuda_ordinal)
    };
    let mut todo = Vec::new();
    if report.gpus.len() == 1 {
        if let Some(o) = ordinal(report.gpus[0].bdf) {
            todo.push((o, o));
        }
    }
    for p in report.pairs.iter().filter(|p| p.verdict == Verdict::Enable) {
        if let (Some(x), Some(y)) = (ordinal(p.a), ordinal(p.b)) {
            todo.push((x, y));
        }
    }
    let mut out = Vec::new();
    for (x, y) in todo {
        let (a, b) = (&cuda.gpus[x.0], &cuda.gpus[y.0]);
        match verify::pair(a, b, bytes) {
            Ok(checks) => out.extend(checks),
            Err(e) => out.push(VerifyCheck {
                src: a.bdf,
                dst: b.bdf,
                mode: Mode::Ce,
                bytes: bytes as u64,
                copies: 0,
                checked_bytes: 0,
                mismatched_bytes: bytes as u64,
                first_bad: None,
                error: Some(e.to_string()),
            }),
        }
    }
    out
}

/// Gathers everything live. Fails only when the sysfs tree cannot be read;
/// a missing driver, NCCL rules that cannot be applied or a bench that
/// fails are recorded in [`Inputs`] as what could not be checked.
pub fn gather(opts: LiveOptions, progress: &dyn Progress) -> Result<Inputs, ProbeError> {
    progress.note("doctor: probing the GPUs");
    let (mut report, cuda) = probe::probe(
        &opts.sysfs_root,
        &ProbeOptions {
            use_driver: opts.use_driver,
            gpu_class: None,
        },
    )?;
    let mut sources = vec![format!("live: {}", opts.sysfs_root.display())];
    if let Some(c) = &cuda {
        if !report.gpus.is_empty() {
            progress.note("doctor: verifying data between the GPUs");
            report.verify = verify_all(&report, c, opts.verify_size.as_usize());
        }
    }
    let (explain, explain_missing) = if report.gpus.is_empty() {
        (None, Some("GPUs in the VM".to_string()))
    } else {
        match explain::explain(&opts.explain, &WhatIf::default(), &report) {
            Ok(e) => (Some(e.report), None),
            Err(e) => (None, Some(format!("explain's inputs: {e}"))),
        }
    };
    let n = cuda.as_ref().map_or(0, |c| c.gpus.len());
    drop(cuda);
    let (bench, bench_missing) = if n == 0 {
        (
            None,
            Some(format!(
                "the NVIDIA driver (CUDA: {})",
                report.cuda.why.as_deref().unwrap_or("sees no GPU")
            )),
        )
    } else {
        progress.note(&format!(
            "doctor: measuring {} at {} ({} samples)",
            if n > 1 {
                "every pair"
            } else {
                "the GPU with itself"
            },
            opts.size,
            opts.samples
        ));
        let cfg = BenchConfig {
            sysfs_root: opts.sysfs_root.clone(),
            modes: vec![Mode::Ce, Mode::Pingpong],
            directions: vec![Direction::Uni, Direction::Bi],
            sizes: vec![opts.size],
            pairs: if n > 1 {
                PairSelection::All
            } else {
                PairSelection::Own
            },
            peer_access: PeerPolicy::Decision,
            gpus: None,
            samples: opts.samples,
            warmup: 2,
            headline_bytes: opts.size,
            latency_bytes: ByteSize(16),
            staged_chunk: ByteSize(8 << 20),
            staged_depth: 4,
            pingpong_rounds: 20_000,
            sm_copy: SmCopy::default(),
            label: "doctor".into(),
            host_routes: opts.host_routes.clone(),
        };
        match bench::run(cfg, progress) {
            Ok(b) => (Some(b), None),
            Err(e) => (None, Some(format!("a bench that runs (it failed: {e})"))),
        }
    };
    if let Some((file, _)) = &opts.baseline {
        sources.push(format!("baseline: {file}"));
    }
    Ok(Inputs {
        probe: report,
        bench,
        bench_missing,
        explain,
        explain_missing,
        host_routes: opts.host_routes,
        baseline: opts.baseline,
        sources,
    })
}
