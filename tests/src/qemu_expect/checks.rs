//! The checks: a scanned tree or a report against an expectation table.

use std::collections::BTreeSet;

use p2p_report::TopoReport;
use p2p_topology::classify::{PairPath, PathClass, PeerRoute};
use p2p_topology::pci::PciePortType;
use p2p_topology::topology::AcsState;
use p2p_topology::{Bdf, Topology};

use super::*;
use Meet::{HostBridges, RootComplex, Sockets, Switch, UnknownNuma};

impl Expect {
    /// The GPU with QEMU id `id`; panics when the table has none.
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
                (PeerRoute::HostBridges, HostBridges)
                | (PeerRoute::Sockets, Sockets)
                | (PeerRoute::UnknownNuma, UnknownNuma) => true,
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
