//! Incus: `incus config device add` commands and the `devices:` YAML of
//! `incus config edit` for a VM's GPUs (`gpu`, `gputype=physical`, with
//! `nvidia.clique`, API extension `gpu_physical_clique`) and RDMA NICs (`pci`).
//! Incus lays out the guest's PCIe ports itself, so only the flat layout applies.

use std::fmt::Write;

use p2p_allocation::clique::CliquePlan;
use p2p_topology::guest_layout::{DeviceRole, GuestTopology};

/// The device key that carries the clique; Incus takes 0..=15, as QEMU does.
pub const CLIQUE_KEY: &str = "nvidia.clique";

/// An Incus device name for a guest device: its id without libvirt's `ua-`.
fn device_name(id: &str) -> &str {
    id.strip_prefix("ua-").unwrap_or(id)
}

/// Commands for one VM.
pub fn commands(plan: &CliquePlan, guest: &GuestTopology) -> String {
    let vm = &plan.vm;
    let mut out = format!(
        "# {}\n# Incus with the API extension gpu_physical_clique (`incus info | grep clique`):\n",
        super::summary(plan)
    );
    for d in &guest.devices {
        let name = device_name(&d.id);
        match (d.role, d.clique) {
            (DeviceRole::Gpu, Some(c)) => {
                let _ = writeln!(
                    out,
                    "incus config device add {vm} {name} gpu gputype=physical pci={} {CLIQUE_KEY}={c}",
                    d.host
                );
            }
            _ => {
                let _ = writeln!(
                    out,
                    "incus config device add {vm} {name} pci address={}",
                    d.host
                );
            }
        }
    }
    out.push_str(
        "# Older Incus: the same GPU devices without nvidia.clique, and the property set in the\n\
         # device section Incus writes for each (raw.qemu.conf adds keys to existing sections):\n",
    );
    let mut raw = String::new();
    for d in guest.devices.iter().filter(|d| d.role == DeviceRole::Gpu) {
        if let Some(c) = d.clique {
            let _ = write!(
                raw,
                "[device \"dev-incus_{}\"]\nx-nv-gpudirect-clique = \"{c}\"\n",
                device_name(&d.id)
            );
        }
    }
    let _ = writeln!(
        out,
        "# incus config set {vm} raw.qemu.conf='{}'",
        raw.trim_end().replace('\n', "\n# ")
    );
    out
}

/// The `devices:` map for `incus config edit VM` (values are strings there).
pub fn yaml(plan: &CliquePlan, guest: &GuestTopology) -> String {
    let mut out = format!(
        "# {}: merge into `incus config edit {}`\ndevices:\n",
        super::summary(plan),
        plan.vm
    );
    for d in &guest.devices {
        let _ = writeln!(out, "  {}:", device_name(&d.id));
        match (d.role, d.clique) {
            (DeviceRole::Gpu, Some(c)) => {
                let _ = write!(
                    out,
                    "    type: gpu\n    gputype: physical\n    pci: \"{}\"\n    {CLIQUE_KEY}: \"{c}\"\n",
                    d.host
                );
            }
            _ => {
                let _ = write!(out, "    type: pci\n    address: \"{}\"\n", d.host);
            }
        }
    }
    out
}
