//! Proxmox VE's VM configuration (`/etc/pve/qemu-server/VMID.conf`), read
//! back the way Proxmox reads it, to check what `plan --emit proxmox` writes.
//!
//! Written from the documented format (pve-docs qm.adoc, "File Format" and
//! "Snapshots": `OPTION: value` lines, `#` comments, blank lines ignored, a
//! `[name]` section per snapshot) and from what qemu-server's
//! `parse_vm_config` does beyond it: `#` lines become the section's
//! description (the VM's notes), `[PENDING]` and `[special:NAME]` sections,
//! `args` kept verbatim, keys of the form `[a-z][a-z_-]*\d*`, any other line
//! refused ("unable to parse config"). The `hostpciN` value is the property
//! string of PCI.pm's `$hostpci_fmt`: `[host=]ID[;ID...]` plus `key=value`
//! options, IDs matching `(DDDD:)?BB:DD(.F)?` in lower-case hex, at most 16
//! entries (`MAX_HOSTPCI_DEVICES`). `args` is split like a shell would
//! (`PVE::Tools::split_args`, Text::ParseWords `shellwords`).

use std::collections::BTreeMap;
use std::fmt;

/// Proxmox VE's limit on `hostpciN` entries: `hostpci0` to `hostpci15`.
pub const MAX_HOSTPCI: usize = 16;

/// A line Proxmox would not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// 1-based line number.
    pub line: usize,
    /// The line.
    pub text: String,
    /// What is wrong with it.
    pub why: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}: {:?}", self.line, self.why, self.text)
    }
}

/// One section: the VM's current configuration, a snapshot or the pending changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Section {
    /// `key: value` lines in file order, repeated keys kept (Proxmox keeps the last).
    pub options: Vec<(String, String)>,
    /// The `#` lines (without the `#`) and `description:` values, joined by newlines.
    pub description: String,
}

impl Section {
    /// The value Proxmox ends up with for `key` (the last one).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.options
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `hostpciN` entries as (N, value), in file order.
    pub fn hostpci(&self) -> Vec<(usize, &str)> {
        self.options
            .iter()
            .filter_map(|(k, v)| Some((hostpci_index(k)?, v.as_str())))
            .collect()
    }
}

/// A whole configuration file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VmConfig {
    /// The lines before the first section header: the VM as it is.
    pub main: Section,
    /// `[PENDING]`: changes not applied yet.
    pub pending: Option<Section>,
    /// `[special:NAME]` sections.
    pub special: Vec<(String, Section)>,
    /// One section per snapshot, by name, in file order.
    pub snapshots: Vec<(String, Section)>,
}

/// N of a `hostpciN` key (any N; [`parse`] refuses N past 15).
pub fn hostpci_index(key: &str) -> Option<usize> {
    let n = key.strip_prefix("hostpci")?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || (n.len() > 1 && n.starts_with('0'))
    {
        return None;
    }
    n.parse().ok()
}

/// `[a-z][a-z_-]*\d*`: the keys `parse_vm_config` reads.
fn is_key(k: &str) -> bool {
    let b = k.as_bytes();
    if b.is_empty() || !b[0].is_ascii_lowercase() {
        return false;
    }
    let letters = b[1..]
        .iter()
        .take_while(|c| c.is_ascii_lowercase() || **c == b'_' || **c == b'-')
        .count();
    b[1 + letters..].iter().all(u8::is_ascii_digit)
}

/// `[a-z][a-z0-9_-]+`, case-insensitive: a snapshot's name in its header.
fn is_snapshot_name(n: &str) -> bool {
    let b = n.as_bytes();
    b.len() >= 2
        && b[0].is_ascii_alphabetic()
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'-')
}

/// Reads a configuration file; the first line Proxmox would refuse is the error.
pub fn parse(text: &str) -> Result<VmConfig, ConfigError> {
    let mut cfg = VmConfig::default();
    // Where lines go: 0 main, 1 pending, 2 special, 3 snapshot.
    let mut at = 0usize;
    for (i, line) in text.lines().enumerate() {
        let err = |why: &str| ConfigError {
            line: i + 1,
            text: line.to_string(),
            why: why.to_string(),
        };
        if line.trim().is_empty() {
            continue;
        }
        let header = line
            .trim_end()
            .strip_prefix('[')
            .and_then(|l| l.strip_suffix(']'));
        if let Some(name) = header {
            if name.eq_ignore_ascii_case("PENDING") {
                if cfg.pending.is_some() {
                    return Err(err("duplicate section: pending"));
                }
                cfg.pending = Some(Section::default());
                at = 1;
            } else if let Some(s) = name
                .get(..8)
                .filter(|p| p.eq_ignore_ascii_case("special:"))
                .map(|_| &name[8..])
                .filter(|s| ["cloudinit", "fleecing"].contains(&s.to_ascii_lowercase().as_str()))
            {
                cfg.special.push((s.to_string(), Section::default()));
                at = 2;
            } else if is_snapshot_name(name) {
                if cfg.snapshots.iter().any(|(n, _)| n == name) {
                    return Err(err("duplicate snapshot section"));
                }
                cfg.snapshots.push((name.to_string(), Section::default()));
                at = 3;
            } else {
                return Err(err("unknown section"));
            }
            continue;
        }
        let section = match at {
            0 => &mut cfg.main,
            1 => cfg.pending.as_mut().expect("set with at = 1"),
            2 => &mut cfg.special.last_mut().expect("set with at = 2").1,
            _ => &mut cfg.snapshots.last_mut().expect("set with at = 3").1,
        };
        if let Some(c) = line.strip_prefix('#') {
            section.description.push_str(c);
            section.description.push('\n');
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(err("unable to parse config"));
        };
        let value = value.trim();
        if !is_key(key) || value.is_empty() {
            return Err(err("unable to parse config"));
        }
        if let Some(n) = hostpci_index(key) {
            if n >= MAX_HOSTPCI {
                return Err(err("unknown setting (hostpci0 to hostpci15)"));
            }
            parse_hostpci(value).map_err(|e| err(&format!("hostpci: {e}")))?;
        }
        if key == "args" {
            split_args(value).map_err(|e| err(&format!("args: {e}")))?;
        }
        if key == "description" {
            section.description.push_str(value);
            continue;
        }
        section.options.push((key.to_string(), value.to_string()));
    }
    Ok(cfg)
}

/// One host PCI id of a `hostpciN` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciId {
    /// The domain, when written.
    pub domain: Option<u32>,
    /// Bus.
    pub bus: u8,
    /// Device (slot).
    pub device: u8,
    /// The function; None for a whole slot (every function of it).
    pub function: Option<u8>,
}

impl PciId {
    /// `DDDD:BB:DD.F` when it names one function.
    pub fn function_bdf(&self) -> Option<String> {
        Some(format!(
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain.unwrap_or(0),
            self.bus,
            self.device,
            self.function?
        ))
    }
}

/// A parsed `hostpciN` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPciValue {
    /// The `host` ids (`;`-separated); empty with `mapping`.
    pub hosts: Vec<PciId>,
    /// `pcie=1`.
    pub pcie: bool,
    /// Every `key=value`, `host` included, as written.
    pub options: BTreeMap<String, String>,
}

impl HostPciValue {
    /// The one function the entry names, when it names exactly one
    /// (Proxmox then gives the device the QEMU id `hostpciN`).
    pub fn single_function(&self) -> Option<String> {
        match self.hosts.as_slice() {
            [one] => one.function_bdf(),
            _ => None,
        }
    }
}

/// `(?:[a-f0-9]{4,}:)?[a-f0-9]{2}:[a-f0-9]{2}(?:\.[a-f0-9])?`, whole.
fn pci_id(s: &str) -> Option<PciId> {
    let hex = |t: &str, n: Option<usize>| {
        let ok = !t.is_empty()
            && n.is_none_or(|n| t.len() == n)
            && t.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        ok.then(|| u32::from_str_radix(t, 16).ok()).flatten()
    };
    let (head, function) = match s.split_once('.') {
        Some((h, f)) => (h, Some(hex(f, Some(1))? as u8)),
        None => (s, None),
    };
    let parts: Vec<&str> = head.split(':').collect();
    let (domain, bus, device) = match parts.as_slice() {
        [d, b, s] if d.len() >= 4 => (Some(hex(d, None)?), *b, *s),
        [b, s] => (None, *b, *s),
        _ => return None,
    };
    Some(PciId {
        domain,
        bus: hex(bus, Some(2))? as u8,
        device: hex(device, Some(2))? as u8,
        function,
    })
}

/// PVE's booleans: 1/on/yes/true and 0/off/no/false.
fn boolean(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "on" | "yes" | "true" => Some(true),
        "0" | "off" | "no" | "false" => Some(false),
        _ => None,
    }
}

/// Reads a `hostpciN` property string.
pub fn parse_hostpci(value: &str) -> Result<HostPciValue, String> {
    const KEYS: [&str; 13] = [
        "host",
        "mapping",
        "rombar",
        "romfile",
        "pcie",
        "x-vga",
        "legacy-igd",
        "mdev",
        "vendor-id",
        "device-id",
        "sub-vendor-id",
        "sub-device-id",
        "driver",
    ];
    const BOOLS: [&str; 4] = ["rombar", "pcie", "x-vga", "legacy-igd"];
    let mut options = BTreeMap::new();
    for item in value.split(',') {
        let (k, v) = match item.split_once('=') {
            Some((k, v)) => (k.trim(), v.trim()),
            None if !options.contains_key("host") => ("host", item.trim()),
            None => return Err(format!("'{item}': a second value without a key")),
        };
        if !KEYS.contains(&k) {
            return Err(format!("unknown key '{k}'"));
        }
        if BOOLS.contains(&k) && boolean(v).is_none() {
            return Err(format!("{k}={v}: not a boolean"));
        }
        if options.insert(k.to_string(), v.to_string()).is_some() {
            return Err(format!("duplicate key '{k}'"));
        }
    }
    let hosts = match options.get("host") {
        Some(h) => h
            .split(';')
            .map(|id| pci_id(id).ok_or_else(|| format!("'{id}' is not a host PCI id")))
            .collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };
    match (hosts.is_empty(), options.contains_key("mapping")) {
        (true, false) => return Err("either 'host' or 'mapping' must be set".into()),
        (false, true) => return Err("cannot set both 'host' and 'mapping'".into()),
        _ => {}
    }
    let pcie = options
        .get("pcie")
        .and_then(|v| boolean(v))
        .unwrap_or(false);
    Ok(HostPciValue {
        hosts,
        pcie,
        options,
    })
}

/// Splits a command line the way a POSIX shell (and Text::ParseWords's
/// `shellwords`) does: blanks separate words, single quotes take everything
/// literally, double quotes and backslashes escape.
pub fn split_args(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(c),
                        None => return Err("unterminated '".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => cur.push(chars.next().ok_or("trailing \\")?),
                        Some(c) => cur.push(c),
                        None => return Err("unterminated \"".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                cur.push(chars.next().ok_or("trailing \\")?);
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}
