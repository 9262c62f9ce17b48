//! libvirt: `<hostdev>` elements with user aliases and pinned guest addresses,
//! the `<qemu:override>` block that sets `x-nv-gpudirect-clique` (libvirt has
//! no element for it), and for a mirrored layout the PCI controllers
//! (`pcie-expander-bus`, `pcie-root-port`, switch ports) with the host's link
//! set through the same override, and the NCCL file as a fw_cfg entry.

use std::collections::BTreeMap;
use std::fmt::Write;

use p2p_allocation::clique::CliquePlan;
use p2p_topology::guest_layout::{GuestDevice, GuestLayout, GuestTopology, PortKind};
use p2p_topology::nccl_topo::FW_CFG_NAME;
use p2p_topology::Bdf;

use super::EmitOptions;

mod domain;
mod edits;
mod mirror;
mod patch;
mod xml;

pub use domain::{Domain, DomainError};
pub use patch::{patch_domain, FwCfgVia, NcclEntry, PatchError, PatchOptions, Patched};

/// The namespace the domain element must declare for `<qemu:override>`.
pub const QEMU_NAMESPACE: &str = "http://libvirt.org/schemas/domain/qemu/1.0";

/// QEMU's vfio-pci property that gives a GPU its P2P clique.
pub const CLIQUE_PROPERTY: &str = "x-nv-gpudirect-clique";

/// One `<hostdev>` element for a GPU, placed by libvirt.
pub fn hostdev(bdf: &Bdf, alias: &str) -> String {
    placed_hostdev(bdf, alias, None)
}

/// A `<hostdev>` with its guest address: `(controller index, slot, function,
/// multifunction)`; libvirt's `bus` is the index of the controller it plugs into.
pub(crate) fn placed_hostdev(bdf: &Bdf, alias: &str, at: Option<(u32, u8, u8, bool)>) -> String {
    let mut out = format!(
        "<hostdev mode='subsystem' type='pci' managed='yes'>\n  \
         <source>\n    \
         <address domain='{:#06x}' bus='{:#04x}' slot='{:#04x}' function='{:#x}'/>\n  \
         </source>\n  \
         <alias name='{alias}'/>\n",
        bdf.domain, bdf.bus, bdf.device, bdf.function
    );
    if let Some((bus, slot, function, multi)) = at {
        let _ = writeln!(
            out,
            "  <address type='pci' domain='0x0000' bus='{bus:#04x}' slot='{slot:#04x}' function='{function:#x}'{}/>",
            if multi { " multifunction='on'" } else { "" }
        );
    }
    out.push_str("</hostdev>\n");
    out
}

/// libvirt controller indexes for the mirrored root complexes and ports.
pub(crate) fn controller_indexes(guest: &GuestTopology, first: u32) -> BTreeMap<String, u32> {
    let mut idx = BTreeMap::new();
    idx.insert("pcie.0".to_string(), 0);
    let ids = guest
        .root_complexes
        .iter()
        .map(|r| &r.id)
        .chain(guest.ports.iter().map(|p| &p.id));
    for (i, id) in ids.enumerate() {
        idx.insert(id.clone(), first + i as u32);
    }
    idx
}

/// Each mirrored controller's alias and element, parents first.
pub(crate) fn controller_elements(
    guest: &GuestTopology,
    idx: &BTreeMap<String, u32>,
) -> Vec<(String, String)> {
    let mut all = Vec::new();
    for rc in &guest.root_complexes {
        let target = match rc.numa_node {
            Some(n) => format!(
                "<target busNr='{}'>\n    <node>{n}</node>\n  </target>",
                rc.bus_nr
            ),
            None => format!("<target busNr='{}'/>", rc.bus_nr),
        };
        all.push((
            rc.id.clone(),
            format!(
                "<controller type='pci' index='{}' model='pcie-expander-bus'>\n  \
             <model name='pxb-pcie'/>\n  \
             {target}\n  \
             <alias name='{}'/>\n  \
             <address type='pci' domain='0x0000' bus='0x00' slot='{:#04x}' function='0x0'/>\n\
             </controller>\n",
                idx[&rc.id], rc.id, rc.slot
            ),
        ));
    }
    for p in &guest.ports {
        let (model, name) = match p.kind {
            PortKind::RootPort => ("pcie-root-port", "pcie-root-port"),
            PortKind::SwitchUpstream => ("pcie-switch-upstream-port", "x3130-upstream"),
            PortKind::SwitchDownstream => ("pcie-switch-downstream-port", "xio3130-downstream"),
        };
        let target = p.chassis.map_or(String::new(), |c| {
            format!("  <target chassis='{c}' port='{:#x}'/>\n", p.guest.device)
        });
        all.push((
            p.id.clone(),
            format!(
                "<controller type='pci' index='{}' model='{model}'>\n  \
             <model name='{name}'/>\n{target}  \
             <alias name='{}'/>\n  \
             <address type='pci' domain='0x0000' bus='{:#04x}' slot='{:#04x}' function='0x0'/>\n\
             </controller>\n",
                idx[&p.id], p.id, idx[&p.parent], p.guest.device
            ),
        ));
    }
    all
}

pub(crate) fn controllers(guest: &GuestTopology, idx: &BTreeMap<String, u32>) -> String {
    controller_elements(guest, idx)
        .into_iter()
        .map(|(_, e)| e)
        .collect()
}

fn device_hostdev(d: &GuestDevice, idx: &BTreeMap<String, u32>) -> String {
    let bus = idx.get(&d.parent).copied().unwrap_or(0);
    placed_hostdev(
        &d.host,
        &d.id,
        Some((bus, d.guest.device, d.guest.function, d.multifunction)),
    )
}

/// One `<qemu:property>` of a device's frontend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Property {
    /// QEMU's property name.
    pub name: &'static str,
    /// libvirt's type for it: `unsigned`, `string`, ...
    pub ty: &'static str,
    /// The value as QEMU reads it.
    pub value: String,
}

impl Property {
    fn new(name: &'static str, ty: &'static str, value: impl std::fmt::Display) -> Self {
        Property {
            name,
            ty,
            value: value.to_string(),
        }
    }

    /// `<qemu:property name=... type=... value=.../>`.
    pub fn render(&self) -> String {
        format!(
            "<qemu:property name='{}' type='{}' value='{}'/>",
            self.name,
            self.ty,
            xml_text(&self.value)
        )
    }
}

/// The frontend properties vp2p sets, per device alias: the clique of every
/// GPU, the link of every mirrored root port.
pub fn override_properties(
    plan: &CliquePlan,
    guest: &GuestTopology,
) -> Vec<(String, Vec<Property>)> {
    let mut out = Vec::new();
    for (i, a) in plan.assignments.iter().enumerate() {
        let id = guest
            .devices
            .iter()
            .find(|d| d.host == a.bdf)
            .map_or_else(|| super::device_id(i), |d| d.id.clone());
        let clique = Property::new(CLIQUE_PROPERTY, "unsigned", a.clique.id());
        out.push((id, vec![clique]));
    }
    for p in &guest.ports {
        if let (Some(l), true) = (p.link, p.kind.has_link_properties()) {
            out.push((
                p.id.clone(),
                vec![
                    Property::new("x-speed", "string", l.speed.qemu()),
                    Property::new("x-width", "string", l.width),
                ],
            ));
        }
    }
    out
}

/// `<qemu:device alias=...>` with its frontend properties.
pub fn override_device(alias: &str, props: &[Property]) -> String {
    let mut out = format!(
        "<qemu:device alias='{}'>\n  <qemu:frontend>\n",
        xml_text(alias)
    );
    for p in props {
        let _ = writeln!(out, "    {}", p.render());
    }
    out.push_str("  </qemu:frontend>\n</qemu:device>\n");
    out
}

/// The `<qemu:override>` block: clique per GPU, link per mirrored port.
pub fn qemu_override(plan: &CliquePlan, guest: &GuestTopology) -> String {
    let mut out = String::from("<qemu:override>\n");
    for (alias, props) in override_properties(plan, guest) {
        out.push_str(&indent(&override_device(&alias, &props), "  "));
    }
    out.push_str("</qemu:override>\n");
    out
}

pub(crate) fn indent(text: &str, by: &str) -> String {
    text.lines().map(|l| format!("{by}{l}\n")).collect()
}

/// `<sysinfo type='fwcfg'>` handing the NCCL file to the guest.
pub(crate) fn fw_cfg(path: &str) -> String {
    format!(
        "<sysinfo type='fwcfg'>\n  <entry name='{FW_CFG_NAME}' file='{}'/>\n</sysinfo>\n",
        xml_text(path)
    )
}

/// What the `<cpu>` element of a mirrored domain must hold.
fn numa_comment(guest: &GuestTopology) -> String {
    if guest.numa_nodes.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "<!-- The domain's <cpu> must define these guest NUMA cells\n     (<numa><cell id='N' cpus='...' memory='...'/></numa>), each cell's vCPUs pinned\n     (<cputune><vcpupin>) to the host CPUs named:\n",
    );
    for n in &guest.numa_nodes {
        let _ = writeln!(out, "       cell {n}");
    }
    out.push_str("-->\n");
    out
}

/// The fragments a user pastes: controllers and hostdevs into `<devices>`,
/// the override and the fw_cfg entry as children of `<domain>`, which must
/// declare `xmlns:qemu`.
pub fn fragments(plan: &CliquePlan, guest: &GuestTopology, opts: &EmitOptions) -> String {
    let idx = controller_indexes(guest, opts.libvirt_first_index);
    let mut out = format!(
        "<!-- {}; guest topology {}.\n     The <domain> element needs xmlns:qemu='{QEMU_NAMESPACE}'. -->\n",
        super::summary(plan),
        super::layout_name(guest.layout)
    );
    if guest.layout == GuestLayout::Mirror {
        let _ = writeln!(
            out,
            "<!-- Controller indexes start at {}: the first index the domain does not use\n     (--libvirt-first-index). -->",
            opts.libvirt_first_index
        );
    }
    out.push_str(&numa_comment(guest));
    out.push_str("<!-- Inside <devices>: -->\n");
    out.push_str(&controllers(guest, &idx));
    for d in &guest.devices {
        out.push_str(&device_hostdev(d, &idx));
    }
    out.push_str("<!-- Inside <domain>, after <devices>: -->\n");
    out.push_str(&qemu_override(plan, guest));
    if let Some(path) = opts.nccl_topo_path(&plan.vm) {
        out.push_str("<!-- Inside <domain>: the NCCL topology for the guest (fw_cfg). -->\n");
        out.push_str(&fw_cfg(&path));
    }
    out
}

/// A complete minimal domain holding the fragments, for validation and as an
/// example of where they go.
pub fn example_domain(plan: &CliquePlan, guest: &GuestTopology, opts: &EmitOptions) -> String {
    let idx = controller_indexes(guest, opts.libvirt_first_index);
    let mut devices = controllers(guest, &idx);
    for d in &guest.devices {
        devices.push_str(&device_hostdev(d, &idx));
    }
    let cells = guest.numa_nodes.len().max(1);
    let cpu = if guest.numa_nodes.is_empty() {
        String::new()
    } else {
        let mut c = String::from("  <cpu>\n    <numa>\n");
        for n in &guest.numa_nodes {
            let _ = writeln!(
                c,
                "      <cell id='{}' cpus='{}' memory='4' unit='GiB'/>",
                n.guest, n.guest
            );
        }
        c.push_str("    </numa>\n  </cpu>\n");
        c
    };
    let sysinfo = opts
        .nccl_topo_path(&plan.vm)
        .map_or(String::new(), |p| indent(&fw_cfg(&p), "  "));
    format!(
        "<domain type='kvm' xmlns:qemu='{QEMU_NAMESPACE}'>\n  \
         <name>{}</name>\n  <memory unit='GiB'>{}</memory>\n  <vcpu>{cells}</vcpu>\n{sysinfo}  \
         <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n  </os>\n{cpu}  \
         <devices>\n{}  </devices>\n{}</domain>\n",
        xml_text(&plan.vm),
        4 * cells,
        indent(&devices, "    "),
        indent(&qemu_override(plan, guest), "  ")
    )
}

/// `s` escaped for XML text and for attribute values in either quote.
pub(crate) fn xml_text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('\'', "&apos;")
        .replace('"', "&quot;")
}
