//! Patching an existing libvirt domain with a plan: aliases where missing, the
//! clique overrides, and optionally the mirrored controllers, the devices'
//! guest addresses and the NCCL file. Every change is an insertion or a
//! replacement at a byte range of the original, so all other bytes stay as
//! they were, and a patched domain patches to itself.

use std::collections::{BTreeMap, BTreeSet};

use p2p_shared::clique::CliquePlan;
use p2p_shared::guest_layout::{self, DeviceRole, GuestLayout, GuestTopology};
use p2p_shared::nccl_topo::FW_CFG_NAME;
use p2p_shared::Bdf;

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

/// What a patch may add besides aliases and cliques.
#[derive(Debug, Clone, Default)]
pub struct PatchOptions {
    /// The NCCL file entry; None leaves fw_cfg alone.
    pub nccl: Option<NcclEntry>,
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
    let added_qemu = set_properties(
        domain,
        &override_properties(plan, &guest),
        &labels,
        &mut edits,
    )?;
    if let Some(entry) = &opts.nccl {
        if !mirror {
            return Err(PatchError::NcclNeedsMirror);
        }
        nccl_entry(domain, entry, &mut edits);
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

/// Text content on one line: `&`, `<`, `>` and line ends escaped.
fn inline_text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('\n', "&#10;")
}
