//! The VM's facts as NCCL will find them: the CPU from cpuinfo, the GPUs
//! and their bridges from sysfs (in CUDA order), the NICs as NCCL's net
//! plugins list them, and the NVLinks the probe saw.

use std::fs;
use std::path::Path;

use p2p_nccl::{CpuIdentity, VmFacts, VmFunction, VmNic};
use p2p_topology::Bdf;

use super::functions::read_functions;
use super::NcclTopoError;
use crate::probe::report::ProbeReport;
use crate::probe::sysfs::resolve_root;

/// The CPU as NCCL reads it from cpuid: `vendor_id`, `cpu family`, `model`
/// of /proc/cpuinfo; the architecture this binary was built for.
pub fn read_cpu(cpuinfo: &Path) -> CpuIdentity {
    let text = fs::read_to_string(cpuinfo).unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find(|l| l.split(':').next().map(str::trim) == Some(name))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    CpuIdentity {
        arch: std::env::consts::ARCH.to_string(),
        vendor: field("vendor_id"),
        familyid: field("cpu family").and_then(|v| v.parse().ok()),
        modelid: field("model").and_then(|v| v.parse().ok()),
    }
}

/// The bridges above a function, root port first, from its sysfs path
/// (`devices/pci0000:00/0000:00:01.0/0000:01:00.0`).
fn bridges(root: &Path, bdf: Bdf) -> Vec<Bdf> {
    let link = root.join("bus/pci/devices").join(bdf.to_string());
    let Ok(target) = fs::read_link(&link) else {
        return Vec::new();
    };
    let parts: Vec<Bdf> = target
        .components()
        .filter_map(|c| c.as_os_str().to_str()?.parse().ok())
        .collect();
    parts[..parts.len().saturating_sub(1)].to_vec()
}

fn function(root: &Path, f: &super::functions::GuestFunction, bdf: Bdf) -> VmFunction {
    VmFunction {
        busid: bdf,
        class: f.class,
        numa: f.numa_node.map_or(-1, |n| n as i32),
        bridges: bridges(root, bdf),
        link_speed: f
            .link
            .max_speed
            .clone()
            .or_else(|| f.link.current_speed.clone()),
        link_width: f.link.max_width.or(f.link.current_width).map(u32::from),
    }
}

/// Mb/s from an InfiniBand port's `rate` (`400 Gb/sec (4X NDR)`).
fn ib_rate(text: &str) -> Option<u64> {
    let mut it = text.split_whitespace();
    let n: f64 = it.next()?.parse().ok()?;
    match it.next()? {
        "Gb/sec" => Some((n * 1000.0) as u64),
        "Mb/sec" => Some(n as u64),
        _ => None,
    }
}

/// NICs as NCCL's net plugins list them: InfiniBand/RoCE devices when there
/// are any (GPUDirect RDMA when nvidia-peermem is loaded), else one socket
/// interface below the CPU (never GPUDirect RDMA).
pub(crate) fn read_nics(
    root: &Path,
    functions: &std::collections::BTreeMap<Bdf, super::functions::GuestFunction>,
) -> Vec<VmNic> {
    let peermem = [
        "module/nvidia_peermem",
        "kernel/mm/memory_peers/nv_mem/version",
        "kernel/mm/memory_peers/nv_mem_nc/version",
    ]
    .iter()
    .any(|p| root.join(p).exists());
    let mut out = Vec::new();
    if let Ok(dir) = fs::read_dir(root.join("class/infiniband")) {
        let mut names: Vec<_> = dir
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in names {
            let dev = root.join("class/infiniband").join(&name).join("device");
            let bdf = fs::read_link(&dev)
                .ok()
                .and_then(|t| t.file_name()?.to_str()?.parse::<Bdf>().ok());
            let rate = fs::read_to_string(
                root.join("class/infiniband")
                    .join(&name)
                    .join("ports/1/rate"),
            )
            .ok()
            .and_then(|t| ib_rate(&t));
            out.push(VmNic {
                name,
                function: bdf.and_then(|b| functions.get(&b).map(|f| function(root, f, b))),
                speed_mbps: rate.unwrap_or(100_000),
                gdr: peermem,
            });
        }
    }
    if out.is_empty() {
        if let Ok(dir) = fs::read_dir(root.join("class/net")) {
            let mut names: Vec<_> = dir
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n != "lo" && !n.starts_with("docker") && !n.starts_with("virbr"))
                .collect();
            names.sort();
            if let Some(name) = names.into_iter().next() {
                let speed = fs::read_to_string(root.join("class/net").join(&name).join("speed"))
                    .ok()
                    .and_then(|t| t.trim().parse::<i64>().ok())
                    .filter(|s| *s > 0)
                    .map_or(10_000, |s| s as u64);
                out.push(VmNic {
                    name,
                    function: None,
                    speed_mbps: speed,
                    gdr: false,
                });
            }
        }
    }
    out
}

/// The VM's facts: GPUs (in the probe's CUDA order, else by address), NICs,
/// NVLinks (the probe's NVML view), the CPU.
pub fn vm_facts(
    root: &Path,
    probe: &ProbeReport,
    cpu: CpuIdentity,
) -> Result<VmFacts, NcclTopoError> {
    let root = resolve_root(root);
    let functions = read_functions(&root)?;
    let mut gpus: Vec<_> = probe.gpus.iter().collect();
    gpus.sort_by_key(|g| (g.cuda_ordinal.map_or(u32::MAX, |o| o.0 as u32), g.bdf));
    let gpus = gpus
        .iter()
        .filter_map(|g| functions.get(&g.bdf).map(|f| function(&root, f, g.bdf)))
        .collect();
    let nvlinks = probe.nvml.is_none().then(|| {
        probe
            .pairs
            .iter()
            .filter_map(|p| p.nvlinks.map(|n| (p.a, p.b, n)))
            .collect()
    });
    Ok(VmFacts {
        cpu,
        gpus,
        nics: read_nics(&root, &functions),
        nvlinks,
    })
}
