//! One test binary for what each VMM and platform is given: QEMU, libvirt,
//! Cloud Hypervisor, Incus and Proxmox VE against their own contracts, and the
//! vfio-user server in front of captured and emulated devices.
//! Each module was a test binary of its own; they share one link here.

mod incus_emit;
mod patch_domain;
mod plan_mirror;
mod plan_qemu;
mod proxmox_emit;
mod serve_vfio;
mod serve_vfio_edu;
mod vmm_contracts;
