//! QEMU: one `-device vfio-pci` argument per GPU with the clique property.

use std::fmt::Write;

use p2p_shared::clique::CliquePlan;

use super::device_id;

/// The `-device` argument for one GPU, as QEMU's option parser takes it.
pub fn device_arg(host: &p2p_shared::Bdf, id: &str, clique: u8) -> String {
    format!("vfio-pci,host={host},id={id},x-nv-gpudirect-clique={clique}")
}

/// Shell-ready arguments for one VM, a comment line first.
pub fn arguments(plan: &CliquePlan) -> String {
    let mut out = format!("# {}\n", super::summary(plan));
    let n = plan.assignments.len();
    for (i, a) in plan.assignments.iter().enumerate() {
        let cont = if i + 1 < n { " \\" } else { "" };
        let _ = writeln!(
            out,
            "-device {}{cont}",
            device_arg(&a.bdf, &device_id(i), a.clique.id())
        );
    }
    out
}
