//! "Will P2P work in this VM?": every condition that decides it, as PASS,
//! WARN or FAIL with the evidence read and the fix, computed from facts the
//! host gathered (sysfs, /proc, /dev/kvm). Pure: the I/O lives in
//! `p2p-host`'s `check` module.

use serde::{Deserialize, Serialize};

use crate::bdf::Bdf;
use crate::classify::{classify_functions, PathClass, PeerRoute};
use crate::iommu_groups;
use crate::kernel_cmdline;
use crate::topology::Topology;

pub mod item;

pub use item::{CheckItem, Verdict};

/// Schema tag of `p2p-host check --json`.
pub const CHECK_SCHEMA: &str = "vp2p.check/1";

/// The VMM the VM will run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Vmm {
    /// QEMU with VFIO, which maps every assigned device's BARs for peers.
    Qemu,
    /// Cloud Hypervisor, which maps peer BARs only with `vfio_p2p_dma`.
    CloudHypervisor,
}

/// KVM as `/dev/kvm` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KvmFacts {
    /// Why it could not be opened, when it could not.
    pub unavailable: Option<String>,
    /// Whether KVM offers `KVM_CAP_IRQFD`, which VFIO passthrough needs.
    pub irqfd: bool,
    /// Whether KVM offers `KVM_CAP_IOEVENTFD`, which VFIO passthrough needs.
    pub ioeventfd: bool,
}

/// A memory BAR of a device, from sysfs `resource`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BarFacts {
    /// BAR number, 0-5.
    pub index: u8,
    /// Size of the BAR in bytes.
    pub size: u64,
    /// A 64-bit BAR, which the VM can map above 4 GiB.
    pub is_64bit: bool,
    /// A prefetchable BAR; peers need the large BAR 64-bit prefetchable.
    pub prefetchable: bool,
}

/// What the host could read; None where it could not (and the report says so).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HostFacts {
    /// `/proc/cmdline`.
    pub cmdline: Option<String>,
    /// `/proc/sys/kernel/osrelease`.
    pub kernel_release: Option<String>,
    /// Whether `/dev/iommu` (iommufd) exists.
    pub iommufd: Option<bool>,
    /// What `/dev/kvm` offers; None when not checked (a captured tree, not the live host).
    pub kvm: Option<KvmFacts>,
    /// Default domain type of each IOMMU group used (`kernel/iommu_groups/N/type`).
    pub group_types: Vec<(crate::IommuGroup, String)>,
    /// Memory BARs per device.
    pub bars: Vec<(Bdf, Vec<BarFacts>)>,
    /// The throughput registers of the devices and every bridge above them.
    #[serde(default)]
    pub pcie: Vec<crate::pcie_cost::PcieFacts>,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CheckReport {
    /// Schema tag, [`CHECK_SCHEMA`].
    pub schema: String,
    /// The VMM the conditions were checked for.
    pub vmm: Vmm,
    /// Every checked condition: host-wide first, then per device, then per pair.
    pub items: Vec<CheckItem>,
    /// The worst verdict.
    pub overall: Verdict,
}

impl CheckReport {
    /// Exit status: 0 all pass, 1 a FAIL, 2 only WARNs.
    pub fn exit_status(&self) -> i32 {
        match self.overall {
            Verdict::Pass => 0,
            Verdict::Fail => 1,
            Verdict::Warn => 2,
        }
    }
}

fn item(
    scope: &str,
    check: &str,
    verdict: Verdict,
    evidence: String,
    fix: Option<&str>,
) -> CheckItem {
    CheckItem {
        scope: scope.to_string(),
        check: check.to_string(),
        verdict,
        evidence,
        fix: fix.map(str::to_string),
        input: None,
    }
}

/// The parameters of a kernel command line that decide the IOMMU verdicts
/// (`iommu=`, `intel_iommu=`, `amd_iommu=`), in order, as the kernel reads
/// them ([`kernel_cmdline::params`]: quotes group, `--` ends the kernel's
/// part), or what says none is there: what the evidence quotes instead of the
/// whole line.
///
/// ```
/// use p2p_topology::check::iommu_tokens;
/// assert_eq!(
///     iommu_tokens("BOOT_IMAGE=/vmlinuz root=UUID=1 ro intel_iommu=on iommu=pt quiet"),
///     "intel_iommu=on iommu=pt"
/// );
/// assert_eq!(iommu_tokens("ro quiet"), "no iommu=, intel_iommu= or amd_iommu=");
/// // Inside a quoted value, or after `--`, they are not the kernel's.
/// assert_eq!(
///     iommu_tokens("dyndbg=\"module vfio intel_iommu=on\" -- iommu=pt"),
///     "no iommu=, intel_iommu= or amd_iommu="
/// );
/// ```
pub fn iommu_tokens(cmdline: &str) -> String {
    let tokens: Vec<String> = kernel_cmdline::params(cmdline)
        .iter()
        .filter(|p| {
            p.value.is_some()
                && ["iommu", "intel_iommu", "amd_iommu"]
                    .iter()
                    .any(|k| p.is(k))
        })
        .map(ToString::to_string)
        .collect();
    if tokens.is_empty() {
        "no iommu=, intel_iommu= or amd_iommu=".to_string()
    } else {
        tokens.join(" ")
    }
}

/// [`item`] whose evidence quotes part of `input`, kept whole for JSON.
fn item_quoting(
    scope: &str,
    check: &str,
    verdict: Verdict,
    evidence: String,
    fix: Option<&str>,
    input: &str,
) -> CheckItem {
    CheckItem {
        input: Some(input.to_string()),
        ..item(scope, check, verdict, evidence, fix)
    }
}

/// `major.minor` of a kernel release string (`6.1.0-56-cloud-amd64`).
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

fn host_items(topo: &Topology, facts: &HostFacts, vmm: Vmm, out: &mut Vec<CheckItem>) {
    let groups: std::collections::BTreeSet<crate::IommuGroup> = topo
        .functions
        .iter()
        .filter_map(|f| f.iommu_group)
        .collect();
    let cmd = facts.cmdline.as_deref();
    let params = cmd.map(kernel_cmdline::params).unwrap_or_default();
    let iommu_pt = params
        .iter()
        .any(|p| p.is("iommu") && p.value.as_deref() == Some("pt"));
    if groups.is_empty() {
        let fix = "turn the IOMMU on: intel_iommu=on (Intel) or amd_iommu=on (AMD) on the kernel command line, and VT-d/AMD-Vi in the firmware";
        out.push(match cmd {
            Some(c) => item_quoting(
                "host",
                "iommu",
                Verdict::Fail,
                format!(
                    "no IOMMU groups under kernel/iommu_groups; kernel command line: {}",
                    iommu_tokens(c)
                ),
                Some(fix),
                c,
            ),
            None => item(
                "host",
                "iommu",
                Verdict::Fail,
                "no IOMMU groups under kernel/iommu_groups; kernel command line not read".into(),
                Some(fix),
            ),
        });
    } else {
        out.push(item(
            "host",
            "iommu",
            Verdict::Pass,
            format!("{} IOMMU groups", groups.len()),
            None,
        ));
    }
    match cmd {
        None => out.push(item(
            "host",
            "iommu-mode",
            Verdict::Warn,
            "kernel command line not read (a captured tree has none)".into(),
            Some("run on the host itself to check iommu=pt"),
        )),
        Some(c) if iommu_pt => out.push(item_quoting(
            "host",
            "iommu-mode",
            Verdict::Pass,
            format!(
                "iommu=pt on the kernel command line (`{}`): host devices bypass translation, the VM's are translated",
                iommu_tokens(c)
            ),
            None,
            c,
        )),
        Some(c) => out.push(item_quoting(
            "host",
            "iommu-mode",
            Verdict::Warn,
            format!(
                "no iommu=pt on the kernel command line (`{}`)",
                iommu_tokens(c)
            ),
            Some("add iommu=pt: without it every host DMA is translated too, which slows the host and has broken P2P setups"),
            c,
        )),
    }
    for (g, t) in &facts.group_types {
        let ok = t.starts_with("DMA");
        out.push(item(
            "host",
            "group-domain",
            if ok { Verdict::Pass } else { Verdict::Warn },
            format!("IOMMU group {g}: default domain {t}"),
            (!ok).then_some("VFIO needs a translating (DMA) domain for a VM's group; an identity domain means the group is not isolated"),
        ));
    }
    match (&facts.kernel_release, facts.iommufd) {
        (Some(rel), iommufd) => {
            let v = kernel_version(rel);
            let old = v.is_some_and(|v| v < (6, 19));
            let (verdict, fix) = if iommufd == Some(true) && old {
                (Verdict::Warn, Some("with the iommufd backend peer BARs are mappable only from kernel 6.19 (dma-buf); use the legacy VFIO container (QEMU's default) or a newer kernel"))
            } else {
                (Verdict::Pass, None)
            };
            out.push(item(
                "host",
                "peer-bar-mapping",
                verdict,
                format!(
                    "kernel {rel}; iommufd {}",
                    match iommufd {
                        Some(true) => "present (/dev/iommu)",
                        Some(false) => "absent",
                        None => "not checked",
                    }
                ),
                fix,
            ));
        }
        (None, _) => out.push(item(
            "host",
            "peer-bar-mapping",
            Verdict::Warn,
            "kernel release not read (a captured tree has none)".into(),
            Some("run on the host itself"),
        )),
    }
    match &facts.kvm {
        None => out.push(item(
            "host",
            "kvm",
            Verdict::Warn,
            "not checked (a captured tree)".into(),
            Some("run on the host itself"),
        )),
        Some(k) => match &k.unavailable {
            Some(why) => out.push(item(
                "host",
                "kvm",
                Verdict::Fail,
                format!("/dev/kvm: {why}"),
                Some("load kvm_intel or kvm_amd and give the VMM access to /dev/kvm"),
            )),
            None => {
                let ok = k.irqfd && k.ioeventfd;
                out.push(item(
                    "host",
                    "kvm",
                    if ok { Verdict::Pass } else { Verdict::Fail },
                    format!("/dev/kvm: irqfd {}, ioeventfd {}", k.irqfd, k.ioeventfd),
                    (!ok).then_some("VFIO passthrough needs KVM_CAP_IRQFD and KVM_CAP_IOEVENTFD"),
                ));
            }
        },
    }
    out.push(match vmm {
        Vmm::Qemu => item(
            "host",
            "vmm-peer-mapping",
            Verdict::Pass,
            "QEMU maps every assigned device's BARs into the VM's IOMMU domain (VFIO type1), so peers can reach them".into(),
            None,
        ),
        Vmm::CloudHypervisor => item(
            "host",
            "vmm-peer-mapping",
            Verdict::Warn,
            "Cloud Hypervisor maps peer BARs only with vfio_p2p_dma".into(),
            Some("start it with --platform vfio_p2p_dma=on (the API's default)"),
        ),
    });
}

fn device_items(topo: &Topology, facts: &HostFacts, dev: Bdf, out: &mut Vec<CheckItem>) {
    let scope = dev.to_string();
    let Some(f) = topo.function(dev) else {
        out.push(item(
            &scope,
            "present",
            Verdict::Fail,
            "not a PCI function of this host".into(),
            None,
        ));
        return;
    };
    match f.driver.as_deref() {
        Some("vfio-pci") => out.push(item(
            &scope,
            "vfio-binding",
            Verdict::Pass,
            "bound to vfio-pci".into(),
            None,
        )),
        other => out.push(item(
            &scope,
            "vfio-binding",
            Verdict::Warn,
            format!("bound to {}", other.unwrap_or("no driver")),
            Some("bind it to vfio-pci before the VM starts (driverctl set-override BDF vfio-pci)"),
        )),
    }
    match topo.numa_of(dev) {
        Some(n) => out.push(item(&scope, "numa", Verdict::Pass, format!("NUMA node {n}"), None)),
        None => out.push(item(
            &scope,
            "numa",
            Verdict::Warn,
            "NUMA node unknown (-1)".into(),
            Some("the guest cannot be told its node; pin the VM to the node its host bridge belongs to by hand"),
        )),
    }
    if let Some((_, bars)) = facts.bars.iter().find(|(b, _)| *b == dev) {
        match bars.iter().max_by_key(|b| b.size) {
            None => out.push(item(
                &scope,
                "bars",
                Verdict::Warn,
                "no memory BAR found in `resource`".into(),
                None,
            )),
            Some(big) => {
                let ok = big.is_64bit && big.prefetchable;
                let list: Vec<String> = bars
                    .iter()
                    .map(|b| {
                        format!(
                            "BAR{} {}{}{}",
                            b.index,
                            crate::ByteSize(b.size),
                            if b.is_64bit { " 64-bit" } else { " 32-bit" },
                            if b.prefetchable { " prefetchable" } else { "" }
                        )
                    })
                    .collect();
                out.push(item(
                    &scope,
                    "bars",
                    if ok { Verdict::Pass } else { Verdict::Warn },
                    list.join(", "),
                    (!ok).then_some("the large BAR should be 64-bit prefetchable so the VM can map it above 4 GiB for peers; enable Above 4G Decoding / Resizable BAR in the firmware"),
                ));
            }
        }
    }
}

fn pair_items(topo: &Topology, a: Bdf, b: Bdf, out: &mut Vec<CheckItem>) {
    let (Some(fa), Some(fb)) = (topo.function(a), topo.function(b)) else {
        return;
    };
    let p = classify_functions(topo, fa, fb);
    let scope = format!("{a} {b}");
    if p.nvlink.is_some() {
        out.push(item(
            &scope,
            "route",
            Verdict::Pass,
            format!("{}: NVLink carries peer traffic", p.class),
            None,
        ));
        return;
    }
    let (verdict, evidence, fix) = match &p.route {
        PeerRoute::Switch { at } => (Verdict::Pass, format!("{}: turns in the switch at {at}, below the root complex", p.pcie_class), None),
        PeerRoute::AcsRedirect { at, redirected_by } => (
            Verdict::Warn,
            format!(
                "{}: meets at {at}, but ACS P2P Request Redirect on {} sends it up through the root complex and the IOMMU",
                p.pcie_class,
                redirected_by.iter().map(|b| b.to_string()).collect::<Vec<_>>().join(", ")
            ),
            Some("works when the root complex forwards peer requests (the VMM maps peer BARs), at a cost; for full speed the switch ports' ACS redirect must be off, which merges IOMMU groups"),
        ),
        PeerRoute::AcsUnknown { at, .. } => (
            Verdict::Warn,
            format!("{}: meets at {at}; ACS on the path could not be read", p.pcie_class),
            Some("run as root so the full config space (ACS) can be read"),
        ),
        PeerRoute::RootComplex { host_bridge } => (
            Verdict::Pass,
            format!("{}: through root complex {host_bridge}, translated by the IOMMU when it is on", p.pcie_class),
            None,
        ),
        PeerRoute::HostBridges | PeerRoute::Sockets | PeerRoute::UnknownNuma => (
            Verdict::Warn,
            format!("{}: across host bridges{}", p.pcie_class, if p.pcie_class == PathClass::Sys { " and sockets" } else { "" }),
            Some("PCIe P2P between root complexes is often unsupported or slow; vp2p's default level keeps such GPUs in different cliques"),
        ),
        PeerRoute::SameFunction => return,
    };
    out.push(item(&scope, "route", verdict, evidence, fix));
}

/// Checks every condition for the VMs' devices (GPUs and NICs; one list per
/// VM, `(name, devices)`).
pub fn check(
    topo: &Topology,
    facts: &HostFacts,
    vmm: Vmm,
    vms: &[(&str, Vec<Bdf>)],
) -> CheckReport {
    let mut items = Vec::new();
    host_items(topo, facts, vmm, &mut items);
    let refs: Vec<(&str, &[Bdf])> = vms.iter().map(|(n, d)| (*n, d.as_slice())).collect();
    match iommu_groups::check(topo, &refs) {
        Err(split) => items.push(item(
            "host",
            "iommu-groups",
            Verdict::Fail,
            split.to_string(),
            Some("give every device of a group to one VM"),
        )),
        Ok(groups) => {
            for g in groups {
                let scope = format!("group {}", g.group);
                match g.warning {
                    Some(w) => items.push(item(&scope, "iommu-group", Verdict::Fail, w, Some("bind the other endpoints to vfio-pci (or give them to the VM), or enable ACS so they are split into groups of their own"))),
                    None => items.push(item(
                        &scope,
                        "iommu-group",
                        Verdict::Pass,
                        format!(
                            "holds only the VM's devices and bridges ({} function(s))",
                            g.members.len()
                        ),
                        None,
                    )),
                }
            }
        }
    }
    for (_, devs) in vms {
        for d in devs {
            device_items(topo, facts, *d, &mut items);
        }
        for (i, a) in devs.iter().enumerate() {
            for b in &devs[i + 1..] {
                pair_items(topo, *a, *b, &mut items);
            }
        }
        let iommu = topo.functions.iter().any(|f| f.iommu_group.is_some());
        crate::pcie_cost::cost_items(topo, &facts.pcie, devs, iommu, &mut items);
    }
    let overall = items
        .iter()
        .map(|i| i.verdict)
        .max()
        .unwrap_or(Verdict::Pass);
    CheckReport {
        schema: CHECK_SCHEMA.into(),
        vmm,
        items,
        overall,
    }
}
