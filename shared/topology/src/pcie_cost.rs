//! "Will P2P be fast?": the PCIe settings that cost peer-to-peer and
//! GPUDirect RDMA bandwidth in a VM, read from config space, each with what
//! it costs and the fix: ATS and ACS Direct Translated P2P (which route a
//! peer request takes), relaxed ordering, trained link width and speed, and
//! payload and read request sizes. Pure: `p2p-host` reads the registers.

use serde::{Deserialize, Serialize};

use crate::bdf::Bdf;
use crate::check::item::{CheckItem, Verdict};
use crate::classify::{classify_functions, PeerRoute};
use crate::pci::{Ats, DeviceControl, LinkCapabilities, LinkStatus, PciePortType};
use crate::topology::{AcsState, Topology};

/// The registers of one function that decide throughput, as read from its
/// config space (the devices of the VMs and every bridge above them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PcieFacts {
    /// The function.
    pub bdf: Bdf,
    /// Bytes of config space read: ATS lives past 256, so fewer leaves it unknown.
    pub config_len: usize,
    /// The ATS extended capability (ID 0x000F); None when absent or not readable.
    pub ats: Option<Ats>,
    /// Device Control (PCIe capability +0x08).
    pub device_control: Option<DeviceControl>,
    /// Link Capabilities (PCIe capability +0x0C).
    pub link_capabilities: Option<LinkCapabilities>,
    /// Link Status (PCIe capability +0x12).
    pub link_status: Option<LinkStatus>,
}

impl PcieFacts {
    /// Whether the extended space (where ATS lives) was read.
    pub fn extended_read(&self) -> bool {
        self.config_len > crate::pci::CONFIG_LEGACY_LEN
    }

    fn ats_enabled(&self) -> bool {
        self.ats.is_some_and(|a| a.enabled)
    }
}

fn find(facts: &[PcieFacts], bdf: Bdf) -> Option<&PcieFacts> {
    facts.iter().find(|f| f.bdf == bdf)
}

fn item(
    scope: &str,
    check: &str,
    verdict: Verdict,
    evidence: String,
    fix: Option<String>,
) -> CheckItem {
    CheckItem {
        scope: scope.to_string(),
        check: check.to_string(),
        verdict,
        evidence,
        fix,
        input: None,
    }
}

/// Payload efficiency of a TLP: payload / (payload + 24 bytes of header,
/// sequence number, LCRC and framing), the overhead Xilinx WP350
/// ("Understanding Performance of PCI Express Systems") counts.
fn efficiency(payload: u16) -> u32 {
    (u32::from(payload) * 100) / (u32::from(payload) + 24)
}

fn gts(v: f32) -> String {
    format!("{v} GT/s")
}

/// The links on a device's way to the root complex: (lower end, upper end).
/// A link joins an endpoint or a switch's upstream port to the root port or
/// downstream port above it; the hop inside a switch is no link. A device on
/// the root bus (as in a VM's flat bus) has its own link, whose other end
/// the tree does not hold.
fn links_up(topo: &Topology, dev: Bdf) -> Vec<(Bdf, Option<Bdf>)> {
    let mut out = Vec::new();
    let mut cur = dev;
    for up in topo.ancestors(dev) {
        let ty = topo.function(up).and_then(|f| f.pcie_port_type);
        if matches!(
            ty,
            Some(PciePortType::RootPort | PciePortType::SwitchDownstream)
        ) {
            out.push((cur, Some(up)));
        }
        cur = up;
    }
    if out.is_empty() {
        out.push((dev, None));
    }
    out
}

fn device_items(
    topo: &Topology,
    facts: &[PcieFacts],
    dev: Bdf,
    iommu: bool,
    out: &mut Vec<CheckItem>,
) {
    let scope = dev.to_string();
    let Some(f) = find(facts, dev) else {
        out.push(item(
            &scope,
            "pcie-registers",
            Verdict::Warn,
            "config space not read".into(),
            Some("run as root".into()),
        ));
        return;
    };
    // ATS, extended capability 0x000F; ATS Control bit 15 is Enable.
    out.push(match (f.ats, f.extended_read()) {
        (_, false) => item(&scope, "ats", Verdict::Warn, format!("only {} bytes of config space readable; ATS lives in the extended space", f.config_len), Some("run as root".into())),
        (None, true) if !iommu => item(&scope, "ats", Verdict::Pass, "no ATS capability (0x000F); no IOMMU, nothing to translate".into(), None),
        (None, true) => item(&scope, "ats", Verdict::Pass, "no ATS capability (0x000F): its requests carry untranslated addresses, which only the IOMMU at the root complex translates".into(), None),
        (Some(a), true) if a.enabled => item(&scope, "ats", Verdict::Pass, format!("ATS at {:#x} enabled (ATS Control bit 15)", a.offset), None),
        (Some(a), true) if !iommu => item(&scope, "ats", Verdict::Pass, format!("ATS at {:#x} off (ATS Control bit 15 clear); no IOMMU, nothing to translate", a.offset), None),
        (Some(a), true) => item(&scope, "ats", Verdict::Warn, format!("ATS at {:#x} present but off (ATS Control bit 15 clear): its peer requests can be translated only at the root complex", a.offset),
            Some("enable ATS in the firmware (the DMAR ATSR / IVRS table must list the root port); the kernel turns it on when it attaches the device; never set it with setpci".into())),
    });
    let Some(dc) = f.device_control else {
        out.push(item(
            &scope,
            "pcie-registers",
            Verdict::Warn,
            format!(
                "Device Control not readable ({} bytes of config space, or no PCI Express capability): relaxed ordering, read request size and link unknown",
                f.config_len
            ),
            Some("run as root (the kernel gives others 64 bytes)".into()),
        ));
        return;
    };
    let rdma_nic = topo.function(dev).is_some_and(|f| f.has_rdma());
    // Device Control bit 4, Enable Relaxed Ordering.
    out.push(if dc.relaxed_ordering {
        item(&scope, "relaxed-ordering", Verdict::Pass, "Enable Relaxed Ordering on (Device Control bit 4)".into(), None)
    } else {
        item(&scope, "relaxed-ordering", Verdict::Warn,
            "Enable Relaxed Ordering off (Device Control bit 4): strictly ordered writes; NCCL calls RO very important with ACS and ATS on, i.e. in VMs (NVIDIA/nccl#1205)".into(),
            Some(format!("setpci -s {dev} CAP_EXP+8.w=0010:0010{}", if rdma_nic { "; NCCL_IB_PCI_RELAXED_ORDERING=1" } else { "; for GPUDirect RDMA NCCL_IB_PCI_RELAXED_ORDERING=1" })))
    });
    // Device Control bits 14:12, Max_Read_Request_Size.
    out.push(if dc.max_read_request >= 512 {
        item(&scope, "max-read-request", Verdict::Pass, format!("{} B (Device Control bits 14:12)", dc.max_read_request), None)
    } else {
        item(&scope, "max-read-request", Verdict::Warn,
            format!("{} B (Device Control bits 14:12): reads split into more requests, each waiting for its completions", dc.max_read_request),
            Some(format!("setpci -s {dev} CAP_EXP+8.w=5000:7000 (bits 14:12 = 5, 4096 B)")))
    });
    link_items(topo, facts, dev, &scope, out);
}

/// Width and speed of every link from `dev` up to the root complex, each
/// compared with what both ends can do (Link Capabilities): a link never
/// trains wider or faster than its narrower, slower end.
fn link_items(
    topo: &Topology,
    facts: &[PcieFacts],
    dev: Bdf,
    scope: &str,
    out: &mut Vec<CheckItem>,
) {
    let mut narrow = Vec::new();
    let mut slow = Vec::new();
    let mut seen = Vec::new();
    for (lo, hi) in links_up(topo, dev) {
        let (Some(l), h) = (find(facts, lo), hi.and_then(|hi| find(facts, hi))) else {
            continue;
        };
        let name = hi.map_or_else(|| lo.to_string(), |hi| format!("{lo}-{hi}"));
        let (Some(st), Some(cap)) = (l.link_status, l.link_capabilities) else {
            continue;
        };
        let hcap = h.and_then(|h| h.link_capabilities);
        let both = |a: u8, b: Option<u8>| match b {
            Some(b) if b > 0 && a > 0 => a.min(b),
            _ => a,
        };
        let width = both(cap.max_width, hcap.map(|c| c.max_width));
        let speed = match (cap.max_speed_gts, hcap.and_then(|c| c.max_speed_gts)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        seen.push(format!("{name} x{} {}", st.width, gts(st.speed_gts)));
        if width > 0 && st.width < width {
            narrow.push(format!("{name} x{} of x{width}", st.width));
        }
        if let Some(s) = speed.filter(|s| st.speed_gts < *s) {
            slow.push(format!("{name} {} of {}", gts(st.speed_gts), gts(s)));
        }
    }
    if seen.is_empty() {
        return;
    }
    out.push(if narrow.is_empty() {
        item(scope, "link-width", Verdict::Pass, format!("every link at the width both ends can do: {}", seen.join(", ")), None)
    } else {
        item(scope, "link-width", Verdict::Fail,
            format!("trained narrower than both ends can (Link Status bits 9:4 vs Link Capabilities bits 9:4): {}; bandwidth falls with the lanes (x8 is half of x16) and idling does not narrow a link", narrow.join(", ")),
            Some("reseat the card, check the riser and the slot's bifurcation setting in the firmware; then setpci -s PORT CAP_EXP+10.w=0020:0020 (Link Control bit 5, Retrain Link) on the port above".into()))
    });
    out.push(if slow.is_empty() {
        item(scope, "link-speed", Verdict::Pass, "every link at the speed both ends can do".into(), None)
    } else {
        item(scope, "link-speed", Verdict::Pass,
            format!("below the speed both ends can do (Link Status bits 3:0): {}; normal when idle, the link trains up under load", slow.join(", ")),
            Some(format!("check under load: sudo lspci -vv -s {dev} | grep LnkSta while a transfer runs; still low then, set the slot's PCIe speed to Auto/Gen5 in the firmware")))
    });
}

fn pair_items(
    topo: &Topology,
    facts: &[PcieFacts],
    a: Bdf,
    b: Bdf,
    iommu: bool,
    out: &mut Vec<CheckItem>,
) {
    let (Some(fa), Some(fb)) = (topo.function(a), topo.function(b)) else {
        return;
    };
    let p = classify_functions(topo, fa, fb);
    if p.nvlink.is_some() {
        return;
    }
    let scope = format!("{a} {b}");
    // Max_Payload_Size, Device Control bits 7:5, of every function the request crosses.
    let hops: Vec<Bdf> = std::iter::once(a)
        .chain(p.bridges.iter().map(|x| x.bdf))
        .chain(std::iter::once(b))
        .collect();
    let mps: Vec<(Bdf, u16)> = hops
        .iter()
        .filter_map(|h| {
            find(facts, *h)
                .and_then(|f| f.device_control)
                .map(|d| (*h, d.max_payload))
        })
        .collect();
    if let Some(min) = mps.iter().map(|m| m.1).min() {
        let max = mps.iter().map(|m| m.1).max().unwrap_or(min);
        out.push(if min == max {
            item(&scope, "max-payload", Verdict::Pass, format!("{min} B on all {} functions of the path (Device Control bits 7:5): about {}% of the link carries data", mps.len(), efficiency(min)), None)
        } else {
            let small: Vec<String> = mps.iter().filter(|m| m.1 == min).map(|m| m.0.to_string()).collect();
            item(&scope, "max-payload", Verdict::Warn,
                format!("{min} to {max} B along the path (Device Control bits 7:5): the pair is capped at {min} B (about {}% data) by {}", efficiency(min), small.join(", ")),
                Some("boot the host with pci=pcie_bus_safe (the largest size every device supports) so the whole hierarchy agrees".into()))
        });
    }
    let check = if fa.has_rdma() || fb.has_rdma() {
        "gpudirect-path"
    } else {
        "peer-path"
    };
    let ats_off: Vec<String> = [a, b]
        .iter()
        .filter(|d| !find(facts, **d).is_some_and(PcieFacts::ats_enabled))
        .map(|d| d.to_string())
        .collect();
    let (verdict, evidence, fix) = match &p.route {
        _ if !iommu => (Verdict::Pass, "not translated: no IOMMU, requests carry host bus addresses and take the shortest way".to_string(), None),
        PeerRoute::Switch { at } if ats_off.is_empty() => (Verdict::Pass, format!("direct through the switch at {at}: ATS on at both ends, requests carry translated addresses"), None),
        PeerRoute::Switch { at } => (Verdict::Warn,
            format!("turns in the switch at {at} untranslated (ATS off on {}, no ACS redirect): the switch decodes the VM's I/O addresses as host bus addresses, so requests reach the peer only through the root complex, or a wrong device where the two collide", ats_off.join(", ")),
            Some("turn ACS P2P Request Redirect on at the switch's downstream ports (requests then go up to be translated), or ATS on at both ends".to_string())),
        PeerRoute::AcsRedirect { at, redirected_by } => {
            let no_dt: Vec<Bdf> = redirected_by.iter().copied().filter(|r| !matches!(topo.function(*r).map(|f| &f.acs), Some(AcsState::Present(x)) if x.control.direct_translated)).collect();
            if ats_off.is_empty() && no_dt.is_empty() {
                (Verdict::Pass, format!("direct through the switch at {at}: ATS on at both ends and ACS Direct Translated P2P (control bit 6) on {}", list(redirected_by)), None)
            } else {
                let mut why = Vec::new();
                let mut fixes = Vec::new();
                if !ats_off.is_empty() {
                    why.push(format!("ATS off on {}", ats_off.join(", ")));
                    fixes.push("ATS on in the firmware".to_string());
                }
                if !no_dt.is_empty() {
                    why.push(format!("ACS Direct Translated P2P (control bit 6) off on {}", list(&no_dt)));
                    fixes.extend(no_dt.iter().map(|r| {
                        let can = matches!(topo.function(*r).map(|f| &f.acs), Some(AcsState::Present(x)) if x.capability.direct_translated);
                        if can {
                            format!("setpci -s {r} ECAP_ACS+6.w=0040:0040")
                        } else {
                            format!("{r} cannot do DT (ACS Capability bit 6 clear): only turning its P2P Request Redirect off (bit 2; merges IOMMU groups) shortens the path")
                        }
                    }));
                }
                (Verdict::Warn,
                    format!("up to the root complex to be translated, though the pair meets at {at}: ACS redirect with {}; every request climbs to the root complex and comes back down, leaving the switch's own bandwidth unused", why.join(" and ")),
                    Some(fixes.join("; ")))
            }
        }
        PeerRoute::AcsUnknown { at, .. } => (Verdict::Warn, format!("meets at {at}; ACS on the path not read"), Some("run as root".to_string())),
        PeerRoute::RootComplex { host_bridge } => (Verdict::Pass, format!("through root complex {host_bridge}, where the IOMMU translates (the paths meet nowhere lower)"), None),
        PeerRoute::HostBridges | PeerRoute::Sockets | PeerRoute::UnknownNuma => (Verdict::Pass, "across root complexes, translated by the IOMMU".to_string(), None),
        PeerRoute::SameFunction => return,
    };
    out.push(item(&scope, check, verdict, evidence, fix));
}

fn list(b: &[Bdf]) -> String {
    b.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The throughput checks for one VM's devices: per device (ATS, relaxed
/// ordering, read request size, link width and speed up to the root) and per
/// pair (payload size along the path, the route a peer request takes).
/// `iommu`: the host translates DMA (it has IOMMU groups).
pub fn cost_items(
    topo: &Topology,
    facts: &[PcieFacts],
    devs: &[Bdf],
    iommu: bool,
    out: &mut Vec<CheckItem>,
) {
    for d in devs {
        device_items(topo, facts, *d, iommu, out);
    }
    for (i, a) in devs.iter().enumerate() {
        for b in &devs[i + 1..] {
            pair_items(topo, facts, *a, *b, iommu, out);
        }
    }
}

/// What a peer route costs a copy, for people who see only the bandwidth
/// (`p2p-guest doctor` in the VM): the likely cause and what to ask the
/// host operator. The same knowledge as the `peer-path` item above, without
/// the host's registers. None where the route costs nothing by itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RouteCost {
    /// Why the route is slower than a direct one.
    pub cause: String,
    /// What to ask the host operator.
    pub ask_host: String,
}

/// The cost of `route` for a copy between two passed-through GPUs;
/// `ats_both`: ATS on at both GPUs (as far as known).
pub fn route_cost(route: &PeerRoute, ats_both: bool) -> Option<RouteCost> {
    let cost = |cause: String, ask: &str| {
        Some(RouteCost {
            cause,
            ask_host: ask.to_string(),
        })
    };
    match route {
        PeerRoute::SameFunction => None,
        PeerRoute::Switch { .. } if ats_both => None,
        PeerRoute::Switch { at } => cost(
            format!("the pair meets in the switch at {at} without ATS: untranslated requests reach the peer only through the root complex"),
            "turn ATS on for both GPUs (firmware, DMAR ATSR / IVRS) or ACS P2P Request Redirect on at the switch's downstream ports; `p2p-host check` names the ports",
        ),
        PeerRoute::AcsRedirect { at, .. } => cost(
            format!("ACS redirect sends every request up to the root complex to be translated, though the pair meets at {at}; the switch's own bandwidth stays unused"),
            "turn ATS on at both GPUs and ACS Direct Translated P2P (control bit 6) on the redirecting ports (`setpci -s PORT ECAP_ACS+6.w=0040:0040`); `p2p-host check` lists them",
        ),
        PeerRoute::AcsUnknown { at, .. } => cost(
            format!("the pair meets at {at}, but ACS on the path was not read: requests may climb to the root complex"),
            "run `p2p-host check` as root on the host and send its peer-path item",
        ),
        PeerRoute::RootComplex { host_bridge } => cost(
            format!("peer requests turn in root complex {host_bridge}, where the IOMMU translates them: the root complex's peer forwarding caps the copy"),
            "give the VM GPUs that share a PCIe switch (with ATS and ACS Direct Translated P2P on), or GPUs joined by NVLink",
        ),
        PeerRoute::HostBridges | PeerRoute::UnknownNuma => cost(
            "peer requests cross between host bridges of the root complex, the slowest PCIe peer path of a socket".into(),
            "give the VM GPUs below one host bridge, ideally one PCIe switch",
        ),
        PeerRoute::Sockets => cost(
            "peer requests cross the link between sockets (SYS), where PCIe peer copies run far below the link rate".into(),
            "give the VM GPUs of one socket (one NUMA node), ideally below one PCIe switch",
        ),
    }
}
