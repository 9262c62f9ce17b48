//! The lines of text in the tree's boxes: device names from the PCI ID
//! registry, port kinds, a link's trained width and speed against what both
//! ends can do, ACS and ATS as `check` reads them.

use super::svg::{Line, Run, INK};
use super::topo::{AMBER, RED, TEXT};
use crate::AtsEntry;
use p2p_topology::pci::PciePortType;
use p2p_topology::topology::{AcsState, PciFunction, Topology};

/// `vendor` as the PCI ID registry names it, for the few vendors vp2p
/// meets (https://pci-ids.ucw.cz/, vendors 10de, 15b3, 8086, 1b36, 1af4).
pub(crate) fn vendor_name(vendor: u16) -> Option<&'static str> {
    Some(match vendor {
        0x10de => "NVIDIA",
        0x15b3 => "Mellanox",
        0x8086 => "Intel",
        0x1b36 | 0x1af4 => "Red Hat",
        _ => return None,
    })
}

/// Product names of devices in vp2p's captured trees, as the PCI ID
/// registry names them (https://pci-ids.ucw.cz/read/PC/<vendor>/<device>).
pub(crate) fn product_name(vendor: u16, device: u16) -> Option<&'static str> {
    Some(match (vendor, device) {
        (0x10de, 0x2335) => "H200 SXM 141GB",
        (0x1b36, 0x0010) => "QEMU NVM Express Controller",
        (0x8086, 0x10d3) => "82574L Gigabit Network Connection",
        (0x1af4, 0x1048) => "Virtio 1.0 SCSI",
        (0x1af4, 0x1004) => "Virtio SCSI",
        _ => return None,
    })
}

/// `32.0 GT/s PCIe` -> 32.0.
pub(crate) fn gts(s: &Option<String>) -> Option<f64> {
    s.as_deref()?.split_whitespace().next()?.parse().ok()
}

pub(crate) fn speed_text(v: f64) -> String {
    format!("{v} GT/s")
}

pub(crate) fn min_known<T: PartialOrd + Copy>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b < a { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// The function's link to the port above it, labelled with its trained
/// width and speed; the width in red when it trained narrower than both
/// ends can do, the speed in amber when slower (normal for an idle link).
/// None when sysfs gave no link. The bool says the width is narrowed.
pub fn link_line(topo: &Topology, f: &PciFunction, ink: &str) -> Option<(Line, bool)> {
    let cur_w = f.link.current_width.filter(|w| *w > 0);
    let cur_s = gts(&f.link.current_speed);
    if cur_w.is_none() && cur_s.is_none() {
        return None;
    }
    let upper = f.parent.and_then(|p| topo.function(p)).filter(|p| {
        matches!(
            p.pcie_port_type,
            Some(PciePortType::RootPort | PciePortType::SwitchDownstream)
        )
    });
    let cap_w = min_known(
        f.link.max_width.filter(|w| *w > 0),
        upper.and_then(|u| u.link.max_width.filter(|w| *w > 0)),
    );
    let cap_s = min_known(
        gts(&f.link.max_speed),
        upper.and_then(|u| gts(&u.link.max_speed)),
    );
    let mut runs = vec![Run::new("link ", ink)];
    let mut narrowed = false;
    if let Some(w) = cur_w {
        match cap_w.filter(|c| w < *c) {
            Some(c) => {
                narrowed = true;
                runs.push(Run::new(format!("x{w} of x{c}, narrowed"), RED));
            }
            None => runs.push(Run::new(format!("x{w}"), ink)),
        }
    }
    if let Some(s) = cur_s {
        let sep = if cur_w.is_some() { " " } else { "" };
        match cap_s.filter(|c| s < *c) {
            Some(c) => runs.push(Run::new(
                format!("{sep}{} of {}", speed_text(s), speed_text(c)),
                AMBER,
            )),
            None => runs.push(Run::new(format!("{sep}{}", speed_text(s)), ink)),
        }
    }
    Some((Line { runs, size: TEXT }, narrowed))
}

pub(crate) fn port_name(f: &PciFunction) -> &'static str {
    match f.pcie_port_type {
        Some(PciePortType::RootPort) => "root port",
        Some(PciePortType::SwitchUpstream) => "switch upstream",
        Some(PciePortType::SwitchDownstream) => "switch downstream",
        Some(PciePortType::PcieToPciBridge) => "PCIe-to-PCI bridge",
        Some(PciePortType::PciToPcieBridge) => "PCI-to-PCIe bridge",
        _ => "bridge",
    }
}

pub(crate) fn port_kind(f: &PciFunction) -> &'static str {
    match f.pcie_port_type {
        Some(PciePortType::RootPort) => "root-port",
        Some(PciePortType::SwitchUpstream) => "switch-upstream",
        Some(PciePortType::SwitchDownstream) => "switch-downstream",
        _ => "bridge",
    }
}

/// `ACS redirect on, DT off`: P2P Request Redirect and, where the port can
/// do it, Direct Translated P2P, as `check` reads them.
pub(crate) fn acs_run(acs: &AcsState) -> Option<Run> {
    match acs {
        AcsState::Present(a) => {
            let on = |b: bool| if b { "on" } else { "off" };
            let mut t = format!("ACS redirect {}", on(a.control.request_redirect));
            if a.capability.direct_translated {
                t.push_str(&format!(", DT {}", on(a.control.direct_translated)));
            }
            let colour = if a.control.request_redirect && !a.control.direct_translated {
                AMBER
            } else {
                INK
            };
            Some(Run::new(t, colour))
        }
        AcsState::Absent => Some(Run::new("no ACS", INK)),
        AcsState::Unknown { .. } => Some(Run::new("ACS unread", AMBER)),
        AcsState::NotRead => None,
    }
}

pub(crate) fn ats_run(ats: AtsEntry) -> Option<Run> {
    match ats {
        AtsEntry::Enabled => Some(Run::new("ATS on", INK)),
        AtsEntry::Disabled => Some(Run::new("ATS off", AMBER)),
        AtsEntry::Absent => Some(Run::new("no ATS", INK)),
        AtsEntry::Unknown => None,
    }
}

/// Runs joined with ` · ` into one line; None when there are none.
pub(crate) fn joined(runs: Vec<Run>) -> Option<Line> {
    let mut out = Vec::new();
    for r in runs {
        if !out.is_empty() {
            out.push(Run::new(" · ", INK));
        }
        out.push(r);
    }
    (!out.is_empty()).then_some(Line {
        runs: out,
        size: TEXT,
    })
}
