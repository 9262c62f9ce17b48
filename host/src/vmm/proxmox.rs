//! Proxmox VE: the `hostpciN` and `args` lines of a VM's configuration file
//! (`/etc/pve/qemu-server/VMID.conf`) and the `qm set` command that writes the
//! same, for a VM's GPUs (with their cliques) and RDMA NICs.
//!
//! Proxmox VE has no option for the clique property, so it goes into `args`
//! as `-set device.hostpciN.x-nv-gpudirect-clique=C`. What that rests on
//! (proxmox/qemu-server 9.2.6, src/PVE/QemuServer/PCI.pm and
//! src/PVE/QemuServer.pm; QEMU system/vl.c and hw/vfio/pci-quirks.c):
//!
//! - `print_hostpci_devices` gives the `-device vfio-pci` of an entry naming
//!   one function the QEMU id `hostpciN`. An entry that expands to several
//!   functions (a slot without `.F`, or a `;` list) gives ids `hostpciN.0`,
//!   `hostpciN.1`, ... (`id=${id}${mf_addr}`).
//! - QEMU's `qemu_set_option` reads `-set` with
//!   `sscanf("%63[^.].%63[^.].%63[^=]")`: the id stops at the first dot, so
//!   `-set device.hostpci0.0.x-nv-gpudirect-clique=0` looks up a device
//!   `hostpci0`, finds none, and QEMU exits ("there is no device "hostpci0"
//!   defined"). Hence one entry per function, every function spelled `.F`.
//! - `-set` applies to a `-device` given before it on the command line;
//!   `config_to_command` appends `args` after every `-device`.
//! - `MAX_HOSTPCI_DEVICES` is 16: `hostpci0` to `hostpci15`.
//! - `pcie=1` puts the device on a root port (`ich9-pcie-port-(N+1)`) and is
//!   refused without the q35 machine type ("q35 machine model is not enabled").
//! - Only `root@pam` may set `args` (the API's permission check ends in "only
//!   root can set 'args' config").
//! - `vfio_add_nv_gpudirect_cap` refuses the property on a function that is
//!   not NVIDIA display class ("unsupported PCI class"), so a GPU's audio
//!   function, a NIC or another member of the group gets no `-set`.
//! - `pci_dev_group_bind_to_vfio` binds every function of the group except
//!   bridges; the entries list those same functions, so each IOMMU group
//!   goes to the VM whole.
//!
//! Proxmox VE lays out the guest's ports itself, so only the flat plan applies.

use std::collections::BTreeSet;
use std::fmt::Write;

use p2p_allocation::clique::CliquePlan;
use p2p_topology::guest_layout::{DeviceRole, GuestDevice, GuestTopology};
use p2p_topology::iommu_groups::{GroupUse, IommuGroup};
use p2p_topology::Bdf;

use super::libvirt::CLIQUE_PROPERTY;
use super::EmitError;

/// How many `hostpciN` entries a Proxmox VE VM takes (`MAX_HOSTPCI_DEVICES`).
pub const MAX_HOSTPCI: usize = 16;

/// The placeholder for the VM's id when none is given.
pub const VMID_PLACEHOLDER: &str = "VMID";

/// Why a function gets a `hostpciN` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Passed {
    /// A planned GPU, with its clique.
    Gpu(u8),
    /// An RDMA NIC planned with the VM.
    Nic,
    /// Another function of a planned device's IOMMU group, in no VM's plan.
    GroupMember {
        /// The IOMMU group number.
        group: IommuGroup,
        /// The planned device of the VM that shares the group.
        with: Bdf,
    },
}

/// One `hostpciN` entry: exactly one host function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPci {
    /// N in `hostpciN`, 0 to 15.
    pub index: usize,
    /// The host function, written with its domain and function.
    pub host: Bdf,
    /// Why it is passed through.
    pub passed: Passed,
}

impl HostPci {
    /// The configuration key and the QEMU id Proxmox VE gives the device: `hostpciN`.
    pub fn key(&self) -> String {
        format!("hostpci{}", self.index)
    }

    /// The property string: the one function, on a PCIe root port.
    pub fn value(&self) -> String {
        format!("{},pcie=1", self.host)
    }

    /// The GPU's clique; None for NICs and other group members.
    pub fn clique(&self) -> Option<u8> {
        match self.passed {
            Passed::Gpu(c) => Some(c),
            _ => None,
        }
    }

    /// `-set device.hostpciN.x-nv-gpudirect-clique=C` for a GPU.
    pub fn set_arg(&self) -> Option<String> {
        self.clique()
            .map(|c| format!("-set device.{}.{CLIQUE_PROPERTY}={c}", self.key()))
    }
}

/// The entries of VM `vm`: the devices of its guest tree in order (GPUs, then
/// NICs), each followed by the other non-bridge functions of its IOMMU group
/// (from `groups`, the plan's) in address order, every function once. A
/// device without a group (no IOMMU on the host) is listed alone. Refused
/// past [`MAX_HOSTPCI`] entries.
pub fn entries(
    vm: &str,
    guest: &GuestTopology,
    groups: &[GroupUse],
) -> Result<Vec<HostPci>, EmitError> {
    let mut out: Vec<HostPci> = Vec::new();
    let mut seen: BTreeSet<Bdf> = BTreeSet::new();
    let mut push = |host: Bdf, passed: Passed, out: &mut Vec<HostPci>| {
        if seen.insert(host) {
            out.push(HostPci {
                index: out.len(),
                host,
                passed,
            });
        }
    };
    let passed_of = |d: &GuestDevice| match (d.role, d.clique) {
        (DeviceRole::Gpu, Some(c)) => Passed::Gpu(c),
        _ => Passed::Nic,
    };
    let own = |host: Bdf| guest.devices.iter().find(|d| d.host == host).map(passed_of);
    for d in &guest.devices {
        let group = groups
            .iter()
            .find(|g| g.members.iter().any(|m| m.bdf == d.host));
        let Some(group) = group else {
            push(d.host, passed_of(d), &mut out);
            continue;
        };
        for m in group.members.iter().filter(|m| !m.bridge) {
            let passed = own(m.bdf).unwrap_or(Passed::GroupMember {
                group: group.group,
                with: d.host,
            });
            push(m.bdf, passed, &mut out);
        }
    }
    if out.len() > MAX_HOSTPCI {
        return Err(EmitError::TooManyHostpci {
            vm: vm.to_string(),
            count: out.len(),
        });
    }
    Ok(out)
}

/// The configuration lines and the `qm set` command for one VM, comment lines
/// around them. `vmid` None writes [`VMID_PLACEHOLDER`].
pub fn config(
    plan: &CliquePlan,
    guest: &GuestTopology,
    groups: &[GroupUse],
    vmid: Option<u32>,
) -> Result<String, EmitError> {
    let list = entries(&plan.vm, guest, groups)?;
    let id = vmid.map_or_else(|| VMID_PLACEHOLDER.to_string(), |v| v.to_string());
    let mut out = format!("# {}\n", super::summary(plan));
    let vmid_hint = if vmid.is_none() {
        "\n# VMID: the VM's id (qm list), or plan with --proxmox-vmid ID."
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "# Proxmox VE: put the lines without '#' in /etc/pve/qemu-server/{id}.conf, above any\n\
         # [snapshot] section ('#' lines there become the VM's notes).{vmid_hint}\n\
         # pcie=1 needs the q35 machine type; the file must hold:\n\
         # machine: q35\n\
         # Each hostpciN entry names one function, so QEMU's id for it is hostpciN, which -set\n\
         # can name (not hostpciN.0, a function of a multi-function entry). Every function of\n\
         # the devices' IOMMU groups is listed, so each group goes whole. Only root@pam may set\n\
         # args; this args line replaces one the VM has: merge them."
    );
    for e in &list {
        if let Passed::GroupMember { group, with } = e.passed {
            let _ = writeln!(
                out,
                "# {}: {} shares IOMMU group {group} with {with} and is planned for no\n\
                 # VM; it goes along so the group stays whole.",
                e.key(),
                e.host
            );
        }
    }
    let ungrouped: Vec<String> = guest
        .devices
        .iter()
        .filter(|d| {
            !groups
                .iter()
                .any(|g| g.members.iter().any(|m| m.bdf == d.host))
        })
        .map(|d| d.host.to_string())
        .collect();
    if !ungrouped.is_empty() {
        let _ = writeln!(
            out,
            "# {} in no IOMMU group: Proxmox VE passes devices through only with the IOMMU on.",
            ungrouped.join(", ")
        );
    }
    for e in &list {
        let _ = writeln!(out, "{}: {}", e.key(), e.value());
    }
    let sets: Vec<String> = list.iter().filter_map(HostPci::set_arg).collect();
    let args = sets.join(" ");
    let _ = writeln!(out, "args: {args}");
    let mut qm = format!("# qm set {id}");
    for e in &list {
        let _ = write!(qm, " --{} {}", e.key(), e.value());
    }
    let _ = writeln!(
        out,
        "# The same with qm, as root (drop the '# '):\n{qm} --args '{args}'"
    );
    Ok(out)
}
