//! The text form of the topo report, laid out like `nvidia-smi topo -m`.

use std::fmt::Write;

use super::table::Table;
use super::topo::{describe_selector, AtsEntry, DeviceEntry, TopoReport};
use p2p_topology::classify::{PairPath, PeerRoute};
use p2p_topology::topology::AcsState;

/// The legend `nvidia-smi topo -m` prints under its matrix.
pub const LEGEND: &str = "\
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
";

impl TopoReport {
    /// Renders the matrix, legends, per-pair routing, bridges and notes.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let gpu_count = self.gpus.len();
        let mut header = vec![String::new()];
        header.extend(self.matrix.labels.iter().cloned());
        header.extend(["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"].map(String::from));
        let mut t = Table::new(header);
        let members: Vec<&DeviceEntry> = self.gpus.iter().chain(self.nics.iter()).collect();
        for (i, d) in members.iter().enumerate() {
            let mut row = vec![d.label.clone()];
            row.extend(self.matrix.cells[i].iter().map(|c| c.to_string()));
            if i < gpu_count {
                row.push(d.cpu_affinity.clone().unwrap_or_else(|| "N/A".into()));
                row.push(
                    self.numa_affinity(d)
                        .map_or_else(|| "N/A".into(), |n| n.to_string()),
                );
                row.push("N/A".into());
            }
            t.row(row);
        }
        out.push_str(&t.render());
        out.push('\n');
        out.push_str(LEGEND);

        if !self.nics.is_empty() {
            out.push_str("\nNIC Legend:\n\n");
            for n in &self.nics {
                match n.rdma_devices.first().or(n.interfaces.first()) {
                    Some(name) => writeln!(out, "  {}: {} ({})", n.label, name, n.bdf),
                    None => writeln!(out, "  {}: {}", n.label, n.bdf),
                }
                .ok();
            }
        }

        let mut t =
            Table::new(["", "BDF", "ID", "DRIVER", "HOST BRIDGE", "IOMMU", "LINK"]).indent(2);
        for g in self.gpus.iter().chain(self.nvswitches.iter()) {
            let link = match (&g.link.current_speed, g.link.current_width) {
                (Some(s), Some(w)) => format!("{s} x{w}"),
                (Some(s), None) => s.clone(),
                _ => "-".into(),
            };
            t.row([
                g.label.clone(),
                g.bdf.to_string(),
                format!("{}:{}", &g.vendor[2..], &g.device[2..]),
                g.driver.clone().unwrap_or_else(|| "-".into()),
                g.host_bridge.clone(),
                g.iommu_group.map_or_else(|| "-".into(), |n| n.to_string()),
                link,
            ]);
        }
        if !t.is_empty() {
            let _ = write!(
                out,
                "\nGPUs ({}):\n\n",
                describe_selector(&self.gpu_selector)
            );
            out.push_str(&t.render());
        }

        if !self.pairs.is_empty() {
            out.push_str("\nPeer routing between GPUs (ACS redirect, IOMMU):\n\n");
            let mut t = Table::new(["PAIR", "CLASS", "PCIE", "ROUTE", "IOMMU"]).indent(2);
            for p in &self.pairs {
                t.row([
                    format!("{}-{}", self.label_of(p.a), self.label_of(p.b)),
                    p.class.to_string(),
                    p.pcie_class.to_string(),
                    self.describe_route(p),
                    describe_iommu(p),
                ]);
            }
            out.push_str(&t.render());
        }

        if !self.bridges.is_empty() {
            out.push_str("\nBridges on the paths:\n\n");
            let mut t = Table::new(["BDF", "TYPE", "IOMMU", "ACS CONTROL (capability)"]).indent(2);
            for b in &self.bridges {
                t.row([
                    b.bdf.to_string(),
                    b.port_type.map_or("pci-bridge", |p| p.label()).to_string(),
                    b.iommu_group.map_or_else(|| "-".into(), |n| n.to_string()),
                    describe_acs(&b.acs),
                ]);
            }
            out.push_str(&t.render());
        }

        if !self.notes.is_empty() {
            out.push_str("\nNotes:\n");
            for n in &self.notes {
                let _ = writeln!(out, "  - {n}");
            }
        }
        out
    }

    /// The route column of pair `p`: [`describe_route`], and where the pair
    /// turns below the root complex with the IOMMU on, whether its requests
    /// are ATS-translated (and so go direct) or not.
    fn describe_route(&self, p: &PairPath) -> String {
        let base = describe_route(&p.route, &self.bridges);
        let below = match &p.route {
            PeerRoute::Switch { .. } => true,
            PeerRoute::AcsRedirect { redirected_by, .. } => {
                redirected_by.iter().all(|b| dt_on(&self.bridges, b))
            }
            _ => false,
        };
        if !below || p.iommu_groups.iter().any(Option::is_none) {
            return base;
        }
        let ats = |b: p2p_topology::Bdf| {
            self.gpus
                .iter()
                .chain(&self.nics)
                .find(|g| g.bdf == b)
                .map_or(AtsEntry::Unknown, |g| g.ats)
        };
        let (a, b) = (ats(p.a), ats(p.b));
        if a == AtsEntry::Unknown || b == AtsEntry::Unknown {
            return base;
        }
        let off: Vec<String> = [(p.a, a), (p.b, b)]
            .iter()
            .filter(|(_, s)| *s != AtsEntry::Enabled)
            .map(|(d, _)| self.label_of(*d))
            .collect();
        match (&p.route, off.is_empty()) {
            (PeerRoute::Switch { .. }, true) => {
                format!("{base}, ATS on at both (translated at the devices)")
            }
            (PeerRoute::Switch { .. }, false) => {
                format!("{base}, ATS off at {} (untranslated)", off.join(","))
            }
            (PeerRoute::AcsRedirect { at, redirected_by }, ats_on) => {
                let ports: Vec<String> = redirected_by.iter().map(|b| b.to_string()).collect();
                let how = if ats_on {
                    "ATS on at both: direct".to_string()
                } else {
                    format!("ATS off at {}: up to the root complex", off.join(","))
                };
                format!(
                    "meets at {at}, ACS ReqRedir+DirectTrans on {}; {how}",
                    ports.join(",")
                )
            }
            _ => base,
        }
    }

    fn label_of(&self, bdf: p2p_topology::Bdf) -> String {
        self.gpus
            .iter()
            .find(|g| g.bdf == bdf)
            .map_or_else(|| bdf.to_string(), |g| g.label.clone())
    }
}

/// The route column. Where ACS redirects, it says whether the redirecting
/// ports let ATS-translated requests go direct (ACS Direct Translated P2P,
/// control bit 6) or send every request up to be translated.
fn describe_route(r: &PeerRoute, bridges: &[super::topo::BridgeEntry]) -> String {
    let list = |v: &[p2p_topology::Bdf]| {
        v.iter()
            .map(|b| b.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    match r {
        PeerRoute::SameFunction => "same function".into(),
        PeerRoute::Switch { at } => format!("turns in switch at {at} (below the root complex)"),
        PeerRoute::AcsRedirect { at, redirected_by } => {
            if redirected_by.iter().all(|b| dt_on(bridges, b)) {
                format!(
                    "meets at {at}, ACS ReqRedir+DirectTrans on {}: direct when ATS-translated, else up to the root complex",
                    list(redirected_by)
                )
            } else {
                format!(
                    "meets at {at}, ACS ReqRedir on {} (DirectTrans off) sends it up to the root complex to be translated",
                    list(redirected_by)
                )
            }
        }
        PeerRoute::AcsUnknown { at, unknown } => {
            format!(
                "meets at {at}, ACS unknown on {} (run as root)",
                list(unknown)
            )
        }
        PeerRoute::RootComplex { host_bridge } => format!("through root complex {host_bridge}"),
        PeerRoute::HostBridges => "between host bridges, same NUMA node".into(),
        PeerRoute::Sockets => "across the inter-socket link".into(),
        PeerRoute::UnknownNuma => {
            "between host bridges, a NUMA node unknown (-1): counted as SYS".into()
        }
    }
}

/// ACS Direct Translated P2P (control bit 6) is on at bridge `b`.
fn dt_on(bridges: &[super::topo::BridgeEntry], b: &p2p_topology::Bdf) -> bool {
    bridges.iter().any(|e| {
        e.bdf == *b && matches!(&e.acs, AcsState::Present(a) if a.control.direct_translated)
    })
}

fn describe_iommu(p: &PairPath) -> String {
    let groups = match p.iommu_groups {
        [Some(a), Some(b)] => format!("groups {a},{b}"),
        [Some(a), None] => format!("group {a},-"),
        [None, Some(b)] => format!("group -,{b}"),
        [None, None] => "no IOMMU groups".into(),
    };
    match p.via_iommu {
        Some(true) => format!("translated ({groups})"),
        Some(false) if p.iommu_groups.iter().all(Option::is_some) => {
            format!("bypassed, stays below the root complex ({groups})")
        }
        Some(false) => format!("not translated ({groups})"),
        None => format!("unknown ({groups})"),
    }
}

fn describe_acs(a: &AcsState) -> String {
    match a {
        AcsState::Absent => "no ACS capability".into(),
        AcsState::Unknown { why } => format!("unknown: {why}"),
        AcsState::NotRead => "not read (endpoint)".into(),
        AcsState::Present(acs) => {
            format!("{} ({})", acs.control.describe(), acs.capability.describe())
        }
    }
}
