//! libvirt's own schema check, and a domain read back for its devices.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

/// A tool on PATH; panics naming the setup script when it is missing.
pub fn tool(name: &str) -> PathBuf {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file());
    found.unwrap_or_else(|| {
        panic!(
            "{name} is not installed: run `bash scripts/setup.sh` (the README's test command does)"
        )
    })
}

/// `virt-xml-validate FILE domain`: Ok, or libvirt's complaint.
pub fn validate(xml: &str) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("domain.xml");
    std::fs::write(&file, xml).unwrap();
    let out = Command::new(tool("virt-xml-validate"))
        .arg(&file)
        .arg("domain")
        .output()
        .expect("virt-xml-validate runs");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

const QEMU_NS: &str = "http://libvirt.org/schemas/domain/qemu/1.0";

/// What a test reads back from a domain: each PCI hostdev's host address
/// with its alias and guest bus index, the PCI controllers by index, and
/// the frontend properties set per alias in `<qemu:override>`.
#[derive(Debug, Default)]
pub struct DomainView {
    /// Host address -> (alias, guest `bus` index if placed).
    pub hostdevs: BTreeMap<String, (String, Option<u32>)>,
    /// Controller index -> (model, alias, parent bus index, numa node).
    pub controllers: BTreeMap<u32, (String, String, Option<u32>, Option<u32>)>,
    /// (alias, property) -> value.
    pub properties: BTreeMap<(String, String), String>,
    /// fw_cfg entries: name -> (file, inline text), from `<sysinfo
    /// type='fwcfg'>` and from `-fw_cfg` in `<qemu:commandline>` alike (the
    /// guest sees the same file).
    pub fw_cfg: BTreeMap<String, (Option<String>, String)>,
}

fn el<'a, 'i>(n: &roxmltree::Node<'a, 'i>, name: &str) -> Option<roxmltree::Node<'a, 'i>> {
    n.children()
        .find(|c| c.is_element() && c.has_tag_name(name))
}

fn num(s: &str) -> u32 {
    match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16).unwrap(),
        None => s.parse().unwrap(),
    }
}

/// A QEMU option argument (`key=value,key=value`, a comma in a value
/// written twice) as a map, read here without vp2p's code.
fn qemu_options(arg: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut part = String::new();
    let mut chars = arg.chars().peekable();
    let mut parts = Vec::new();
    while let Some(c) = chars.next() {
        match c {
            ',' if chars.peek() == Some(&',') => {
                chars.next();
                part.push(',');
            }
            ',' => parts.push(std::mem::take(&mut part)),
            c => part.push(c),
        }
    }
    parts.push(part);
    for p in parts {
        let (k, v) = p.split_once('=').unwrap_or((p.as_str(), ""));
        out.insert(k.to_string(), v.to_string());
    }
    out
}

impl DomainView {
    /// Parses `xml` with roxmltree (a reader independent of vp2p's patcher).
    pub fn parse(xml: &str) -> Self {
        let doc = roxmltree::Document::parse(xml).expect("the domain is XML");
        let mut v = DomainView::default();
        for n in doc.descendants().filter(|n| n.has_tag_name("hostdev")) {
            let a = el(&el(&n, "source").unwrap(), "address").unwrap();
            let host = format!(
                "{:04x}:{:02x}:{:02x}.{:x}",
                num(a.attribute("domain").unwrap_or("0")),
                num(a.attribute("bus").unwrap()),
                num(a.attribute("slot").unwrap()),
                num(a.attribute("function").unwrap())
            );
            let alias = el(&n, "alias")
                .and_then(|x| x.attribute("name"))
                .unwrap_or_default()
                .to_string();
            let bus = el(&n, "address").and_then(|x| x.attribute("bus")).map(num);
            v.hostdevs.insert(host, (alias, bus));
        }
        for n in doc
            .descendants()
            .filter(|n| n.has_tag_name("controller") && n.attribute("type") == Some("pci"))
        {
            let node = el(&n, "target")
                .and_then(|t| el(&t, "node"))
                .and_then(|x| x.text())
                .map(num);
            v.controllers.insert(
                num(n.attribute("index").unwrap()),
                (
                    n.attribute("model").unwrap_or_default().to_string(),
                    el(&n, "alias")
                        .and_then(|x| x.attribute("name"))
                        .unwrap_or_default()
                        .to_string(),
                    el(&n, "address").and_then(|x| x.attribute("bus")).map(num),
                    node,
                ),
            );
        }
        for d in doc.descendants().filter(|n| {
            n.tag_name().namespace() == Some(QEMU_NS) && n.tag_name().name() == "device"
        }) {
            let alias = d.attribute("alias").unwrap().to_string();
            for p in d.descendants().filter(|n| {
                n.tag_name().namespace() == Some(QEMU_NS) && n.tag_name().name() == "property"
            }) {
                v.properties.insert(
                    (alias.clone(), p.attribute("name").unwrap().to_string()),
                    p.attribute("value").unwrap().to_string(),
                );
            }
        }
        for s in doc
            .descendants()
            .filter(|n| n.has_tag_name("sysinfo") && n.attribute("type") == Some("fwcfg"))
        {
            for e in s.children().filter(|c| c.has_tag_name("entry")) {
                v.fw_cfg.insert(
                    e.attribute("name").unwrap().to_string(),
                    (
                        e.attribute("file").map(str::to_string),
                        e.text().unwrap_or_default().to_string(),
                    ),
                );
            }
        }
        for c in doc.descendants().filter(|n| {
            n.tag_name().namespace() == Some(QEMU_NS) && n.tag_name().name() == "commandline"
        }) {
            let args: Vec<&str> = c
                .children()
                .filter(|n| {
                    n.tag_name().namespace() == Some(QEMU_NS) && n.tag_name().name() == "arg"
                })
                .filter_map(|n| n.attribute("value"))
                .collect();
            for w in args.windows(2).filter(|w| w[0] == "-fw_cfg") {
                let o = qemu_options(w[1]);
                let name = o.get("name").expect("-fw_cfg names its file").clone();
                let file = o.get("file").cloned();
                let text = o.get("string").cloned().unwrap_or_default();
                v.fw_cfg.insert(name, (file, text));
            }
        }
        v
    }

    /// The clique each hostdev's alias is given, by host address.
    pub fn cliques(&self) -> BTreeMap<String, u8> {
        self.hostdevs
            .iter()
            .filter_map(|(host, (alias, _))| {
                self.properties
                    .get(&(alias.clone(), "x-nv-gpudirect-clique".to_string()))
                    .map(|v| (host.clone(), v.parse().unwrap()))
            })
            .collect()
    }

    /// Models from a hostdev's port up to its root complex, and that root
    /// complex's NUMA node.
    pub fn chain(&self, host: &str) -> (Vec<String>, Option<u32>) {
        let mut models = Vec::new();
        let mut bus = self.hostdevs[host].1;
        let mut node = None;
        while let Some(b) = bus.filter(|b| *b != 0) {
            let (model, _, parent, n) = &self.controllers[&b];
            models.push(model.clone());
            node = *n;
            bus = *parent;
        }
        (models, node)
    }
}
