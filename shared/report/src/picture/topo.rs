//! The host's PCIe tree as nested boxes, in the spirit of hwloc's lstopo:
//! NUMA nodes hold host bridges, host bridges hold root ports, ports hold
//! switches and switches the GPUs, RDMA NICs and NVSwitches `topo` reports.
//! Bridges on no such device's way up are left out (a count says how many
//! functions each host bridge has beyond those drawn).

use std::collections::{BTreeMap, BTreeSet};

use super::boxes::{BoxNode, Flow};
pub use super::labels::link_line;
use super::labels::{acs_run, ats_run, joined, port_kind, port_name, product_name, vendor_name};
use super::svg::{Line, Run, Style, INK};
use crate::{DeviceEntry, TopoReport};
use p2p_topology::bdf::Bdf;
use p2p_topology::pci::PciePortType;
use p2p_topology::topology::{PciFunction, Topology};

/// Body text size.
pub const TEXT: f64 = 12.0;
/// Title size of the big boxes.
pub const TITLE: f64 = 14.0;
/// Marks a link trained below what both its ends can do.
pub const RED: &str = "#c62828";
/// Marks what costs speed but may be normal (an idle link's speed, ATS off).
pub const AMBER: &str = "#a15c00";
/// Text of devices no VM got.
pub const GREY_TEXT: &str = "#8a8a8a";
/// Fill of devices no VM got.
pub const GREY_FILL: &str = "#ececec";
/// Fill of a GPU box.
pub const GPU_FILL: &str = "#dff0d8";
/// Fill of an RDMA NIC box.
pub const NIC_FILL: &str = "#d9edf7";
/// Fill of an NVSwitch box.
pub const NVSWITCH_FILL: &str = "#ece4f7";
/// Colour of NVLink edges.
pub const NVLINK: &str = "#2e7d32";

/// How one device is painted in a plan: its fill, the colour of its frame
/// (the VM's) and a line naming its VM and clique.
#[derive(Debug, Clone, PartialEq)]
pub struct DevicePaint {
    /// Fill colour (the clique's, for GPUs).
    pub fill: String,
    /// Outline colour (the VM's).
    pub frame: String,
    /// One line: `vm0 · clique 1`.
    pub note: String,
}

/// Plan colours over the tree; empty for `topo`.
#[derive(Debug, Clone, Default)]
pub struct Paint {
    /// Devices a VM got.
    pub devices: BTreeMap<Bdf, DevicePaint>,
    /// Grey out every GPU and NIC not in `devices` (a plan picture).
    pub grey_others: bool,
}

/// What the tree draws: the report's devices and the bridges above them.
struct Drawn<'a> {
    topo: &'a Topology,
    devices: BTreeMap<Bdf, (&'static str, &'a DeviceEntry)>,
    shown: BTreeSet<Bdf>,
    paint: &'a Paint,
    /// Each GPU's NVLink peers by label, with the bond's link count.
    nvlink_peers: BTreeMap<Bdf, Vec<(String, Option<u32>)>>,
}

impl<'a> Drawn<'a> {
    fn new(topo: &'a Topology, report: &'a TopoReport, paint: &'a Paint) -> Self {
        let mut devices = BTreeMap::new();
        for (kind, list) in [
            ("gpu", &report.gpus),
            ("nic", &report.nics),
            ("nvswitch", &report.nvswitches),
        ] {
            for d in list {
                devices.entry(d.bdf).or_insert((kind, d));
            }
        }
        let mut shown = BTreeSet::new();
        for b in devices.keys() {
            if topo.function(*b).is_some() {
                shown.insert(*b);
                shown.extend(topo.ancestors(*b));
            }
        }
        let label = |b: Bdf| {
            devices
                .get(&b)
                .map_or_else(|| b.to_string(), |(_, d)| d.label.clone())
        };
        let mut nvlink_peers: BTreeMap<Bdf, Vec<(String, Option<u32>)>> = BTreeMap::new();
        for l in &topo.nvlinks {
            nvlink_peers
                .entry(l.a)
                .or_default()
                .push((label(l.b), l.count));
            nvlink_peers
                .entry(l.b)
                .or_default()
                .push((label(l.a), l.count));
        }
        Drawn {
            topo,
            devices,
            shown,
            paint,
            nvlink_peers,
        }
    }

    fn children(&self, parent: Option<Bdf>, host_bridge: &str) -> Vec<&'a PciFunction> {
        self.topo
            .functions
            .iter()
            .filter(|f| f.parent == parent && f.host_bridge == host_bridge)
            .filter(|f| self.shown.contains(&f.bdf))
            .collect()
    }

    fn function_box(&self, f: &PciFunction) -> BoxNode {
        let mut node = match self.devices.get(&f.bdf) {
            Some((kind, entry)) => self.device_box(f, kind, entry),
            None => self.bridge_box(f),
        };
        node.children = self
            .children(Some(f.bdf), &f.host_bridge)
            .into_iter()
            .map(|c| self.function_box(c))
            .collect();
        node
    }

    fn bridge_box(&self, f: &PciFunction) -> BoxNode {
        let mut lines = vec![Line::plain(format!("{} {}", port_name(f), f.bdf), TEXT)];
        let mut narrowed = false;
        if let Some((l, n)) = link_line(self.topo, f, INK) {
            // A root or downstream port's own link is the one below it,
            // which the device under it shows; the upstream port's is its
            // way up.
            if !matches!(
                f.pcie_port_type,
                Some(PciePortType::RootPort | PciePortType::SwitchDownstream)
            ) || self.children(Some(f.bdf), &f.host_bridge).is_empty()
            {
                narrowed = n;
                lines.push(l);
            }
        }
        let mut runs = Vec::new();
        if let Some(g) = f.iommu_group {
            runs.push(Run::new(format!("group {g}"), INK));
        }
        runs.extend(acs_run(&f.acs));
        lines.extend(joined(runs));
        let fill = if f.pcie_port_type == Some(PciePortType::SwitchUpstream) {
            "#f5f5fc"
        } else {
            "#ffffff"
        };
        let mut node = BoxNode::new(Style::boxed(fill, "#7a7a7a"), lines);
        node.data = vec![
            ("box", f.bdf.to_string()),
            ("kind", port_kind(f).to_string()),
        ];
        if narrowed {
            node.data.push(("link", "narrowed".into()));
        }
        node
    }

    fn device_box(&self, f: &PciFunction, kind: &str, entry: &DeviceEntry) -> BoxNode {
        let paint = self.paint.devices.get(&f.bdf);
        let grey = paint.is_none() && self.paint.grey_others && kind != "nvswitch";
        let ink = if grey { GREY_TEXT } else { INK };
        let mut lines = vec![Line::coloured(
            format!("{} {}", entry.label, f.bdf),
            TEXT,
            ink,
        )];
        let mut name = format!("{:04x}:{:04x}", f.vendor, f.device);
        if let Some(v) = vendor_name(f.vendor) {
            name.push(' ');
            name.push_str(v);
        }
        if let Some(p) = product_name(f.vendor, f.device) {
            name.push(' ');
            name.push_str(p);
        }
        lines.push(Line::coloured(name, TEXT, ink));
        lines.push(Line::coloured(
            match &f.driver {
                Some(d) => format!("driver {d}"),
                None => "no driver".into(),
            },
            TEXT,
            ink,
        ));
        let mut narrowed = false;
        if let Some((l, n)) = link_line(self.topo, f, ink) {
            narrowed = n;
            lines.push(l);
        }
        let mut runs = Vec::new();
        if let Some(g) = f.iommu_group {
            runs.push(Run::new(format!("group {g}"), ink));
        }
        runs.extend(ats_run(entry.ats));
        lines.extend(joined(runs));
        if !f.rdma_devices.is_empty() {
            lines.push(Line::coloured(
                format!("RDMA {}", f.rdma_devices.join(", ")),
                TEXT,
                ink,
            ));
        }
        if let Some(peers) = self.nvlink_peers.get(&f.bdf) {
            let mut by_count: BTreeMap<Option<u32>, Vec<&str>> = BTreeMap::new();
            for (label, count) in peers {
                by_count.entry(*count).or_default().push(label);
            }
            for (count, labels) in by_count {
                let head = match count {
                    Some(c) => format!("NV{c} to"),
                    None => "NVLink to".into(),
                };
                let text = format!("{head} {}", labels.join(" "));
                for l in super::font::wrap(&text, TEXT, 240.0) {
                    lines.push(Line::coloured(l, TEXT, NVLINK));
                }
            }
        }
        let (fill, stroke, width) = match (paint, grey) {
            (Some(p), _) => (p.fill.clone(), p.frame.clone(), 3.0),
            (None, true) => (GREY_FILL.to_string(), "#b0b0b0".to_string(), 1.0),
            (None, false) => (
                match kind {
                    "gpu" => GPU_FILL,
                    "nic" => NIC_FILL,
                    _ => NVSWITCH_FILL,
                }
                .to_string(),
                "#4d4d4d".to_string(),
                1.0,
            ),
        };
        if let Some(p) = paint {
            lines.push(Line::plain(p.note.clone(), TEXT));
        } else if grey {
            lines.push(Line::coloured("in no VM", TEXT, GREY_TEXT));
        }
        let mut style = Style::boxed(&fill, &stroke);
        style.stroke_width = width;
        let mut node = BoxNode::new(style, lines);
        node.data = vec![
            ("box", f.bdf.to_string()),
            ("kind", kind.to_string()),
            ("label", entry.label.clone()),
        ];
        if narrowed {
            node.data.push(("link", "narrowed".into()));
        }
        node
    }
}

/// The tree as boxes: one box per NUMA node (and one for host bridges of
/// unknown node), host bridges inside, then the functions.
pub fn tree(topo: &Topology, report: &TopoReport, paint: &Paint) -> BoxNode {
    let d = Drawn::new(topo, report, paint);
    let mut by_node: BTreeMap<Option<u32>, Vec<BoxNode>> = BTreeMap::new();
    for hb in &topo.host_bridges {
        let all = topo
            .functions
            .iter()
            .filter(|f| f.host_bridge == hb.name)
            .count();
        let kids: Vec<BoxNode> = d
            .children(None, &hb.name)
            .into_iter()
            .map(|f| d.function_box(f))
            .collect();
        let drawn = topo
            .functions
            .iter()
            .filter(|f| f.host_bridge == hb.name && d.shown.contains(&f.bdf))
            .count();
        let mut lines = vec![Line::plain(
            format!("host bridge {} · bus {:02x}", hb.name, hb.bus),
            TEXT,
        )];
        if all > drawn {
            lines.push(Line::coloured(
                format!("{} other functions not drawn", all - drawn),
                TEXT,
                GREY_TEXT,
            ));
        }
        let mut node = BoxNode::new(Style::boxed("#fffbea", "#b59f3b"), lines);
        node.data = vec![("box", hb.name.clone()), ("kind", "host-bridge".into())];
        node.children = kids;
        by_node.entry(hb.numa_node).or_default().push(node);
    }
    // Known nodes first, then the bridges of unknown node.
    let mut order: Vec<(Option<u32>, Vec<BoxNode>)> = by_node.into_iter().collect();
    order.sort_by_key(|(n, _)| (n.is_none(), *n));
    let numa = order
        .into_iter()
        .map(|(n, hbs)| {
            let title = match n {
                Some(id) => match topo.numa_nodes.iter().find(|x| x.id == id) {
                    Some(x) => format!("NUMA node {id} · CPUs {}", x.cpulist),
                    None => format!("NUMA node {id}"),
                },
                None => "NUMA node unknown".to_string(),
            };
            let mut node = BoxNode::new(
                Style::boxed("#f4f4f4", "#9e9e9e"),
                vec![Line::plain(title, TITLE)],
            );
            node.data = vec![
                (
                    "box",
                    n.map_or_else(|| "numa-unknown".into(), |i| format!("numa{i}")),
                ),
                ("kind", "numa".into()),
            ];
            node.children = hbs;
            node
        })
        .collect();
    BoxNode::group(Flow::Column, numa)
}

/// A row of small legend boxes: (fill, stroke, text, dashed).
pub fn legend(items: &[(&str, &str, String, bool)]) -> BoxNode {
    let chips = items
        .iter()
        .map(|(fill, stroke, text, dashed)| {
            let mut style = Style::boxed(fill, stroke);
            style.dashed = *dashed;
            let mut n = BoxNode::new(style, vec![Line::plain(text.clone(), TEXT)]);
            n.data = vec![("legend", text.clone())];
            n
        })
        .collect();
    BoxNode::group(Flow::Row, chips)
}

/// The legend of the tree's colours and marks.
pub fn tree_legend() -> BoxNode {
    legend(&[
        (GPU_FILL, "#4d4d4d", "GPU".into(), false),
        (NIC_FILL, "#4d4d4d", "RDMA NIC".into(), false),
        (NVSWITCH_FILL, "#4d4d4d", "NVSwitch".into(), false),
        ("#ffffff", "#7a7a7a", "port".into(), false),
        ("#ffffff", "#5c6bc0", "IOMMU group of several".into(), true),
    ])
}

/// Title lines of a topology picture of the tree read from `source` (the
/// path as the user gave it).
pub fn title(report: &TopoReport, source: &str) -> Vec<Line> {
    let mut lines = vec![Line::plain(format!("PCIe topology of {source}"), 16.0)];
    let nv = match report.nvlink_source {
        Some(s) => format!("; NVLink from {}", format!("{s:?}").to_lowercase()),
        None => String::new(),
    };
    lines.push(Line::plain(
        format!(
            "{} GPUs, {} NICs, {} NVSwitches, {} bridges on their paths{nv}",
            report.gpus.len(),
            report.nics.len(),
            report.nvswitches.len(),
            report.bridges.len()
        ),
        TEXT,
    ));
    lines.push(Line {
        runs: vec![
            Run::new("link widths in ", INK),
            Run::new("red", RED),
            Run::new(" trained narrower than both ends can; speeds in ", INK),
            Run::new("amber", AMBER),
            Run::new(" below both ends (normal when idle)", INK),
        ],
        size: TEXT,
    });
    lines
}
