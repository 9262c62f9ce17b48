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

use std::collections::BTreeSet;

use p2p_shared::classify::{PairPath, PathClass, PeerRoute};
use p2p_shared::pci::PciePortType;
use p2p_shared::report::TopoReport;
use p2p_shared::topology::AcsState;
use p2p_shared::{Bdf, Topology};

/// A "GPU" (QEMU NVMe controller) as the command line places it.
#[derive(Debug, Clone, Copy)]
pub struct Gpu {
    /// QEMU device id; the NVMe serial is `vp2p-<id>`.
    pub id: &'static str,
    pub bdf: &'static str,
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
    /// Across NUMA nodes (or a known and an unknown node).
    Sockets,
}

/// A pair of devices (GPU or NIC ids) and what `nvidia-smi` would print.
#[derive(Debug, Clone, Copy)]
pub struct Pair {
    pub a: &'static str,
    pub b: &'static str,
    pub class: PathClass,
    pub meet: Meet,
}

/// One topology of boot.sh.
#[derive(Debug, Clone, Copy)]
pub struct Expect {
    /// boot.sh `--topology` name.
    pub name: &'static str,
    pub gpus: &'static [Gpu],
    /// NICs as (QEMU id, address): QEMU's e1000e.
    pub nics: &'static [(&'static str, &'static str)],
    /// Every unordered pair of GPUs and NICs.
    pub pairs: &'static [Pair],
    pub root_ports: &'static [&'static str],
    pub switch_upstream: &'static [&'static str],
    pub switch_downstream: &'static [&'static str],
    /// GPU pairs that Linux puts into one IOMMU group when the IOMMU is on
    /// (everything below a downstream port without ACS shares a group; see
    /// NOTES.md). Every other pair of GPUs is in different groups.
    pub shared_groups: &'static [(&'static str, &'static str)],
}

const fn p(a: &'static str, b: &'static str, class: PathClass, meet: Meet) -> Pair {
    Pair { a, b, class, meet }
}

use Meet::{HostBridges, RootComplex, Sockets, Switch};
use PathClass::{Node, Phb, Pix, Pxb, Sys};

/// `two-socket`: pxb0 (0x20, node 0) with a switch and a root port, pxb2
/// (0x40, node 0), pxb1 (0x80, node 1) with a switch, and gpu6 on a root port
/// of pcie.0 (NUMA unknown).
pub const TWO_SOCKET: Expect = Expect {
    name: "two-socket",
    gpus: &[
        Gpu {
            id: "gpu0",
            bdf: "0000:23:00.0",
            host_bridge: "pci0000:20",
            numa: Some(0),
            path: &["0000:20:00.0", "0000:21:00.0", "0000:22:00.0"],
        },
        Gpu {
            id: "gpu1",
            bdf: "0000:24:00.0",
            host_bridge: "pci0000:20",
            numa: Some(0),
            path: &["0000:20:00.0", "0000:21:00.0", "0000:22:01.0"],
        },
        Gpu {
            id: "gpu2",
            bdf: "0000:26:00.0",
            host_bridge: "pci0000:20",
            numa: Some(0),
            path: &["0000:20:01.0"],
        },
        Gpu {
            id: "gpu3",
            bdf: "0000:41:00.0",
            host_bridge: "pci0000:40",
            numa: Some(0),
            path: &["0000:40:00.0"],
        },
        Gpu {
            id: "gpu4",
            bdf: "0000:83:00.0",
            host_bridge: "pci0000:80",
            numa: Some(1),
            path: &["0000:80:00.0", "0000:81:00.0", "0000:82:00.0"],
        },
        Gpu {
            id: "gpu5",
            bdf: "0000:84:00.0",
            host_bridge: "pci0000:80",
            numa: Some(1),
            path: &["0000:80:00.0", "0000:81:00.0", "0000:82:01.0"],
        },
        Gpu {
            id: "gpu6",
            bdf: "0000:01:00.0",
            host_bridge: "pci0000:00",
            numa: None,
            path: &["0000:00:04.0"],
        },
    ],
    nics: &[("nic0", "0000:25:00.0")],
    pairs: &[
        p("gpu0", "gpu1", Pix, Switch("0000:21:00.0")),
        p("gpu0", "gpu2", Phb, RootComplex("pci0000:20")),
        p("gpu0", "gpu3", Node, HostBridges),
        p("gpu0", "gpu4", Sys, Sockets),
        p("gpu0", "gpu5", Sys, Sockets),
        p("gpu0", "gpu6", Sys, Sockets),
        p("gpu0", "nic0", Pix, Switch("0000:21:00.0")),
        p("gpu1", "gpu2", Phb, RootComplex("pci0000:20")),
        p("gpu1", "gpu3", Node, HostBridges),
        p("gpu1", "gpu4", Sys, Sockets),
        p("gpu1", "gpu5", Sys, Sockets),
        p("gpu1", "gpu6", Sys, Sockets),
        p("gpu1", "nic0", Pix, Switch("0000:21:00.0")),
        p("gpu2", "gpu3", Node, HostBridges),
        p("gpu2", "gpu4", Sys, Sockets),
        p("gpu2", "gpu5", Sys, Sockets),
        p("gpu2", "gpu6", Sys, Sockets),
        p("gpu2", "nic0", Phb, RootComplex("pci0000:20")),
        p("gpu3", "gpu4", Sys, Sockets),
        p("gpu3", "gpu5", Sys, Sockets),
        p("gpu3", "gpu6", Sys, Sockets),
        p("gpu3", "nic0", Node, HostBridges),
        p("gpu4", "gpu5", Pix, Switch("0000:81:00.0")),
        p("gpu4", "gpu6", Sys, Sockets),
        p("gpu4", "nic0", Sys, Sockets),
        p("gpu5", "gpu6", Sys, Sockets),
        p("gpu5", "nic0", Sys, Sockets),
        // pcie.0 has no _PXM: unknown vs node 0 is "a different node".
        p("gpu6", "nic0", Sys, Sockets),
    ],
    root_ports: &[
        "0000:00:04.0",
        "0000:20:00.0",
        "0000:20:01.0",
        "0000:40:00.0",
        "0000:80:00.0",
    ],
    switch_upstream: &["0000:21:00.0", "0000:81:00.0"],
    switch_downstream: &[
        "0000:22:00.0",
        "0000:22:01.0",
        "0000:22:02.0",
        "0000:82:00.0",
        "0000:82:01.0",
    ],
    shared_groups: &[],
};

/// `nested-switch`: switch B below switch A's first downstream port.
pub const NESTED_SWITCH: Expect = Expect {
    name: "nested-switch",
    gpus: &[
        Gpu {
            id: "gpu0",
            bdf: "0000:25:00.0",
            host_bridge: "pci0000:20",
            numa: Some(0),
            path: &[
                "0000:20:00.0",
                "0000:21:00.0",
                "0000:22:00.0",
                "0000:23:00.0",
                "0000:24:00.0",
            ],
        },
        Gpu {
            id: "gpu1",
            bdf: "0000:26:00.0",
            host_bridge: "pci0000:20",
            numa: Some(0),
            path: &[
                "0000:20:00.0",
                "0000:21:00.0",
                "0000:22:00.0",
                "0000:23:00.0",
                "0000:24:01.0",
            ],
        },
        Gpu {
            id: "gpu2",
            bdf: "0000:27:00.0",
            host_bridge: "pci0000:20",
            numa: Some(0),
            path: &["0000:20:00.0", "0000:21:00.0", "0000:22:01.0"],
        },
        Gpu {
            id: "gpu3",
            bdf: "0000:28:00.0",
            host_bridge: "pci0000:20",
            numa: Some(0),
            path: &["0000:20:01.0"],
        },
        Gpu {
            id: "gpu4",
            bdf: "0000:81:00.0",
            host_bridge: "pci0000:80",
            numa: Some(1),
            path: &["0000:80:00.0"],
        },
    ],
    nics: &[],
    pairs: &[
        p("gpu0", "gpu1", Pix, Switch("0000:23:00.0")),
        p("gpu0", "gpu2", Pxb, Switch("0000:21:00.0")),
        p("gpu0", "gpu3", Phb, RootComplex("pci0000:20")),
        p("gpu0", "gpu4", Sys, Sockets),
        p("gpu1", "gpu2", Pxb, Switch("0000:21:00.0")),
        p("gpu1", "gpu3", Phb, RootComplex("pci0000:20")),
        p("gpu1", "gpu4", Sys, Sockets),
        p("gpu2", "gpu3", Phb, RootComplex("pci0000:20")),
        p("gpu2", "gpu4", Sys, Sockets),
        p("gpu3", "gpu4", Sys, Sockets),
    ],
    root_ports: &["0000:20:00.0", "0000:20:01.0", "0000:80:00.0"],
    switch_upstream: &["0000:21:00.0", "0000:23:00.0"],
    switch_downstream: &[
        "0000:22:00.0",
        "0000:22:01.0",
        "0000:24:00.0",
        "0000:24:01.0",
    ],
    // swAdn0 (22:00.0) has no ACS: switch B and everything below it share a group.
    shared_groups: &[("gpu0", "gpu1")],
};

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

impl Expect {
    pub fn gpu(&self, id: &str) -> &Gpu {
        self.gpus
            .iter()
            .find(|g| g.id == id)
            .unwrap_or_else(|| panic!("{}: no GPU {id}", self.name))
    }

    /// Address of a GPU or NIC id.
    pub fn addr(&self, id: &str) -> Bdf {
        if let Some(g) = self.gpus.iter().find(|g| g.id == id) {
            return bdf(g.bdf);
        }
        let (_, a) = self
            .nics
            .iter()
            .find(|(n, _)| *n == id)
            .unwrap_or_else(|| panic!("{}: no device {id}", self.name));
        bdf(a)
    }

    /// GPU addresses in ascending order (the report's order).
    pub fn gpu_bdfs_sorted(&self) -> Vec<Bdf> {
        let mut v: Vec<Bdf> = self.gpus.iter().map(|g| bdf(g.bdf)).collect();
        v.sort();
        v
    }

    fn id_of(&self, b: Bdf) -> String {
        self.gpus
            .iter()
            .map(|g| (g.id, g.bdf))
            .chain(self.nics.iter().copied())
            .find(|(_, a)| bdf(a) == b)
            .map(|(id, _)| id.to_string())
            .unwrap_or_else(|| b.to_string())
    }

    /// The table's own consistency: every unordered pair of devices exactly once.
    pub fn check_table(&self) {
        let ids: Vec<&str> = self
            .gpus
            .iter()
            .map(|g| g.id)
            .chain(self.nics.iter().map(|n| n.0))
            .collect();
        let mut want = BTreeSet::new();
        for (i, a) in ids.iter().enumerate() {
            for b in &ids[i + 1..] {
                want.insert((a.to_string(), b.to_string()));
            }
        }
        let mut have = BTreeSet::new();
        for p in self.pairs {
            assert!(
                have.insert((p.a.to_string(), p.b.to_string())),
                "{}: pair {}-{} twice",
                self.name,
                p.a,
                p.b
            );
        }
        assert_eq!(
            have, want,
            "{}: the pair table must list every pair once",
            self.name
        );
    }

    /// Compares `nvme-serials.txt` (lines `vp2p-<id> <address>`, written in the
    /// guest from /sys/class/nvme) with the table's addresses.
    pub fn check_serials(&self, text: &str) -> Vec<String> {
        let mut errs = Vec::new();
        let mut seen = 0;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let mut w = line.split_whitespace();
            let (Some(serial), Some(addr)) = (w.next(), w.next()) else {
                errs.push(format!("bad line in nvme-serials.txt: {line:?}"));
                continue;
            };
            let id = serial.trim_start_matches("vp2p-");
            match self.gpus.iter().find(|g| g.id == id) {
                Some(g) if bdf(g.bdf) == bdf(addr) => seen += 1,
                Some(g) => errs.push(format!(
                    "{id}: the guest found it at {addr}, the table says {}",
                    g.bdf
                )),
                None => errs.push(format!("unexpected NVMe serial {serial} at {addr}")),
            }
        }
        if seen != self.gpus.len() {
            errs.push(format!(
                "nvme-serials.txt names {seen} of the {} GPUs",
                self.gpus.len()
            ));
        }
        errs
    }

    /// Checks a scan and its report against the table. `iommu` is whether the
    /// VM had an IOMMU. Returns every difference, in words.
    pub fn check(&self, topo: &Topology, report: &TopoReport, iommu: bool) -> Vec<String> {
        let mut errs = Vec::new();
        self.check_devices(topo, report, &mut errs);
        self.check_classes(report, &mut errs);
        self.check_routes(report, iommu, &mut errs);
        self.check_acs(topo, report, iommu, &mut errs);
        self.check_groups(report, iommu, &mut errs);
        errs
    }

    fn check_devices(&self, topo: &Topology, report: &TopoReport, errs: &mut Vec<String>) {
        let got: Vec<Bdf> = report.gpus.iter().map(|g| g.bdf).collect();
        if got != self.gpu_bdfs_sorted() {
            errs.push(format!(
                "GPUs: got {got:?}, want {:?}",
                self.gpu_bdfs_sorted()
            ));
        }
        for g in self.gpus {
            let Some(d) = report.gpus.iter().find(|d| d.bdf == bdf(g.bdf)) else {
                continue;
            };
            if d.host_bridge != g.host_bridge {
                errs.push(format!(
                    "{}: host bridge {}, want {}",
                    g.id, d.host_bridge, g.host_bridge
                ));
            }
            if d.numa_node != g.numa {
                errs.push(format!(
                    "{}: NUMA node {:?}, want {:?}",
                    g.id, d.numa_node, g.numa
                ));
            }
            let path: Vec<Bdf> = g.path.iter().map(|s| bdf(s)).collect();
            if d.path != path {
                errs.push(format!("{}: path {:?}, want {path:?}", g.id, d.path));
            }
            if topo.numa_of(d.bdf) != g.numa {
                errs.push(format!(
                    "{}: numa_of {:?}, want {:?}",
                    g.id,
                    topo.numa_of(d.bdf),
                    g.numa
                ));
            }
        }
        let nics: Vec<Bdf> = report.nics.iter().map(|n| n.bdf).collect();
        let want: Vec<Bdf> = self.nics.iter().map(|(_, a)| bdf(a)).collect();
        if nics != want {
            errs.push(format!("NICs: got {nics:?}, want {want:?}"));
        }
    }

    fn check_classes(&self, report: &TopoReport, errs: &mut Vec<String>) {
        let n = report.gpus.len();
        if report.links.len() != n || report.links.iter().any(|r| r.len() != n) {
            errs.push(format!("links is not {n}x{n}"));
            return;
        }
        let gpu_idx = |b: Bdf| report.gpus.iter().position(|g| g.bdf == b);
        let member_idx = |b: Bdf| {
            report
                .gpus
                .iter()
                .chain(report.nics.iter())
                .position(|g| g.bdf == b)
        };
        for i in 0..n {
            if report.links[i][i] != PathClass::X {
                errs.push(format!("links[{i}][{i}] = {}, want X", report.links[i][i]));
            }
        }
        for p in self.pairs {
            let (a, b) = (self.addr(p.a), self.addr(p.b));
            if let (Some(i), Some(j)) = (gpu_idx(a), gpu_idx(b)) {
                for (x, y) in [(i, j), (j, i)] {
                    if report.links[x][y] != p.class {
                        errs.push(format!(
                            "{}-{} ({a}-{b}): links says {}, QEMU's command line says {}",
                            p.a, p.b, report.links[x][y], p.class
                        ));
                    }
                }
            }
            match (member_idx(a), member_idx(b)) {
                (Some(i), Some(j)) => {
                    for (x, y) in [(i, j), (j, i)] {
                        let got = report.matrix.cells.get(x).and_then(|r| r.get(y));
                        if got != Some(&p.class) {
                            errs.push(format!(
                                "{}-{} ({a}-{b}): matrix says {got:?}, QEMU's command line says {}",
                                p.a, p.b, p.class
                            ));
                        }
                    }
                }
                _ => errs.push(format!("{}-{}: not both in the matrix", p.a, p.b)),
            }
        }
    }

    fn pair<'r>(&self, report: &'r TopoReport, a: Bdf, b: Bdf) -> Option<&'r PairPath> {
        report
            .pairs
            .iter()
            .find(|p| (p.a == a && p.b == b) || (p.a == b && p.b == a))
    }

    fn check_routes(&self, report: &TopoReport, iommu: bool, errs: &mut Vec<String>) {
        let gpu_pairs = self.gpus.len() * (self.gpus.len() - 1) / 2;
        if report.pairs.len() != gpu_pairs {
            errs.push(format!("{} pairs, want {gpu_pairs}", report.pairs.len()));
        }
        for p in self.pairs {
            if self.nics.iter().any(|(n, _)| *n == p.a || *n == p.b) {
                continue; // pairs[] holds GPU pairs only
            }
            let (a, b) = (self.addr(p.a), self.addr(p.b));
            let Some(pp) = self.pair(report, a, b) else {
                errs.push(format!("{}-{}: no entry in pairs[]", p.a, p.b));
                continue;
            };
            let name = format!("{}-{} ({a}-{b})", p.a, p.b);
            if pp.class != p.class || pp.pcie_class != p.class {
                errs.push(format!(
                    "{name}: class {} / pcie_class {}, want {}",
                    pp.class, pp.pcie_class, p.class
                ));
            }
            if pp.nvlink.is_some() {
                errs.push(format!(
                    "{name}: NVLink {:?} in a VM without NVLink",
                    pp.nvlink
                ));
            }
            let route_ok = match (&pp.route, p.meet) {
                // QEMU's downstream ports have no ACS: P2P turns inside the switch.
                (PeerRoute::Switch { at }, Switch(want)) => *at == bdf(want),
                (PeerRoute::RootComplex { host_bridge }, RootComplex(want)) => host_bridge == want,
                (PeerRoute::HostBridges, HostBridges) | (PeerRoute::Sockets, Sockets) => true,
                _ => false,
            };
            if !route_ok {
                errs.push(format!("{name}: route {:?}, want {:?}", pp.route, p.meet));
            }
            let crosses_rc = !matches!(p.meet, Switch(_));
            if pp.iommu_groups.iter().any(|g| g.is_some() != iommu) {
                errs.push(format!(
                    "{name}: iommu_groups {:?}, want both {}",
                    pp.iommu_groups,
                    if iommu { "Some" } else { "None" }
                ));
            }
            let want_via = Some(iommu && crosses_rc);
            if pp.via_iommu != want_via {
                errs.push(format!(
                    "{name}: via_iommu {:?}, want {want_via:?}",
                    pp.via_iommu
                ));
            }
            // The bridges recorded for the pair, from pairs[i].a up to where the
            // path turns and down to pairs[i].b (pairs[] is ordered by address):
            // for a switch pair up to the meeting switch, else both full paths.
            let (x, y) = if pp.a == a {
                (self.gpu(p.a), self.gpu(p.b))
            } else {
                (self.gpu(p.b), self.gpu(p.a))
            };
            let up: Vec<&str> = x.path.iter().rev().copied().collect();
            let want_bridges: Vec<Bdf> = match p.meet {
                Switch(at) => {
                    let (Some(ia), Some(ib)) = (
                        up.iter().position(|s| *s == at),
                        y.path.iter().position(|s| *s == at),
                    ) else {
                        errs.push(format!(
                            "{name}: the table's meeting switch {at} is not on both paths"
                        ));
                        continue;
                    };
                    up[..=ia]
                        .iter()
                        .chain(y.path[ib + 1..].iter())
                        .map(|s| bdf(s))
                        .collect()
                }
                _ => up.iter().chain(y.path.iter()).map(|s| bdf(s)).collect(),
            };
            let got: Vec<Bdf> = pp.bridges.iter().map(|x| x.bdf).collect();
            if got != want_bridges {
                errs.push(format!("{name}: bridges {got:?}, want {want_bridges:?}"));
            }
        }
    }

    fn check_acs(&self, topo: &Topology, report: &TopoReport, iommu: bool, errs: &mut Vec<String>) {
        let want_ctl = if iommu { ACS_CONTROL_IOMMU_ON } else { 0 };
        let mut on_paths: BTreeSet<Bdf> = BTreeSet::new();
        for g in self.gpus {
            on_paths.extend(g.path.iter().map(|s| bdf(s)));
        }
        for (id, a) in self.nics {
            let f = topo.function(bdf(a));
            if f.is_none() {
                errs.push(format!("{id}: {a} not in the tree"));
            }
            on_paths.extend(topo.ancestors(bdf(a)));
        }
        let reported: BTreeSet<Bdf> = report.bridges.iter().map(|b| b.bdf).collect();
        if reported != on_paths {
            errs.push(format!("bridges[]: {reported:?}, want {on_paths:?}"));
        }
        let kinds = [
            (self.root_ports, PciePortType::RootPort),
            (self.switch_upstream, PciePortType::SwitchUpstream),
            (self.switch_downstream, PciePortType::SwitchDownstream),
        ];
        for (list, kind) in kinds {
            for s in list {
                let b = bdf(s);
                let Some(f) = topo.function(b) else {
                    errs.push(format!("bridge {s} not in the tree"));
                    continue;
                };
                if f.pcie_port_type != Some(kind) {
                    errs.push(format!(
                        "{s}: port type {:?}, want {kind:?}",
                        f.pcie_port_type
                    ));
                }
                let entry = report.bridges.iter().find(|e| e.bdf == b);
                if let Some(e) = entry {
                    if e.acs != f.acs || e.port_type != f.pcie_port_type {
                        errs.push(format!("{s}: bridges[] entry differs from the scan"));
                    }
                    if e.iommu_group.is_some() != iommu {
                        errs.push(format!(
                            "{s}: bridge iommu_group {:?} with iommu={iommu}",
                            e.iommu_group
                        ));
                    }
                }
                match (&f.acs, kind) {
                    (AcsState::Present(acs), PciePortType::RootPort) => {
                        if acs.control.bits() != want_ctl {
                            errs.push(format!(
                                "{s}: ACS control {:#06x}, want {want_ctl:#06x}",
                                acs.control.bits()
                            ));
                        }
                        if acs.control.request_redirect != iommu {
                            errs.push(format!(
                                "{s}: ACS P2P Request Redirect {}, want {iommu}",
                                acs.control.request_redirect
                            ));
                        }
                        if acs.capability.bits() != ACS_CAPABILITY_ROOT_PORT {
                            errs.push(format!(
                                "{s}: ACS capability {:#06x}, want {ACS_CAPABILITY_ROOT_PORT:#06x}",
                                acs.capability.bits()
                            ));
                        }
                    }
                    (
                        AcsState::Absent,
                        PciePortType::SwitchUpstream | PciePortType::SwitchDownstream,
                    ) => {}
                    (other, _) => errs.push(format!("{s} ({kind:?}): ACS {other:?}")),
                }
            }
        }
    }

    fn check_groups(&self, report: &TopoReport, iommu: bool, errs: &mut Vec<String>) {
        for (i, a) in self.gpus.iter().enumerate() {
            let ga = report
                .gpus
                .iter()
                .find(|d| d.bdf == bdf(a.bdf))
                .and_then(|d| d.iommu_group);
            if ga.is_some() != iommu {
                errs.push(format!("{}: iommu_group {ga:?} with iommu={iommu}", a.id));
            }
            for b in &self.gpus[i + 1..] {
                let gb = report
                    .gpus
                    .iter()
                    .find(|d| d.bdf == bdf(b.bdf))
                    .and_then(|d| d.iommu_group);
                if !iommu || ga.is_none() || gb.is_none() {
                    continue;
                }
                let shared = self
                    .shared_groups
                    .iter()
                    .any(|(x, y)| (*x == a.id && *y == b.id) || (*x == b.id && *y == a.id));
                if (ga == gb) != shared {
                    errs.push(format!(
                        "{}-{}: groups {ga:?} and {gb:?}, want {}",
                        a.id,
                        b.id,
                        if shared {
                            "one shared group"
                        } else {
                            "different groups"
                        }
                    ));
                }
            }
        }
    }

    /// Human-readable table: expected class vs the report's, per pair.
    pub fn class_table(&self, report: &TopoReport) -> String {
        let member_idx = |b: Bdf| {
            report
                .gpus
                .iter()
                .chain(report.nics.iter())
                .position(|g| g.bdf == b)
        };
        let mut out = String::from("pair              expected  printed\n");
        for p in self.pairs {
            let (a, b) = (self.addr(p.a), self.addr(p.b));
            let got = match (member_idx(a), member_idx(b)) {
                (Some(i), Some(j)) => report.matrix.cells[i][j].to_string(),
                _ => "-".into(),
            };
            out.push_str(&format!(
                "{:<17} {:<9} {}{}\n",
                format!("{}-{}", self.id_of(a), self.id_of(b)),
                p.class.to_string(),
                got,
                if got == p.class.to_string() {
                    ""
                } else {
                    "   <-- differs"
                }
            ));
        }
        out
    }
}
