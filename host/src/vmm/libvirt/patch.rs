//! Patching an existing libvirt domain with a plan: aliases where missing, the
//! clique overrides, and optionally the mirrored controllers, the devices'
//! guest addresses and the NCCL file. Every change is an insertion or a
//! replacement at a byte range of the original, so all other bytes stay as
//! they were, and a patched domain patches to itself.

use std::collections::{BTreeMap, BTreeSet};

use p2p_allocation::clique::CliquePlan;
use p2p_topology::guest_layout::{self, DeviceRole, GuestLayout, GuestTopology};
use p2p_topology::nccl_topo::FW_CFG_NAME;
use p2p_topology::Bdf;

use super::domain::{CommandlineClique, Domain};
use super::edits::Edits;
use super::mirror::place_mirrored;
use super::xml::int;
use super::{
    override_device, override_properties, xml_text, Property, CLIQUE_PROPERTY, QEMU_NAMESPACE,
};

/// How the NCCL topology file reaches the guest's fw_cfg.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NcclEntry {
    /// `<entry file=PATH>`: the file on the host (write it with `--emit nccl-topo`).
    File(String),
    /// The file's text inside the domain: nothing to keep on the host.
    Inline(String),
}

/// Where in the domain the NCCL file's fw_cfg entry goes. The guest finds
/// it at the same place either way (`/sys/firmware/qemu_fw_cfg/by_name/`):
/// libvirt turns its own element into the same `-fw_cfg` option.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FwCfgVia {
    /// `<sysinfo type='fwcfg'><entry name=...>`, libvirt's element for it.
    #[default]
    Sysinfo,
    /// `-fw_cfg name=...,string=...` (or `file=`) in `<qemu:commandline>`:
    /// for KubeVirt, whose DomainSpec holds one `<sysinfo>` and merges a
    /// second into the SMBIOS one when it keeps the domain, but keeps the
    /// QEMU command line. A domain that already has the entry in
    /// `<sysinfo>` keeps it there (QEMU refuses a fw_cfg name twice).
    Commandline,
}

/// What a patch may add besides aliases and cliques.
#[derive(Debug, Clone, Default)]
pub struct PatchOptions {
    /// The NCCL file entry; None leaves fw_cfg alone.
    pub nccl: Option<NcclEntry>,
    /// Where that entry goes.
    pub via: FwCfgVia,
}

/// A patched domain and what was changed, in words (empty: nothing to do).
#[derive(Debug, Clone)]
pub struct Patched {
    /// The domain text.
    pub text: String,
    /// One line per change.
    pub changes: Vec<String>,
}

/// Why a domain cannot be patched with the plan.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// A property vp2p sets is already set to another value.
    #[error(
        "{device}: {property}={found} is set by hand in {place}, the plan gives {wanted}: \
         remove the hand-set value (or plan with another --max-level)"
    )]
    Conflict {
        /// The device: host address and alias, or the port's alias.
        device: String,
        /// The property.
        property: &'static str,
        /// Its value in the domain.
        found: String,
        /// The plan's value.
        wanted: String,
        /// `<qemu:override>` or `<qemu:commandline>`.
        place: &'static str,
    },
    /// A command-line argument sets cliques without naming one device.
    #[error(
        "<qemu:commandline> sets {CLIQUE_PROPERTY} in a form that names no single device \
         ('{0}'): remove it, vp2p sets each GPU's clique"
    )]
    Commandline(String),
    /// The plan holds a device the domain does not pass through.
    #[error("{0} is in the plan but is not a <hostdev> of the domain")]
    NotInDomain(Bdf),
    /// A mirrored root complex sits on a NUMA cell the domain lacks.
    #[error(
        "the mirrored topology puts {rc} on guest NUMA cell {cell} (host node {host}), which \
         the domain does not define: add <cell id='{cell}' .../> to <cpu><numa>{cpus}, or \
         patch with --guest-topology flat"
    )]
    NumaCell {
        /// The root complex's alias.
        rc: String,
        /// The guest cell.
        cell: u32,
        /// The host node.
        host: u32,
        /// `, pinned to host CPUs ...` when known.
        cpus: String,
    },
    /// A flat guest's bus ids are the domain's own: no host-made NCCL file.
    #[error(
        "an NCCL file from the host needs the guest bus ids, which only the mirrored layout \
         pins: patch with --guest-topology mirror, or let `p2p-guest nccl-topo --install` \
         derive the file in the guest"
    )]
    NcclNeedsMirror,
}

/// Patches `domain` with one VM's plan. `guest` lists the VM's GPUs and RDMA
/// NICs (its device ids are replaced by the domain's aliases); its layout
/// says whether the controllers and guest addresses are mirrored.
pub fn patch_domain(
    domain: &Domain,
    plan: &CliquePlan,
    guest: &GuestTopology,
    opts: &PatchOptions,
) -> Result<Patched, PatchError> {
    let mut edits = Edits::new(domain);
    let guest = aliased(domain, guest, &mut edits)?;
    let mirror = guest.layout == GuestLayout::Mirror;
    if mirror {
        place_mirrored(domain, &guest, &mut edits)?;
    }
    let labels = device_labels(&guest);
    let mut added_qemu = set_properties(
        domain,
        &override_properties(plan, &guest),
        &labels,
        &mut edits,
    )?;
    if let Some(entry) = &opts.nccl {
        if !mirror {
            return Err(PatchError::NcclNeedsMirror);
        }
        match opts.via {
            FwCfgVia::Commandline if domain.nccl_entry().is_none() => {
                added_qemu |= nccl_arg(domain, entry, &mut edits);
            }
            _ => nccl_entry(domain, entry, &mut edits),
        }
    }
    if added_qemu && domain.qemu_prefix.is_none() {
        let at = domain.root.start_tag_end - 1;
        let attr = edits.styled(&format!(" xmlns:qemu='{QEMU_NAMESPACE}'"));
        edits.insert(at, attr);
        edits.changes.push("declared xmlns:qemu".into());
    }
    Ok(edits.apply())
}

/// The guest tree with each device's id set to its alias in the domain,
/// adding or replacing aliases libvirt would not keep.
fn aliased(
    domain: &Domain,
    guest: &GuestTopology,
    edits: &mut Edits,
) -> Result<GuestTopology, PatchError> {
    let mut taken: BTreeSet<String> = domain.aliases().into_iter().map(str::to_string).collect();
    let mut guest = guest.clone();
    let mut counts = [0usize; 2];
    for d in &mut guest.devices {
        let h = domain
            .hostdev(d.host)
            .ok_or(PatchError::NotInDomain(d.host))?;
        match &h.alias {
            Some((a, _)) if a.starts_with("ua-") => d.id = a.clone(),
            existing => {
                let n = &mut counts[usize::from(d.role == DeviceRole::Nic)];
                let alias = loop {
                    let a = guest_layout::device_id(d.role, *n);
                    *n += 1;
                    if !taken.contains(&a) {
                        break a;
                    }
                };
                taken.insert(alias.clone());
                match existing {
                    Some((old, range)) => {
                        edits.replace(range.clone(), alias.clone());
                        edits.changes.push(format!(
                            "{}: alias {old} (libvirt keeps only ua- aliases) is now {alias}",
                            d.host
                        ));
                    }
                    None => {
                        let el = edits.styled(&format!("<alias name='{alias}'/>"));
                        edits.insert(h.source_end, format!("\n{}{el}", h.child_indent));
                        edits.changes.push(format!("{}: alias {alias}", d.host));
                    }
                }
                d.id = alias;
            }
        }
    }
    Ok(guest)
}

/// `0000:23:00.0 (alias ua-gpu0)` for devices, the alias for ports.
fn device_labels(guest: &GuestTopology) -> BTreeMap<String, String> {
    guest
        .devices
        .iter()
        .map(|d| (d.id.clone(), format!("{} (alias {})", d.host, d.id)))
        .collect()
}

/// Sets every wanted property that is not set yet; refuses contradictions.
/// Returns whether any QEMU element was added.
fn set_properties(
    domain: &Domain,
    wanted: &[(String, Vec<Property>)],
    labels: &BTreeMap<String, String>,
    edits: &mut Edits,
) -> Result<bool, PatchError> {
    if let Some(CommandlineClique::Other(arg)) = domain
        .commandline
        .iter()
        .find(|c| matches!(c, CommandlineClique::Other(_)))
    {
        return Err(PatchError::Commandline(arg.clone()));
    }
    let mut new_devices = String::new();
    let mut added = false;
    for (alias, props) in wanted {
        let label = || labels.get(alias).cloned().unwrap_or_else(|| alias.clone());
        let mut missing = Vec::new();
        for p in props {
            let by_hand = domain
                .properties
                .iter()
                .find(|s| &s.alias == alias && s.name == p.name)
                .map(|s| (s.value.clone(), "<qemu:override>"))
                .or_else(|| {
                    domain.commandline.iter().find_map(|c| match c {
                        CommandlineClique::Device { alias: a, value }
                            if a == alias && p.name == CLIQUE_PROPERTY =>
                        {
                            Some((value.clone(), "<qemu:commandline>"))
                        }
                        _ => None,
                    })
                });
            match by_hand {
                Some((found, _)) if same_value(&found, &p.value) => {}
                Some((found, place)) => {
                    return Err(PatchError::Conflict {
                        device: label(),
                        property: p.name,
                        found,
                        wanted: p.value.clone(),
                        place,
                    })
                }
                None => missing.push(p.clone()),
            }
        }
        if missing.is_empty() {
            continue;
        }
        added = true;
        let said: Vec<String> = missing
            .iter()
            .map(|p| format!("{}={}", p.name, p.value))
            .collect();
        edits
            .changes
            .push(format!("{}: {}", label(), said.join(", ")));
        let frontend = domain
            .properties
            .iter()
            .find(|s| &s.alias == alias)
            .map(|s| s.frontend.clone());
        let device = domain.override_devices.iter().find(|(a, _)| a == alias);
        match (frontend, device) {
            (Some(fe), _) => {
                for p in &missing {
                    edits.append_child(&fe, &p.render());
                }
            }
            (None, Some((_, dev))) => {
                let mut fe = String::from("<qemu:frontend>\n");
                for p in &missing {
                    fe.push_str(&format!("  {}\n", p.render()));
                }
                fe.push_str("</qemu:frontend>");
                edits.append_child(dev, &fe);
            }
            (None, None) => new_devices.push_str(&override_device(alias, &missing)),
        }
    }
    if new_devices.is_empty() {
        return Ok(added);
    }
    match &domain.qemu_override {
        Some(ov) => edits.append_child(ov, new_devices.trim_end()),
        None => {
            let block = format!(
                "<qemu:override>\n{}</qemu:override>",
                super::indent(&new_devices, "  ")
            );
            edits.append_child(&domain.root, &block);
        }
    }
    Ok(true)
}

/// Numbers as QEMU reads them: `3` and `0x3` are the same clique.
fn same_value(a: &str, b: &str) -> bool {
    a == b || matches!((int(a), int(b)), (Some(x), Some(y)) if x == y)
}

/// The fw_cfg entry with the NCCL file: added, kept when equal, else replaced
/// (the name is vp2p's own). Inline text is kept on one line (`&#10;`), so
/// that indenting the domain never changes the file.
fn nccl_entry(domain: &Domain, entry: &NcclEntry, edits: &mut Edits) {
    let element = match entry {
        NcclEntry::File(path) => edits.styled(&format!(
            "<entry name='{FW_CFG_NAME}' file='{}'/>",
            xml_text(path)
        )),
        NcclEntry::Inline(text) => edits
            .styled(&format!("<entry name='{FW_CFG_NAME}'>\u{0}</entry>"))
            .replace('\u{0}', &inline_text(text)),
    };
    match domain.nccl_entry() {
        Some(have) => {
            let same = match entry {
                NcclEntry::File(p) => have.file.as_deref() == Some(p.as_str()),
                NcclEntry::Inline(t) => have.file.is_none() && have.value == *t,
            };
            if !same {
                edits.replace(have.range.clone(), element);
                edits
                    .changes
                    .push(format!("fw_cfg {FW_CFG_NAME}: replaced"));
            }
        }
        None => {
            edits.changes.push(format!("fw_cfg {FW_CFG_NAME}: added"));
            match &domain.fw_cfg {
                Some(sysinfo) => edits.append_styled(sysinfo, &element),
                None => {
                    let open = edits.styled("<sysinfo type='fwcfg'>");
                    let root = &domain.root.child_indent;
                    let unit = &edits.unit;
                    let block = format!("{open}\n{root}{unit}{element}\n{root}</sysinfo>");
                    match domain.os_start {
                        Some(at) => edits.insert(at, format!("{block}\n{root}")),
                        None => edits.append_styled(&domain.root, &block),
                    }
                }
            }
        }
    }
}

/// The NCCL file as `-fw_cfg` in `<qemu:commandline>`: the argument added
/// after the domain's own ones, kept when equal, else replaced. Whether a
/// `qemu:` element was added.
fn nccl_arg(domain: &Domain, entry: &NcclEntry, edits: &mut Edits) -> bool {
    // QEMU's option syntax: a comma inside a value is written twice.
    let (key, value) = match entry {
        NcclEntry::File(path) => ("file", path),
        NcclEntry::Inline(text) => ("string", text),
    };
    let want = format!("name={FW_CFG_NAME},{key}={}", value.replace(',', ",,"));
    let attr = attribute_text(&want);
    if let Some(have) = &domain.fw_cfg_arg {
        if have.value != want {
            edits.replace(have.value_range.clone(), attr);
            edits.changes.push(format!(
                "fw_cfg {FW_CFG_NAME}: replaced (qemu:commandline -fw_cfg)"
            ));
        }
        return false;
    }
    edits.changes.push(format!(
        "fw_cfg {FW_CFG_NAME}: added (qemu:commandline -fw_cfg)"
    ));
    let args = "<qemu:arg value='-fw_cfg'/>\n<qemu:arg value='\u{0}'/>";
    match &domain.qemu_commandline {
        Some(cl) => {
            let styled = edits.styled(args).replace('\u{0}', &attr);
            edits.append_styled(cl, &styled);
        }
        None => {
            let block = format!(
                "<qemu:commandline>\n{}</qemu:commandline>",
                super::indent(args, "  ")
            );
            let styled = edits.styled(&block).replace('\u{0}', &attr);
            edits.append_styled(&domain.root, &styled);
        }
    }
    true
}

/// An attribute value in either quote, line ends and tabs as character
/// references (an XML reader turns literal ones into spaces).
fn attribute_text(s: &str) -> String {
    xml_text(s)
        .replace('\n', "&#10;")
        .replace('\r', "&#13;")
        .replace('\t', "&#9;")
}

/// Text content on one line: `&`, `<`, `>` and line ends escaped.
fn inline_text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('\n', "&#10;")
}

#[cfg(test)]
mod tests {
    use p2p_allocation::clique::{Assignment, MaxLevel};
    use p2p_topology::capability::Clique;
    use p2p_topology::guest_layout::GuestDevice;

    use super::*;

    /// One GPU, host 0000:1b:00.0, clique 0, on the guest's root bus.
    fn one_gpu() -> (CliquePlan, GuestTopology) {
        let bdf: Bdf = "0000:1b:00.0".parse().unwrap();
        let plan = CliquePlan {
            vm: "g1".into(),
            max_level: MaxLevel::default(),
            assignments: vec![Assignment {
                bdf,
                clique: Clique::MIN,
                reasons: Vec::new(),
            }],
            cliques: vec![vec![bdf]],
            pairs: Vec::new(),
        };
        let guest = GuestTopology {
            layout: GuestLayout::Flat,
            numa_nodes: Vec::new(),
            root_complexes: Vec::new(),
            ports: Vec::new(),
            devices: vec![GuestDevice {
                id: guest_layout::device_id(DeviceRole::Gpu, 0),
                role: DeviceRole::Gpu,
                host: bdf,
                guest: "0000:00:05.0".parse().unwrap(),
                parent: "pcie.0".into(),
                clique: Some(0),
                multifunction: false,
            }],
            notes: Vec::new(),
        };
        (plan, guest)
    }

    /// A domain without `xmlns:qemu`, indented by `unit` a level (newlines
    /// only between elements when `unit` is empty), in double quotes as Go
    /// writes it.
    fn domain_indented(unit: &str) -> String {
        let lines = [
            (0, "<domain type=\"kvm\">"),
            (1, "<name>g1</name>"),
            (1, "<devices>"),
            (2, "<hostdev mode=\"subsystem\" type=\"pci\" managed=\"no\">"),
            (3, "<source>"),
            (
                4,
                "<address type=\"pci\" domain=\"0x0000\" bus=\"0x1b\" slot=\"0x00\" function=\"0x0\"></address>",
            ),
            (3, "</source>"),
            (3, "<alias name=\"ua-gpu-gpu1\"></alias>"),
            (2, "</hostdev>"),
            (1, "</devices>"),
            (0, "</domain>"),
        ];
        let sep = if unit.is_empty() { "" } else { "\n" };
        lines
            .iter()
            .map(|(level, l)| format!("{}{l}", unit.repeat(*level)))
            .collect::<Vec<_>>()
            .join(sep)
    }

    fn patched(text: &str) -> Patched {
        let (plan, guest) = one_gpu();
        let d = Domain::parse(text).unwrap();
        patch_domain(&d, &plan, &guest, &PatchOptions::default()).unwrap()
    }

    /// Tabs (KubeVirt's sidecar path: encoding/xml's MarshalIndent with
    /// "\t"), four spaces, two spaces and none: the namespace is declared
    /// with its separating space, the result is XML with the clique where
    /// libvirt reads it, the added lines are in the domain's indentation, and
    /// the result patches to itself.
    #[test]
    fn declaring_xmlns_qemu_keeps_the_space_whatever_the_indentation() {
        for unit in ["\t", "    ", "  ", ""] {
            let input = domain_indented(unit);
            let out = patched(&input);
            assert!(
                out.text.starts_with(&format!(
                    "<domain type=\"kvm\" xmlns:qemu=\"{QEMU_NAMESPACE}\">"
                )),
                "{unit:?}:\n{}",
                out.text
            );
            assert!(out.changes.iter().any(|c| c == "declared xmlns:qemu"));
            let doc = roxmltree::Document::parse(&out.text)
                .unwrap_or_else(|e| panic!("{unit:?}: {e}\n{}", out.text));
            let prop = doc
                .descendants()
                .find(|n| {
                    n.tag_name().namespace() == Some(QEMU_NAMESPACE)
                        && n.tag_name().name() == "property"
                })
                .expect("a qemu:property");
            assert_eq!(prop.attribute("name"), Some(CLIQUE_PROPERTY));
            assert_eq!(prop.attribute("value"), Some("0"));
            let device = prop.parent().unwrap().parent().unwrap();
            assert_eq!(device.attribute("alias"), Some("ua-gpu-gpu1"));
            // Only the override block was added, each of its lines indented
            // in the domain's unit.
            let (head, block) = out
                .text
                .split_once(&format!("\n{unit}<qemu:override>"))
                .expect("the override block");
            assert_eq!(
                head.replacen(&format!(" xmlns:qemu=\"{QEMU_NAMESPACE}\""), "", 1),
                input.trim_end_matches("</domain>").trim_end_matches(['\n'])
            );
            if !unit.is_empty() {
                for l in block.lines().skip(1) {
                    let body = l.trim_start_matches(unit);
                    assert!(!body.starts_with([' ', '\t']), "{unit:?}: {l:?}");
                }
                assert!(block.contains(&format!("\n{}<qemu:property ", unit.repeat(4))));
            }
            let again = patched(&out.text);
            assert_eq!(again.text, out.text, "{unit:?}");
            assert!(again.changes.is_empty(), "{unit:?}: {:?}", again.changes);
        }
    }

    fn patched_with(text: &str, nccl: NcclEntry, via: FwCfgVia) -> Patched {
        let (plan, mut guest) = one_gpu();
        guest.layout = GuestLayout::Mirror;
        let d = Domain::parse(text).unwrap();
        let opts = PatchOptions {
            nccl: Some(nccl),
            via,
        };
        patch_domain(&d, &plan, &guest, &opts).unwrap()
    }

    /// The `-fw_cfg` arguments of `<qemu:commandline>`, as an XML reader
    /// gives them.
    fn fw_cfg_args(text: &str) -> Vec<String> {
        let doc = roxmltree::Document::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let args: Vec<String> = doc
            .descendants()
            .filter(|n| n.has_tag_name((QEMU_NAMESPACE, "arg")))
            .map(|n| n.attribute("value").unwrap().to_string())
            .collect();
        args.windows(2)
            .filter(|w| w[0] == "-fw_cfg")
            .map(|w| w[1].clone())
            .collect()
    }

    /// The NCCL file on the QEMU command line (KubeVirt's hooks): one
    /// `-fw_cfg` argument with the text as QEMU reads it (commas doubled,
    /// line ends kept), in a new `<qemu:commandline>` or after the domain's
    /// own arguments, whatever the indentation; no `<sysinfo>`; kept when
    /// equal, replaced when not; a domain with vp2p's `<sysinfo>` entry
    /// keeps it there.
    #[test]
    fn the_nccl_file_on_the_qemu_command_line() {
        let file = "<system version=\"1\">\n  <cpu numaid=\"0\" a='1,2'/>\n</system>\n";
        let want = format!(
            "name={FW_CFG_NAME},string=<system version=\"1\">\n  <cpu numaid=\"0\" a='1,,2'/>\n</system>\n"
        );
        for unit in ["\t", "    ", "  ", ""] {
            let input = domain_indented(unit);
            let inline = NcclEntry::Inline(file.into());
            let out = patched_with(&input, inline.clone(), FwCfgVia::Commandline);
            assert_eq!(fw_cfg_args(&out.text), vec![want.clone()], "{unit:?}");
            assert!(!out.text.contains("sysinfo"), "{}", out.text);
            assert!(out.changes.contains(&format!(
                "fw_cfg {FW_CFG_NAME}: added (qemu:commandline -fw_cfg)"
            )));
            if !unit.is_empty() {
                assert!(
                    out.text.contains(&format!(
                        "\n{unit}<qemu:commandline>\n{unit}{unit}<qemu:arg value=\"-fw_cfg\"/>\n"
                    )),
                    "{unit:?}:\n{}",
                    out.text
                );
            }
            let again = patched_with(&out.text, inline, FwCfgVia::Commandline);
            assert_eq!(again.text, out.text, "{unit:?}");
            assert!(again.changes.is_empty(), "{:?}", again.changes);
            // Another file: the argument is replaced, nothing else changes.
            let other = NcclEntry::File("/var/lib/vp2p/a,b.xml".into());
            let b = patched_with(&out.text, other, FwCfgVia::Commandline);
            assert_eq!(
                fw_cfg_args(&b.text),
                [format!("name={FW_CFG_NAME},file=/var/lib/vp2p/a,,b.xml")]
            );
            assert_eq!(
                b.changes,
                [format!(
                    "fw_cfg {FW_CFG_NAME}: replaced (qemu:commandline -fw_cfg)"
                )]
            );
        }

        // After the domain's own arguments, in its prefix.
        let own = domain_indented("\t").replacen(
            "<domain type=\"kvm\">",
            "<domain type=\"kvm\" xmlns:q=\"http://libvirt.org/schemas/domain/qemu/1.0\">",
            1,
        );
        let own = own.replacen(
            "</domain>",
            "\t<q:commandline>\n\t\t<q:arg value=\"-msg\"/>\n\t\t<q:arg value=\"timestamp=on\"/>\n\t</q:commandline>\n</domain>",
            1,
        );
        let out = patched_with(&own, NcclEntry::Inline(file.into()), FwCfgVia::Commandline);
        assert!(
            out.text.contains("<q:arg value=\"timestamp=on\"/>\n\t\t<q:arg value=\"-fw_cfg\"/>\n\t\t<q:arg value=\"name="),
            "{}",
            out.text
        );
        assert_eq!(out.text.matches("<q:commandline>").count(), 1);
        assert_eq!(fw_cfg_args(&out.text), vec![want]);

        // The entry already in <sysinfo>: kept there, not added twice.
        let sysinfo = patched_with(
            &domain_indented("  "),
            NcclEntry::Inline(file.into()),
            FwCfgVia::Sysinfo,
        );
        assert!(sysinfo.text.contains("<sysinfo type=\"fwcfg\">"));
        assert!(fw_cfg_args(&sysinfo.text).is_empty());
        let kept = patched_with(
            &sysinfo.text,
            NcclEntry::Inline(file.into()),
            FwCfgVia::Commandline,
        );
        assert_eq!(kept.text, sysinfo.text);
    }
}
