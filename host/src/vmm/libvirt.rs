//! libvirt: `<hostdev>` elements with user aliases and the `<qemu:override>`
//! block that sets `x-nv-gpudirect-clique` (libvirt has no element for it).

use std::fmt::Write;

use p2p_shared::clique::CliquePlan;
use p2p_shared::Bdf;

use super::device_id;

/// The namespace the domain element must declare for `<qemu:override>`.
pub const QEMU_NAMESPACE: &str = "http://libvirt.org/schemas/domain/qemu/1.0";

/// One `<hostdev>` element for a GPU.
pub fn hostdev(bdf: &Bdf, alias: &str) -> String {
    format!(
        "<hostdev mode='subsystem' type='pci' managed='yes'>\n  \
         <source>\n    \
         <address domain='{:#06x}' bus='{:#04x}' slot='{:#04x}' function='{:#x}'/>\n  \
         </source>\n  \
         <alias name='{alias}'/>\n\
         </hostdev>\n",
        bdf.domain, bdf.bus, bdf.device, bdf.function
    )
}

/// The `<qemu:override>` block for a VM's GPUs.
pub fn qemu_override(plan: &CliquePlan) -> String {
    let mut out = String::from("<qemu:override>\n");
    for (i, a) in plan.assignments.iter().enumerate() {
        let _ = write!(
            out,
            "  <qemu:device alias='{}'>\n    <qemu:frontend>\n      \
             <qemu:property name='x-nv-gpudirect-clique' type='unsigned' value='{}'/>\n    \
             </qemu:frontend>\n  </qemu:device>\n",
            device_id(i),
            a.clique.id()
        );
    }
    out.push_str("</qemu:override>\n");
    out
}

fn indent(text: &str, by: &str) -> String {
    text.lines().map(|l| format!("{by}{l}\n")).collect()
}

/// The fragments a user pastes: hostdevs into `<devices>`, the override as a
/// child of `<domain>`, which must declare `xmlns:qemu`.
pub fn fragments(plan: &CliquePlan) -> String {
    let mut out = format!(
        "<!-- {}.\n     The <domain> element needs xmlns:qemu='{QEMU_NAMESPACE}'. -->\n\
         <!-- Inside <devices>: -->\n",
        super::summary(plan)
    );
    for (i, a) in plan.assignments.iter().enumerate() {
        out.push_str(&hostdev(&a.bdf, &device_id(i)));
    }
    out.push_str("<!-- Inside <domain>, after <devices>: -->\n");
    out.push_str(&qemu_override(plan));
    out
}

/// A complete minimal domain holding the fragments, for validation and as an
/// example of where they go.
pub fn example_domain(plan: &CliquePlan) -> String {
    let mut devices = String::new();
    for (i, a) in plan.assignments.iter().enumerate() {
        devices.push_str(&hostdev(&a.bdf, &device_id(i)));
    }
    format!(
        "<domain type='kvm' xmlns:qemu='{QEMU_NAMESPACE}'>\n  \
         <name>{}</name>\n  <memory unit='GiB'>16</memory>\n  <vcpu>4</vcpu>\n  \
         <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n  </os>\n  \
         <devices>\n{}  </devices>\n{}</domain>\n",
        xml_text(&plan.vm),
        indent(&devices, "    "),
        indent(&qemu_override(plan), "  ")
    )
}

fn xml_text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
