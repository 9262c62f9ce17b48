//! The guest's PCIe tree for one VM: where each passed-through GPU and RDMA NIC
//! sits in the guest and at which guest bus id, decided before boot.
//!
//! Two layouts:
//! - [`GuestLayout::Flat`]: every device on the root bus `pcie.0` at a pinned
//!   slot (what VMMs do by default; the guest sees PHB between every pair).
//! - [`GuestLayout::Mirror`]: one `pxb-pcie` host bridge per host root complex
//!   the VM uses, on a guest NUMA node per host node, a root port per host root
//!   port, an emulated switch (upstream and downstream ports) per host switch on
//!   a device's path, and the device below its port. Every pair of devices then
//!   has the same class in the guest as on the host (PIX, PXB, PHB, NODE, SYS).
//!
//! Guest bus numbers are predicted the way the guest enumerates them: each
//! expander bus starts at its `bus_nr`, and bridges below it take the next
//! free number depth first in slot order (the numbering seen in the captured
//! QEMU trees). The end-to-end test boots the layout and compares.

mod build;
mod first_slot;
mod link;
mod mirror;

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::bdf::Bdf;

pub use build::{device_id, flat, flat_from, VmDevice};
pub use first_slot::{FirstSlot, FirstSlotError, FIRST_SLOT, LAST_SLOT, LOWEST_SLOT};
pub use link::{max_or_current, LinkSpeed};
pub use mirror::{mirror, mirror_from};

/// How the guest's PCIe tree is laid out.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum GuestLayout {
    /// Every device on the guest's root bus (`pcie.0`).
    #[default]
    Flat,
    /// The host's root complexes, root ports and switches, mirrored.
    Mirror,
}

/// What a device is to the guest layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeviceRole {
    /// A GPU; it carries a P2P clique capability in the guest.
    Gpu,
    /// A network function with an RDMA device.
    Nic,
}

/// The kind of emulated PCIe port, named after the QEMU device that provides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PortKind {
    /// `pcie-root-port` (libvirt model `pcie-root-port`).
    RootPort,
    /// `x3130-upstream` (libvirt model `pcie-switch-upstream-port`).
    SwitchUpstream,
    /// `xio3130-downstream` (libvirt model `pcie-switch-downstream-port`).
    SwitchDownstream,
}

impl PortKind {
    /// The QEMU device name.
    pub fn qemu_driver(self) -> &'static str {
        match self {
            PortKind::RootPort => "pcie-root-port",
            PortKind::SwitchUpstream => "x3130-upstream",
            PortKind::SwitchDownstream => "xio3130-downstream",
        }
    }

    /// Whether the port is a slot (has `chassis` and `slot`), as root and
    /// downstream ports are.
    pub fn is_slot(self) -> bool {
        !matches!(self, PortKind::SwitchUpstream)
    }

    /// Whether QEMU 11.1 lets the port's link be set (`x-speed`, `x-width`):
    /// only `pcie-root-port` has the properties; `x3130-upstream` and
    /// `xio3130-downstream` have none (their links read 2.5 GT/s x1 or
    /// nothing), which is why the NCCL file carries the host's switch links.
    pub fn has_link_properties(self) -> bool {
        matches!(self, PortKind::RootPort)
    }
}

/// A PCIe link as the host reports it: the speed and width the guest should see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GuestLink {
    /// Link speed (transfer rate per lane) of the host link.
    pub speed: LinkSpeed,
    /// Negotiated lane count of the host link (x1..x32).
    pub width: u8,
}

/// A guest NUMA node and the host node it stands for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GuestNumaNode {
    /// Guest NUMA node id, numbered from 0.
    pub guest: u32,
    /// Host NUMA node it stands for.
    pub host: u32,
    /// The host node's CPUs, to pin this node's vCPUs to.
    pub host_cpus: Option<String>,
}

impl fmt::Display for GuestNumaNode {
    /// `0 <- host node 1 (host CPUs 16-31)`: one line of the NUMA requirement.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} <- host node {} (host CPUs {})",
            self.guest,
            self.host,
            self.host_cpus.as_deref().unwrap_or("unknown")
        )
    }
}

/// A guest host bridge (`pxb-pcie`) standing for one host root complex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GuestRootComplex {
    /// QEMU id and libvirt alias.
    pub id: String,
    /// The host root complex it mirrors (`pci0000:20`).
    pub host: String,
    /// Its slot on `pcie.0`.
    #[serde(with = "crate::hex::u8")]
    #[schemars(with = "crate::hex::Hex")]
    pub slot: u8,
    /// The guest bus number of its root bus (`bus_nr`, libvirt `busNr`).
    #[serde(with = "crate::hex::u8")]
    #[schemars(with = "crate::hex::Hex")]
    pub bus_nr: u8,
    /// Highest bus number below it.
    #[serde(with = "crate::hex::u8")]
    #[schemars(with = "crate::hex::Hex")]
    pub last_bus: u8,
    /// Guest NUMA node; None when the host's node is unknown (-1).
    pub numa_node: Option<u32>,
}

/// An emulated PCIe port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GuestPort {
    /// QEMU id and libvirt alias (`ua-vp2p-rp0`, `ua-vp2p-sw0`, `ua-vp2p-sw0d0`).
    pub id: String,
    /// Root port, switch upstream port or switch downstream port.
    pub kind: PortKind,
    /// The host bridge function it mirrors; None for a root port invented for a
    /// device that sits on its host bridge's bus without one.
    pub host: Option<Bdf>,
    /// Id of what it plugs into: a root complex or another port.
    pub parent: String,
    /// Its own guest address.
    pub guest: Bdf,
    /// The bus number below it.
    #[serde(with = "crate::hex::u8")]
    #[schemars(with = "crate::hex::Hex")]
    pub secondary_bus: u8,
    /// `chassis` of slot ports (root and downstream ports), unique in the VM.
    pub chassis: Option<u8>,
    /// The host port's link (max, else current); set on guest root ports
    /// (the only ports QEMU lets set it), and carried in the NCCL file.
    pub link: Option<GuestLink>,
}

/// A passed-through device at its guest address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GuestDevice {
    /// QEMU id and libvirt alias (`ua-vp2p-gpu0`, `ua-vp2p-nic0`).
    pub id: String,
    /// GPU or RDMA NIC.
    pub role: DeviceRole,
    /// Host address of the passed-through function.
    pub host: Bdf,
    /// Address the guest sees the function at.
    pub guest: Bdf,
    /// Id of the port it sits below, or `pcie.0`.
    pub parent: String,
    /// P2P clique for GPUs.
    pub clique: Option<u8>,
    /// Function 0 of a device with several functions in the VM.
    pub multifunction: bool,
}

/// The guest PCIe tree of one VM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GuestTopology {
    /// Which layout built the tree: flat or mirrored.
    pub layout: GuestLayout,
    /// Guest NUMA nodes the VM must define (empty for a flat layout).
    pub numa_nodes: Vec<GuestNumaNode>,
    /// Expander host bridges (`pxb-pcie`), one per host root complex; empty when flat.
    pub root_complexes: Vec<GuestRootComplex>,
    /// Ports in guest enumeration order (parents before children).
    pub ports: Vec<GuestPort>,
    /// The VM's GPUs and NICs, in the order the caller gave them.
    pub devices: Vec<GuestDevice>,
    /// What the layout could not mirror exactly, in words.
    pub notes: Vec<String>,
}

impl GuestTopology {
    /// The guest address of a host device, if the VM holds it.
    pub fn guest_bdf(&self, host: Bdf) -> Option<Bdf> {
        self.devices
            .iter()
            .find(|d| d.host == host)
            .map(|d| d.guest)
    }

    /// A port by id.
    pub fn port(&self, id: &str) -> Option<&GuestPort> {
        self.ports.iter().find(|p| p.id == id)
    }

    /// A root complex by id.
    pub fn root_complex(&self, id: &str) -> Option<&GuestRootComplex> {
        self.root_complexes.iter().find(|r| r.id == id)
    }

    /// Ports and devices whose parent is `id`, ports first, in slot order.
    pub fn children_of<'a>(
        &'a self,
        id: &'a str,
    ) -> (
        impl Iterator<Item = &'a GuestPort> + 'a,
        impl Iterator<Item = &'a GuestDevice> + 'a,
    ) {
        (
            self.ports.iter().filter(move |p| p.parent == id),
            self.devices.iter().filter(move |d| d.parent == id),
        )
    }

    /// The root complex a port or device lies under (following parents).
    pub fn root_complex_of<'a>(&'a self, parent: &'a str) -> Option<&'a GuestRootComplex> {
        let mut parent = parent;
        for _ in 0..64 {
            if let Some(rc) = self.root_complex(parent) {
                return Some(rc);
            }
            parent = &self.port(parent)?.parent;
        }
        None
    }
}

/// Why a guest layout could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// A device given for the VM is not a function of the topology.
    #[error("{0} is not a PCI function of the topology")]
    UnknownDevice(Bdf),
    /// The same device was given twice for the VM.
    #[error("{0} is listed twice")]
    Duplicate(Bdf),
    /// A guest bus would need more than its 32 slots.
    #[error("{what}: more than 32 {items} on one guest bus")]
    BusFull {
        /// The bus that overflowed: `pcie.0`, a root complex or a switch.
        what: String,
        /// What did not fit on it (expander buses, root ports, downstream ports).
        items: &'static str,
    },
    /// The mirrored tree would need guest bus numbers past 0xff.
    #[error("the mirrored tree needs guest bus numbers past 0xff (root complexes start at {first:#04x}); give the VM fewer root complexes or switches")]
    OutOfBuses {
        /// Guest bus number the first expander bus starts at.
        first: u8,
    },
    /// The flat layout has more host devices than free slots on `pcie.0`.
    #[error(
        "the flat layout holds at most {max} devices on pcie.0 (slots {first:#04x}..=0x1e), \
         the VM has {count}: start at a lower first slot or give the VM fewer devices"
    )]
    FlatFull {
        /// First slot on `pcie.0` the flat layout uses.
        first: u8,
        /// Slots free from `first` up to 0x1f.
        max: usize,
        /// Host devices (slots) the VM has.
        count: usize,
    },
    /// The mirrored layout has more host root complexes than free slots on
    /// `pcie.0` for their expander buses.
    #[error(
        "the mirrored layout holds at most {max} expander buses on pcie.0 (slots \
         {first:#04x}..=0x1e), the VM's devices sit below {count} host root complexes: start at \
         a lower first slot or give the VM devices of fewer root complexes"
    )]
    MirrorFull {
        /// First slot on `pcie.0` the expander buses take.
        first: u8,
        /// Slots free from `first` through 0x1e.
        max: usize,
        /// Host root complexes (expander buses) the VM needs.
        count: usize,
    },
    /// More than 127 slot ports: each root and downstream port needs a chassis number.
    #[error("more than 127 slot ports (root and downstream ports need a chassis number each)")]
    OutOfChassis,
    /// A host bridge above a VM device has a shape the guest tree cannot reproduce.
    #[error("{bridge}: cannot mirror a bridge above {device}: {why}")]
    Unmirrorable {
        /// The host bridge or port that cannot be reproduced.
        bridge: Bdf,
        /// A VM device below it.
        device: Bdf,
        /// What about the host tree keeps it from being mirrored.
        why: String,
    },
}
