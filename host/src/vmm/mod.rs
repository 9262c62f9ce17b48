//! VMM configuration for a clique plan: QEMU arguments, libvirt domain XML,
//! Cloud Hypervisor CLI arguments and REST requests.
//!
//! Each emitter writes exactly what its VMM accepts as is; the contract tests
//! feed the output to QEMU, to libvirt's schema and to Cloud Hypervisor's
//! OpenAPI spec.

pub mod ch_api;
pub mod cloud_hypervisor;
pub mod libvirt;
pub mod qemu;

use p2p_shared::clique::CliquePlan;
use p2p_shared::report::PlanReport;

/// The configuration formats `p2p-host plan --emit` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EmitFormat {
    /// `-device vfio-pci,...,x-nv-gpudirect-clique=N` arguments.
    Qemu,
    /// `<hostdev>` elements and the `<qemu:override>` block.
    Libvirt,
    /// `--device path=...,x_nv_gpudirect_clique=N` and `--platform vfio_p2p_dma=on`.
    CloudHypervisor,
    /// The plan itself (schema vp2p.plan/1).
    Json,
}

/// Renders every VM's plan in `format`.
pub fn emit(report: &PlanReport, format: EmitFormat) -> Result<String, serde_json::Error> {
    Ok(match format {
        EmitFormat::Qemu => each_vm(report, qemu::arguments),
        EmitFormat::Libvirt => each_vm(report, libvirt::fragments),
        EmitFormat::CloudHypervisor => each_vm(report, cloud_hypervisor::arguments),
        EmitFormat::Json => serde_json::to_string_pretty(report)? + "\n",
    })
}

fn each_vm(report: &PlanReport, one: fn(&CliquePlan) -> String) -> String {
    report.vms.iter().map(one).collect::<Vec<_>>().join("\n")
}

/// One line naming the VM and its plan, for the comment each emitter starts with.
pub fn summary(plan: &CliquePlan) -> String {
    format!(
        "{}: {} GPU(s), {} clique(s), max level {}",
        plan.vm,
        plan.assignments.len(),
        plan.cliques.len(),
        plan.max_level
    )
}

/// A device id for the `i`-th GPU of a VM, valid in QEMU ids and libvirt
/// user aliases (letters, digits, '-'; libvirt wants the "ua-" prefix).
pub fn device_id(i: usize) -> String {
    format!("ua-vp2p-gpu{i}")
}
