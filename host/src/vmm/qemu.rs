//! QEMU: `-device vfio-pci` arguments with the clique property, each device at
//! a pinned guest address; for a mirrored layout the `pxb-pcie` expander
//! buses, root ports and switches first, and the NCCL file through fw_cfg.

use std::fmt::Write;

use p2p_allocation::clique::CliquePlan;
use p2p_topology::guest_layout::{GuestDevice, GuestLayout, GuestPort, GuestTopology, PortKind};
use p2p_topology::nccl_topo::FW_CFG_NAME;

use super::EmitOptions;

/// The `-device` argument for one GPU, as QEMU's option parser takes it.
pub fn device_arg(host: &p2p_topology::Bdf, id: &str, clique: u8) -> String {
    format!("vfio-pci,host={host},id={id},x-nv-gpudirect-clique={clique}")
}

/// The `-device` argument for a device at its guest address.
pub fn placed_device_arg(d: &GuestDevice) -> String {
    let mut s = format!(
        "vfio-pci,host={},id={},bus={},addr={:#04x}.{:x}",
        d.host, d.id, d.parent, d.guest.device, d.guest.function
    );
    if d.multifunction {
        s.push_str(",multifunction=on");
    }
    if let Some(c) = d.clique {
        let _ = write!(s, ",x-nv-gpudirect-clique={c}");
    }
    s
}

/// The `-device` argument for an emulated port.
pub fn port_arg(p: &GuestPort) -> String {
    let mut s = format!(
        "{},id={},bus={},addr={:#x}",
        p.kind.qemu_driver(),
        p.id,
        p.parent,
        p.guest.device
    );
    if let Some(c) = p.chassis {
        let _ = write!(s, ",chassis={c},slot=0");
    }
    if let (Some(l), true) = (p.link, p.kind.has_link_properties()) {
        let _ = write!(s, ",x-speed={},x-width={}", l.speed.qemu(), l.width);
    }
    s
}

/// What a mirrored VM must already define: its guest NUMA nodes.
fn numa_comment(guest: &GuestTopology) -> String {
    if guest.numa_nodes.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "# The VM must define these guest NUMA nodes (-numa node,nodeid=N,memdev=... plus\n\
         # -numa cpu,node-id=N,...), each node's vCPUs pinned to the host CPUs named:\n",
    );
    for n in &guest.numa_nodes {
        let _ = writeln!(out, "#   guest node {n}");
    }
    out
}

/// Shell-ready arguments for one VM, comment lines first.
pub fn arguments(plan: &CliquePlan, guest: &GuestTopology, opts: &EmitOptions) -> String {
    let mut out = format!(
        "# {}; guest topology {}\n",
        super::summary(plan),
        super::layout_name(guest.layout)
    );
    out.push_str(&numa_comment(guest));
    let mut args: Vec<String> = Vec::new();
    if guest.layout == GuestLayout::Mirror {
        for rc in &guest.root_complexes {
            let mut a = format!(
                "pxb-pcie,id={},bus=pcie.0,addr={:#x},bus_nr={:#04x}",
                rc.id, rc.slot, rc.bus_nr
            );
            if let Some(n) = rc.numa_node {
                let _ = write!(a, ",numa_node={n}");
            }
            args.push(format!("-device {a}"));
        }
        args.extend(
            guest
                .ports
                .iter()
                .map(|p| format!("-device {}", port_arg(p))),
        );
    }
    args.extend(
        guest
            .devices
            .iter()
            .map(|d| format!("-device {}", placed_device_arg(d))),
    );
    if let Some(path) = opts.nccl_topo_path(&plan.vm) {
        args.push(format!("-fw_cfg name={FW_CFG_NAME},file={path}"));
    }
    let n = args.len();
    for (i, a) in args.iter().enumerate() {
        let cont = if i + 1 < n { " \\" } else { "" };
        let _ = writeln!(out, "{a}{cont}");
    }
    out
}

/// The ports of one kind, for tests and the README.
pub fn ports_of(guest: &GuestTopology, kind: PortKind) -> impl Iterator<Item = &GuestPort> {
    guest.ports.iter().filter(move |p| p.kind == kind)
}
