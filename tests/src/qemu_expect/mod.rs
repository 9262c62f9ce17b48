//! What the QEMU topologies of `scripts/qemu/boot.sh` must look like to
//! `p2p-host`, written down from QEMU's command line, not from our output.
//!
//! How the tables follow from the command line:
//! - Each `pxb-pcie,bus_nr=N,numa_node=K` is a host bridge `pci0000:N` whose
//!   functions sit on NUMA node K (QEMU writes `_PXM`). pcie.0 (`pci0000:00`)
//!   has no `_PXM`, so Linux reports `numa_node` -1 (unknown) below it.
//! - Bus numbers: SeaBIOS numbers secondary buses depth-first in slot order,
//!   starting at `bus_nr + 1` below each expander bridge (and at 1 below
//!   pcie.0). So in two-socket rp0a=20:00.0 gets bus 0x21, sw0's upstream port
//!   is 21:00.0, its downstream ports 22:00.0/22:01.0/22:02.0 lead to buses
//!   0x23/0x24/0x25, rp0b=20:01.0 to 0x26, and so on. The guest checks this
//!   mapping itself: `nvme-serials.txt` pairs each NVMe serial `vp2p-<id>` with
//!   its address, and [`check_serials`] compares it with the tables.
//! - Classes follow `nvidia-smi topo -m`: PIX = both below one switch (an
//!   upstream port and its downstream ports count as one bridge), PXB = several
//!   switches without the host bridge, PHB = two root ports of one host
//!   bridge, NODE = two host bridges on one NUMA node, SYS = different nodes;
//!   a node that is unknown (-1) differs from every known one.
//! - ACS (measured with lspci/setpci in the guest, scripts/qemu/NOTES.md): only
//!   `pcie-root-port` has the capability (0x005f); the x3130/xio3130 switch
//!   ports have none. Linux sets control 0x001d on the root ports when an
//!   IOMMU is present, 0 otherwise.

use p2p_topology::classify::PathClass;
use p2p_topology::Bdf;

/// A "GPU" (QEMU NVMe controller) as the command line places it.
#[derive(Debug, Clone, Copy)]
pub struct Gpu {
    /// QEMU device id; the NVMe serial is `vp2p-<id>`.
    pub id: &'static str,
    /// The address the guest gives it (SeaBIOS bus numbering).
    pub bdf: &'static str,
    /// Its host bridge (`pci0000:20`).
    pub host_bridge: &'static str,
    /// None for pcie.0, which has no `_PXM`.
    pub numa: Option<u32>,
    /// Bridges from the host bridge down to the device.
    pub path: &'static [&'static str],
}

/// Where a pair's peer traffic turns, from the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meet {
    /// Inside the switch whose upstream port is this address.
    Switch(&'static str),
    /// Through the root complex of this host bridge (two root ports).
    RootComplex(&'static str),
    /// Between two host bridges of one node.
    HostBridges,
    /// Across NUMA nodes.
    Sockets,
    /// Between host bridges, one without a NUMA node (no _PXM): SYS.
    UnknownNuma,
}

/// A pair of devices (GPU or NIC ids) and what `nvidia-smi` would print.
#[derive(Debug, Clone, Copy)]
pub struct Pair {
    /// QEMU id of one device.
    pub a: &'static str,
    /// QEMU id of the other device.
    pub b: &'static str,
    /// What `nvidia-smi topo -m` prints for the pair (PIX, PHB, NODE, ...).
    pub class: PathClass,
    /// Where their peer traffic turns.
    pub meet: Meet,
}

/// One topology of boot.sh.
#[derive(Debug, Clone, Copy)]
pub struct Expect {
    /// boot.sh `--topology` name.
    pub name: &'static str,
    /// The "GPUs" (NVMe controllers) it places.
    pub gpus: &'static [Gpu],
    /// NICs as (QEMU id, address): QEMU's e1000e.
    pub nics: &'static [(&'static str, &'static str)],
    /// Every unordered pair of GPUs and NICs.
    pub pairs: &'static [Pair],
    /// Addresses of its `pcie-root-port`s.
    pub root_ports: &'static [&'static str],
    /// Addresses of its switches' upstream ports (x3130).
    pub switch_upstream: &'static [&'static str],
    /// Addresses of its switches' downstream ports (xio3130).
    pub switch_downstream: &'static [&'static str],
    /// GPU pairs that Linux puts into one IOMMU group when the IOMMU is on
    /// (everything below a downstream port without ACS shares a group; see
    /// NOTES.md). Every other pair of GPUs is in different groups.
    pub shared_groups: &'static [(&'static str, &'static str)],
}

const fn p(a: &'static str, b: &'static str, class: PathClass, meet: Meet) -> Pair {
    Pair { a, b, class, meet }
}

mod checks;
mod tables;
pub use tables::{expected_cliques, NESTED_SWITCH, TWO_SOCKET};

/// ACS bits Linux enables on QEMU's root ports when an IOMMU is present:
/// SrcValid, ReqRedir, CmpltRedir, UpstreamFwd.
pub const ACS_CONTROL_IOMMU_ON: u16 = 0x001d;
/// ACS capability of QEMU's `pcie-root-port` (7.2 and 11.1 alike).
pub const ACS_CAPABILITY_ROOT_PORT: u16 = 0x005f;

/// The table for a boot.sh topology name.
pub fn by_name(name: &str) -> &'static Expect {
    match name {
        "two-socket" => &TWO_SOCKET,
        "nested-switch" => &NESTED_SWITCH,
        other => panic!("no expectation table for topology {other}"),
    }
}

fn bdf(s: &str) -> Bdf {
    s.parse()
        .unwrap_or_else(|e| panic!("bad address {s} in the table: {e:?}"))
}
