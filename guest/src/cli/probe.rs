//! `p2p-guest probe`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use p2p_guest::cuda::Cuda;
use p2p_guest::decide::{Flag, FlagKind, Verdict};
use p2p_guest::probe::report::ProbeReport;
use p2p_guest::probe::{enable_allowed, probe, ProbeOptions};
use p2p_guest::verify;
use p2p_topology::Bdf;

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// sysfs tree to read (the live /sys, or a captured tree).
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    sysfs_root: PathBuf,
    /// Print the report as JSON (schema vp2p.probe/1, see README).
    #[arg(long)]
    json: bool,
    /// Enable peer access, both directions, for exactly the pairs decided
    /// "enable", and report what the driver answered.
    #[arg(long, conflicts_with = "no_driver")]
    enable: bool,
    /// Do not load CUDA or NVML (sysfs facts only).
    #[arg(long)]
    no_driver: bool,
    /// For every pair the decision enables, move distinct patterns both ways
    /// with the copy engine and SM kernels and compare them on the host byte
    /// for byte; a pair whose data does not arrive is flagged p2p_data_lost
    /// and the exit status is 1.
    #[arg(long, conflicts_with = "no_driver")]
    verify: bool,
    /// Bytes moved per verification copy.
    #[arg(long, value_parser = p2p_guest::bench::plan::bench_size, default_value = "4M")]
    verify_size: p2p_topology::ByteSize,
    /// Take NVIDIA functions of this class as GPUs (2, 4 or 6 hex digits)
    /// instead of display controllers: stand-ins whose vendor id the VMM
    /// overrode, as vp2p's tests pass NVMe functions through.
    #[arg(long, value_name = "PREFIX")]
    gpu_class: Option<p2p_topology::select::ClassPrefix>,
}

pub fn run(args: ProbeArgs) -> anyhow::Result<()> {
    let opts = ProbeOptions {
        use_driver: !args.no_driver,
        gpu_class: args.gpu_class,
    };
    let (mut report, cuda) = probe(&args.sysfs_root, &opts)?;
    if args.enable {
        let Some(cuda) = &cuda else {
            anyhow::bail!(
                "--enable needs CUDA: {}",
                report.cuda.why.as_deref().unwrap_or("unavailable")
            );
        };
        enable_allowed(&mut report, cuda);
    }
    if args.verify {
        let Some(cuda) = &cuda else {
            anyhow::bail!(
                "--verify needs CUDA: {}",
                report.cuda.why.as_deref().unwrap_or("unavailable")
            );
        };
        verify_enabled(&mut report, cuda, args.verify_size.as_usize())?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render_text());
    }
    if report.verify.iter().any(|c| !c.ok()) {
        anyhow::bail!(
            "data moved between a pair granted P2P did not arrive (p2p_data_lost, see above)"
        );
    }
    if report.enabled.iter().any(|e| !e.ok) {
        anyhow::bail!("the driver refused peer access for some pair (see above)");
    }
    if report.gpus.is_empty() {
        // Exit status 2: nothing to probe (documented in the README).
        eprintln!("p2p-guest probe: no NVIDIA GPU found");
        std::process::exit(2);
    }
    Ok(())
}

/// Runs `--verify` on every pair decided "enable" that CUDA sees.
fn verify_enabled(report: &mut ProbeReport, cuda: &Cuda, bytes: usize) -> anyhow::Result<()> {
    let ordinal = |b: Bdf| {
        report
            .gpus
            .iter()
            .find(|g| g.bdf == b)
            .and_then(|g| g.cuda_ordinal)
    };
    let mut checks = Vec::new();
    for p in report.pairs.iter().filter(|p| p.verdict == Verdict::Enable) {
        let (Some(oa), Some(ob)) = (ordinal(p.a), ordinal(p.b)) else {
            continue;
        };
        let (a, b) = (&cuda.gpus[oa.0], &cuda.gpus[ob.0]);
        checks.extend(
            verify::pair(a, b, bytes).with_context(|| format!("verifying {} {}", p.a, p.b))?,
        );
    }
    for c in checks.iter().filter(|c| !c.ok()) {
        report.flags.push(Flag {
            kind: FlagKind::P2pDataLost,
            message: format!(
                "{} -> {} ({}): {} of {} bytes did not arrive{}",
                c.src,
                c.dst,
                c.mode,
                c.mismatched_bytes,
                c.bytes,
                c.error
                    .as_deref()
                    .map_or(String::new(), |e| format!(" ({e})"))
            ),
        });
    }
    report.verify = checks;
    Ok(())
}
