//! Writing the XML NCCL parses: its own attribute names and order (as in
//! NCCL's `NCCL_TOPO_DUMP_FILE` output), two-space indentation, no comments
//! (NCCL's reader has no use for them).

use std::fmt::Write;

use super::{NcclCpu, NcclPci, NcclSystem, NCCL_TOPO_VERSION};

/// The bus id the placeholder `<nvlink>` points at, as a literal for `concat!`.
macro_rules! placeholder_target {
    () => {
        "0000:fe:1f.0"
    };
}

fn attr(out: &mut String, name: &str, value: impl std::fmt::Display) {
    let v = value.to_string();
    let escaped = v
        .replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let _ = write!(out, " {name}=\"{escaped}\"");
}

fn cpu_open(c: &NcclCpu) -> String {
    let mut s = String::from("  <cpu");
    attr(&mut s, "numaid", c.numaid);
    if let Some(a) = &c.affinity {
        attr(&mut s, "affinity", a);
    }
    if let Some(a) = &c.arch {
        attr(&mut s, "arch", a);
    }
    if let Some(v) = &c.vendor {
        attr(&mut s, "vendor", v);
    }
    if let Some(f) = c.familyid {
        attr(&mut s, "familyid", f);
    }
    if let Some(m) = c.modelid {
        attr(&mut s, "modelid", m);
    }
    s.push('>');
    s
}

/// The `<nvlink>` that hides NVLink from NCCL: a GPU with any `<nvlink>` in
/// the file is not asked of NVML (NCCL src/graph/xml.cc), and a target that is
/// no GPU of the VM adds no link, so NCCL decides from the PCIe tree alone.
pub const PLACEHOLDER_NVLINK: &str = concat!(
    "<gpu><nvlink target=\"",
    placeholder_target!(),
    "\" count=\"1\" tclass=\"0x030200\"/></gpu>"
);

/// The placeholder's target: a bus id no GPU of a VM has.
pub const PLACEHOLDER_NVLINK_TARGET: &str = placeholder_target!();

fn pci(out: &mut String, p: &NcclPci, depth: usize, hide_nvlink: bool) {
    let pad = "  ".repeat(depth);
    let _ = write!(out, "{pad}<pci");
    attr(out, "busid", p.busid);
    attr(out, "class", format!("{:#08x}", p.class));
    if let Some(v) = p.vendor {
        attr(out, "vendor", format!("{v:#06x}"));
    }
    if let Some(d) = p.device {
        attr(out, "device", format!("{d:#06x}"));
    }
    if let Some(v) = p.subsystem_vendor {
        attr(out, "subsystem_vendor", format!("{v:#06x}"));
    }
    if let Some(d) = p.subsystem_device {
        attr(out, "subsystem_device", format!("{d:#06x}"));
    }
    if let Some(s) = &p.link_speed {
        attr(out, "link_speed", s);
    }
    if let Some(w) = p.link_width {
        attr(out, "link_width", w);
    }
    if p.children.is_empty() {
        if hide_nvlink && p.class >> 16 == 0x03 {
            let _ = writeln!(out, ">{PLACEHOLDER_NVLINK}</pci>");
        } else {
            out.push_str("/>\n");
        }
        return;
    }
    out.push_str(">\n");
    for c in &p.children {
        pci(out, c, depth + 1, hide_nvlink);
    }
    let _ = writeln!(out, "{pad}</pci>");
}

/// The file's text.
pub fn render(system: &NcclSystem) -> String {
    render_with(system, false)
}

/// The file's text with NVLink hidden from NCCL: [`PLACEHOLDER_NVLINK`] in
/// every GPU, so a machine with NVLink shows NCCL's PCIe decision.
pub fn render_hiding_nvlink(system: &NcclSystem) -> String {
    render_with(system, true)
}

fn render_with(system: &NcclSystem, hide_nvlink: bool) -> String {
    let mut out = format!("<system version=\"{NCCL_TOPO_VERSION}\">\n");
    for c in &system.cpus {
        out.push_str(&cpu_open(c));
        out.push('\n');
        for p in &c.pci {
            pci(&mut out, p, 2, hide_nvlink);
        }
        out.push_str("  </cpu>\n");
    }
    out.push_str("</system>\n");
    out
}
