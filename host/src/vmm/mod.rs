//! VMM configuration for a clique plan: QEMU arguments, libvirt domain XML,
//! Cloud Hypervisor CLI arguments and REST requests, Incus devices, Proxmox VE
//! VM configuration, and NCCL's topology file.
//!
//! Each emitter writes exactly what its VMM accepts as is; the contract tests
//! feed the output to QEMU, to libvirt's schema and to vp2p's contract of
//! Cloud Hypervisor's API (tests/contracts/), and the end-to-end test boots
//! the mirrored layout.

pub mod ch_api;
pub mod cloud_hypervisor;
pub mod incus;
pub mod libvirt;
pub mod proxmox;
pub mod qemu;

use p2p_allocation::clique::CliquePlan;
use p2p_report::PlanReport;
use p2p_topology::guest_layout::{self, DeviceRole, GuestLayout, GuestTopology};
use p2p_topology::nccl_topo;
use p2p_topology::Topology;

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
    /// NCCL's topology XML for one VM, keyed by guest bus ids.
    NcclTopo,
    /// `incus config device add` commands with `nvidia.clique`.
    Incus,
    /// The `devices:` YAML of `incus config edit`.
    IncusYaml,
    /// Proxmox VE: `hostpciN` lines and `args: -set device.hostpciN.x-nv-gpudirect-clique=N`
    /// for the VM's configuration file, and the same as a `qm set` command.
    Proxmox,
}

/// Settings the emitters share.
#[derive(Debug, Clone, Default)]
pub struct EmitOptions {
    /// Host path of the NCCL file handed to the guest through fw_cfg; `{vm}`
    /// is replaced by the VM's name. None: no fw_cfg entry.
    pub nccl_topo_path: Option<String>,
    /// First free `<controller type='pci' index=...>` in the libvirt domain.
    pub libvirt_first_index: u32,
    /// The Proxmox VE VM id to write into the file name and `qm set`; None:
    /// the placeholder `VMID`.
    pub proxmox_vmid: Option<u32>,
}

impl EmitOptions {
    /// The NCCL file's path for `vm`.
    pub fn nccl_topo_path(&self, vm: &str) -> Option<String> {
        self.nccl_topo_path.as_ref().map(|t| t.replace("{vm}", vm))
    }
}

/// Why configuration could not be written.
#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    /// Serializing the plan as JSON (`--emit json`) failed.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// The plan has no guest layout for the named VM, so there are no guest bus ids to emit.
    #[error("the plan has no guest layout for VM {0}")]
    NoGuest(String),
    /// `--emit nccl-topo` writes one VM's file, but the plan has this many VMs.
    #[error("--emit nccl-topo writes one VM's file; the plan has {0} VMs: plan one VM per call (--vm NAME=...)")]
    SeveralVms(usize),
    /// The format cannot mirror the host's PCIe tree (`--guest-topology mirror`): Cloud
    /// Hypervisor and Incus lay out the guest buses themselves. The text says why.
    #[error("{0}; use --guest-topology flat")]
    NoMirror(&'static str),
    /// A Proxmox VE VM would need more `hostpciN` entries than `hostpci0` to `hostpci15`.
    #[error(
        "VM {vm} needs {count} hostpci entries (one per function of its devices' IOMMU groups); \
         Proxmox VE takes hostpci0 to hostpci15: give the VM fewer devices"
    )]
    TooManyHostpci {
        /// The VM's name.
        vm: String,
        /// Entries it would need.
        count: usize,
    },
    /// One Proxmox VE VM id was given for a plan of several VMs.
    #[error(
        "--proxmox-vmid names one VM; the plan has {0} VMs: plan one VM per call (--vm NAME=...)"
    )]
    VmidForSeveralVms(usize),
}

/// Renders every VM's plan in `format`.
pub fn emit(
    report: &PlanReport,
    topo: &Topology,
    format: EmitFormat,
    opts: &EmitOptions,
) -> Result<String, EmitError> {
    let guest = |i: usize| {
        report
            .guests
            .get(i)
            .ok_or_else(|| EmitError::NoGuest(report.vms[i].vm.clone()))
    };
    let each = |one: &dyn Fn(&CliquePlan, &GuestTopology) -> String| {
        let mut parts = Vec::new();
        for (i, plan) in report.vms.iter().enumerate() {
            parts.push(one(plan, guest(i)?));
        }
        Ok::<_, EmitError>(parts.join("\n"))
    };
    Ok(match format {
        EmitFormat::Qemu => each(&|p, g| qemu::arguments(p, g, opts))?,
        EmitFormat::Libvirt => each(&|p, g| libvirt::fragments(p, g, opts))?,
        EmitFormat::CloudHypervisor
        | EmitFormat::Incus
        | EmitFormat::IncusYaml
        | EmitFormat::Proxmox
            if report.guest_topology == GuestLayout::Mirror =>
        {
            let vmm = match format {
                EmitFormat::CloudHypervisor => {
                    "Cloud Hypervisor has no PCIe expander buses or switches to mirror the host with"
                }
                EmitFormat::Proxmox => {
                    "Proxmox VE lays out the guest's PCIe ports itself (hostpciN on its root port \
                     ich9-pcie-port-N+1) and takes no controllers to mirror the host with"
                }
                _ => "Incus lays out the guest's PCIe ports itself and takes no controllers to mirror the host with",
            };
            return Err(EmitError::NoMirror(vmm));
        }
        EmitFormat::CloudHypervisor => each(&|p, g| cloud_hypervisor::arguments(p, g))?,
        EmitFormat::Incus => each(&|p, g| incus::commands(p, g))?,
        EmitFormat::IncusYaml => each(&|p, g| incus::yaml(p, g))?,
        EmitFormat::Proxmox => {
            if opts.proxmox_vmid.is_some() && report.vms.len() > 1 {
                return Err(EmitError::VmidForSeveralVms(report.vms.len()));
            }
            let mut parts = Vec::new();
            for (i, plan) in report.vms.iter().enumerate() {
                parts.push(proxmox::config(
                    plan,
                    guest(i)?,
                    &report.iommu_groups,
                    opts.proxmox_vmid,
                )?);
            }
            parts.join("\n")
        }
        EmitFormat::Json => serde_json::to_string_pretty(report)? + "\n",
        EmitFormat::NcclTopo => {
            if report.vms.len() != 1 {
                return Err(EmitError::SeveralVms(report.vms.len()));
            }
            nccl_topo::render(&nccl_topo::from_guest(topo, guest(0)?))
        }
    })
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

/// The layout's name as `--guest-topology` spells it.
pub fn layout_name(layout: GuestLayout) -> &'static str {
    match layout {
        GuestLayout::Flat => "flat",
        GuestLayout::Mirror => "mirror",
    }
}

/// A device id for the `i`-th GPU of a VM, the one the guest layout gives it.
pub fn device_id(i: usize) -> String {
    guest_layout::device_id(DeviceRole::Gpu, i)
}
