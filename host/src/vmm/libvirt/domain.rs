//! An existing libvirt domain, read for patching: the parts vp2p may add to
//! or must not contradict, each with its byte range in the original text so
//! that a patch can leave every other byte as it was.

use std::ops::Range;

use p2p_topology::excerpt::{short, xml_syntax};
use p2p_topology::Bdf;
use roxmltree::{Document, Node};

pub use super::xml::Element;
use super::xml::{child, element, indent_before, int, line_of, start_tag_quote};

use super::{CLIQUE_PROPERTY, QEMU_NAMESPACE};
use p2p_topology::nccl_topo::FW_CFG_NAME;

/// Why a domain could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DomainError {
    /// Not well-formed XML: the line (the last one when the text ends early)
    /// and what is wrong, names quoted short ([`p2p_topology::excerpt`]).
    #[error("not XML: line {line}: {why}")]
    Xml {
        /// 1-based line.
        line: u32,
        /// What is wrong.
        why: String,
    },
    /// Some other root element.
    #[error("the root element is <{}>, not <domain>", short(.0))]
    NotDomain(String),
    /// A required element is missing.
    #[error("the domain has no <{0}>")]
    Missing(&'static str),
    /// An attribute that must be a number is not one.
    #[error("line {line}: {element} {attr}='{}' is not a number", short(.value))]
    Number {
        /// 1-based line of the element.
        line: u32,
        /// The element's name.
        element: &'static str,
        /// The attribute.
        attr: &'static str,
        /// What it held.
        value: String,
    },
    /// The `qemu` prefix is bound to another namespace.
    #[error("the prefix qemu is bound to '{}', not to {QEMU_NAMESPACE}", short(.0))]
    QemuPrefix(String),
}

/// A PCI `<hostdev>` of the domain.
#[derive(Debug, Clone)]
pub struct Hostdev {
    /// The host function it passes through (`<source><address>`).
    pub host: Bdf,
    /// Its `<alias name>`, with the range of the name's value.
    pub alias: Option<(String, Range<usize>)>,
    /// Where the `<alias>` element ends.
    pub alias_end: Option<usize>,
    /// Its guest `<address type='pci'>`, with the element's range.
    pub guest: Option<(GuestAddress, Range<usize>)>,
    /// Where the `<source>` element ends: new children go after it.
    pub source_end: usize,
    /// The whitespace its children are indented with.
    pub child_indent: String,
    /// 1-based line, for messages.
    pub line: u32,
}

/// A guest PCI address as libvirt writes it on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestAddress {
    /// Controller index (`bus`).
    pub bus: u32,
    /// Slot.
    pub slot: u8,
    /// Function.
    pub function: u8,
    /// `multifunction='on'`.
    pub multifunction: bool,
}

/// A `<controller type='pci'>`.
#[derive(Debug, Clone)]
pub struct Controller {
    /// Its index.
    pub index: u32,
    /// Its model (`pcie-root-port`, ...).
    pub model: String,
    /// Its `<alias name>`.
    pub alias: Option<String>,
    /// The element's range.
    pub range: Range<usize>,
}

/// A `<qemu:property>` already set on a device in `<qemu:override>`.
#[derive(Debug, Clone)]
pub struct SetProperty {
    /// The device alias.
    pub alias: String,
    /// The property name.
    pub name: String,
    /// Its value.
    pub value: String,
    /// The `<qemu:frontend>` it sits in, where more properties go.
    pub frontend: Element,
}

/// The clique a `<qemu:commandline>` argument sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandlineClique {
    /// `-set device.ALIAS.x-nv-gpudirect-clique=N`.
    Device {
        /// The device alias.
        alias: String,
        /// The value as written.
        value: String,
    },
    /// Any other argument naming the property (`-global`, a whole `-device`).
    Other(String),
}

/// An `<entry>` of `<sysinfo type='fwcfg'>`.
#[derive(Debug, Clone)]
pub struct FwCfgEntry {
    /// `name`.
    pub name: String,
    /// `file`, when the entry names one.
    pub file: Option<String>,
    /// The text content, when given inline.
    pub value: String,
    /// The element's range.
    pub range: Range<usize>,
}

/// The `<qemu:commandline>` argument after `-fw_cfg` that gives vp2p's
/// fw_cfg file (`name=opt/vp2p/nccl-topo.xml,...`).
#[derive(Debug, Clone)]
pub struct FwCfgArg {
    /// The argument as QEMU gets it.
    pub value: String,
    /// The range of its `value` attribute's value.
    pub value_range: Range<usize>,
}

/// The parts of a domain a patch reads.
#[derive(Debug)]
pub struct Domain<'a> {
    /// The whole text.
    pub text: &'a str,
    /// `<name>`.
    pub name: String,
    /// The quote its attributes are written with.
    pub quote: char,
    /// The prefix bound to libvirt's QEMU namespace, when declared.
    pub qemu_prefix: Option<String>,
    /// The `<domain>` element.
    pub root: Element,
    /// `<devices>`.
    pub devices: Element,
    /// PCI host devices, in document order.
    pub hostdevs: Vec<Hostdev>,
    /// PCI controllers, in document order.
    pub controllers: Vec<Controller>,
    /// Where the last `<controller>` ends, if any.
    pub last_controller_end: Option<usize>,
    /// `<qemu:override>`, if any.
    pub qemu_override: Option<Element>,
    /// Devices in `<qemu:override>` with their elements.
    pub override_devices: Vec<(String, Element)>,
    /// Every property set there.
    pub properties: Vec<SetProperty>,
    /// `<qemu:commandline>`, if any.
    pub qemu_commandline: Option<Element>,
    /// Cliques set through `<qemu:commandline>`.
    pub commandline: Vec<CommandlineClique>,
    /// vp2p's fw_cfg file given there, if it is.
    pub fw_cfg_arg: Option<FwCfgArg>,
    /// `<sysinfo type='fwcfg'>`, if any.
    pub fw_cfg: Option<Element>,
    /// Its entries.
    pub fw_cfg_entries: Vec<FwCfgEntry>,
    /// Guest NUMA cells (`<cpu><numa><cell id>`).
    pub numa_cells: Vec<u32>,
    /// Where `<os>` starts, to put `<sysinfo>` before it.
    pub os_start: Option<usize>,
}

impl<'a> Domain<'a> {
    /// Reads `text`.
    pub fn parse(text: &'a str) -> Result<Self, DomainError> {
        let doc = Document::parse(text).map_err(|e| {
            let s = xml_syntax(text, &e);
            DomainError::Xml {
                line: s.line,
                why: s.why,
            }
        })?;
        let root = doc.root_element();
        if root.tag_name().name() != "domain" || root.tag_name().namespace().is_some() {
            return Err(DomainError::NotDomain(root.tag_name().name().to_string()));
        }
        let qemu_prefix = root.lookup_prefix(QEMU_NAMESPACE).map(str::to_string);
        if qemu_prefix.is_none() {
            if let Some(other) = root.lookup_namespace_uri(Some("qemu")) {
                return Err(DomainError::QemuPrefix(other.to_string()));
            }
        }
        let name = child(root, "name")
            .and_then(|n| n.text())
            .ok_or(DomainError::Missing("name"))?
            .trim()
            .to_string();
        let devices = child(root, "devices").ok_or(DomainError::Missing("devices"))?;
        let mut hostdevs = Vec::new();
        let mut controllers = Vec::new();
        let mut last_controller_end = None;
        for d in devices.children().filter(Node::is_element) {
            match d.tag_name().name() {
                "hostdev" if is_pci_hostdev(d) => {
                    if let Some(h) = hostdev(text, d)? {
                        hostdevs.push(h);
                    }
                }
                "controller" => {
                    last_controller_end = Some(d.range().end);
                    if d.attribute("type") == Some("pci") {
                        controllers.push(Controller {
                            index: number(text, d, "controller", "index")?.unwrap_or(0),
                            model: d.attribute("model").unwrap_or_default().to_string(),
                            alias: child(d, "alias")
                                .and_then(|a| a.attribute("name"))
                                .map(str::to_string),
                            range: d.range(),
                        });
                    }
                }
                _ => {}
            }
        }
        let qemu = |n: Node, local: &str| {
            n.tag_name().namespace() == Some(QEMU_NAMESPACE) && n.tag_name().name() == local
        };
        let mut qemu_override = None;
        let mut override_devices = Vec::new();
        let mut properties = Vec::new();
        let mut qemu_commandline = None;
        let mut commandline = Vec::new();
        let mut fw_cfg_arg = None;
        let mut fw_cfg = None;
        let mut fw_cfg_entries = Vec::new();
        for n in root.children().filter(Node::is_element) {
            if qemu(n, "override") {
                qemu_override = Some(element(text, n));
                for dev in n.children().filter(|c| qemu(*c, "device")) {
                    let alias = dev.attribute("alias").unwrap_or_default().to_string();
                    override_devices.push((alias.clone(), element(text, dev)));
                    for fe in dev.children().filter(|c| qemu(*c, "frontend")) {
                        for p in fe.children().filter(|c| qemu(*c, "property")) {
                            properties.push(SetProperty {
                                alias: alias.clone(),
                                name: p.attribute("name").unwrap_or_default().to_string(),
                                value: p.attribute("value").unwrap_or_default().to_string(),
                                frontend: element(text, fe),
                            });
                        }
                    }
                }
            } else if qemu(n, "commandline") {
                qemu_commandline = Some(element(text, n));
                let args: Vec<roxmltree::Attribute> = n
                    .children()
                    .filter(|c| qemu(*c, "arg"))
                    .filter_map(|a| a.attribute_node("value"))
                    .collect();
                let values: Vec<&str> = args.iter().map(|a| a.value()).collect();
                commandline.extend(commandline_cliques(&values));
                let ours = format!("name={FW_CFG_NAME},");
                fw_cfg_arg = args
                    .windows(2)
                    .find(|w| w[0].value() == "-fw_cfg" && w[1].value().starts_with(&ours))
                    .map(|w| FwCfgArg {
                        value: w[1].value().to_string(),
                        value_range: w[1].range_value(),
                    });
            } else if n.tag_name().name() == "sysinfo" && n.attribute("type") == Some("fwcfg") {
                fw_cfg = Some(element(text, n));
                for e in n.children().filter(|c| c.has_tag_name("entry")) {
                    fw_cfg_entries.push(FwCfgEntry {
                        name: e.attribute("name").unwrap_or_default().to_string(),
                        file: e.attribute("file").map(str::to_string),
                        value: e.text().unwrap_or_default().to_string(),
                        range: e.range(),
                    });
                }
            }
        }
        let numa_cells = child(root, "cpu")
            .and_then(|c| child(c, "numa"))
            .map(|numa| {
                numa.children()
                    .filter(|c| c.has_tag_name("cell"))
                    .map(|c| number(text, c, "cell", "id").map(|n| n.unwrap_or(0)))
                    .collect::<Result<Vec<u32>, _>>()
            })
            .transpose()?
            .unwrap_or_default();
        Ok(Domain {
            text,
            name,
            quote: start_tag_quote(text, root),
            qemu_prefix,
            root: element(text, root),
            devices: element(text, devices),
            hostdevs,
            controllers,
            last_controller_end,
            qemu_override,
            override_devices,
            properties,
            qemu_commandline,
            commandline,
            fw_cfg_arg,
            fw_cfg,
            fw_cfg_entries,
            numa_cells,
            os_start: child(root, "os").map(|o| o.range().start),
        })
    }

    /// The hostdev passing `host` through.
    pub fn hostdev(&self, host: Bdf) -> Option<&Hostdev> {
        self.hostdevs.iter().find(|h| h.host == host)
    }

    /// Whether the fw_cfg entry vp2p writes is there, and where.
    pub fn nccl_entry(&self) -> Option<&FwCfgEntry> {
        self.fw_cfg_entries.iter().find(|e| e.name == FW_CFG_NAME)
    }

    /// Every alias in the domain, to keep new ones unique.
    pub fn aliases(&self) -> Vec<&str> {
        self.hostdevs
            .iter()
            .filter_map(|h| h.alias.as_ref().map(|a| a.0.as_str()))
            .chain(self.controllers.iter().filter_map(|c| c.alias.as_deref()))
            .collect()
    }
}

fn is_pci_hostdev(n: Node) -> bool {
    n.attribute("mode").unwrap_or("subsystem") == "subsystem" && n.attribute("type") == Some("pci")
}

/// A number attribute in libvirt's forms: `0x1b` or decimal. None when absent.
fn number(
    text: &str,
    n: Node,
    element: &'static str,
    attr: &'static str,
) -> Result<Option<u32>, DomainError> {
    let Some(v) = n.attribute(attr) else {
        return Ok(None);
    };
    int(v)
        .and_then(|x| u32::try_from(x).ok())
        .map(Some)
        .ok_or_else(|| DomainError::Number {
            line: line_of(text, n.range().start),
            element,
            attr,
            value: v.to_string(),
        })
}

fn small(
    text: &str,
    n: Node,
    element: &'static str,
    attr: &'static str,
    max: u32,
) -> Result<u32, DomainError> {
    let v = number(text, n, element, attr)?.unwrap_or(0);
    if v > max {
        return Err(DomainError::Number {
            line: line_of(text, n.range().start),
            element,
            attr,
            value: n.attribute(attr).unwrap_or_default().to_string(),
        });
    }
    Ok(v)
}

fn hostdev(text: &str, n: Node) -> Result<Option<Hostdev>, DomainError> {
    let Some(source) = child(n, "source") else {
        return Ok(None);
    };
    let Some(addr) = child(source, "address") else {
        return Ok(None);
    };
    let host = Bdf {
        domain: small(text, addr, "address", "domain", 0xffff)?,
        bus: small(text, addr, "address", "bus", 0xff)? as u8,
        device: small(text, addr, "address", "slot", 0x1f)? as u8,
        function: small(text, addr, "address", "function", 7)? as u8,
    };
    let alias = child(n, "alias").and_then(|a| {
        a.attribute_node("name")
            .map(|attr| (attr.value().to_string(), attr.range_value()))
    });
    let alias_end = child(n, "alias").map(|a| a.range().end);
    let guest = match child(n, "address").filter(|a| a.attribute("type") == Some("pci")) {
        Some(a) => Some((
            GuestAddress {
                bus: number(text, a, "address", "bus")?.unwrap_or(0),
                slot: small(text, a, "address", "slot", 0x1f)? as u8,
                function: small(text, a, "address", "function", 7)? as u8,
                multifunction: a.attribute("multifunction") == Some("on"),
            },
            a.range(),
        )),
        None => None,
    };
    Ok(Some(Hostdev {
        host,
        alias,
        alias_end,
        guest,
        source_end: source.range().end,
        child_indent: indent_before(text, source.range().start),
        line: line_of(text, n.range().start),
    }))
}

/// What `<qemu:arg>` values set the clique property, in order.
fn commandline_cliques(args: &[&str]) -> Vec<CommandlineClique> {
    let mut out = Vec::new();
    for (i, a) in args.iter().enumerate() {
        if !a.contains(CLIQUE_PROPERTY) {
            continue;
        }
        let set = (i > 0 && args[i - 1] == "-set")
            .then(|| a.strip_prefix("device."))
            .flatten()
            .and_then(|rest| rest.split_once(&format!(".{CLIQUE_PROPERTY}=")));
        out.push(match set {
            Some((alias, value)) => CommandlineClique::Device {
                alias: alias.to_string(),
                value: value.to_string(),
            },
            None => CommandlineClique::Other(a.to_string()),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // libvirt's own formatting (virsh dumpxml): single quotes, two-space indent.
    const VIRSH: &str =
        "<domain type='kvm' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>g1</name>
  <devices>
    <controller type='pci' index='0' model='pcie-root'/>
    <controller type='pci' index='1' model='pcie-root-port'>
      <model name='pcie-root-port'/>
      <alias name='ua-rp1'/>
    </controller>
    <hostdev mode='subsystem' type='pci' managed='yes'>
      <source>
        <address domain='0x0000' bus='0x1b' slot='0x00' function='0x0'/>
      </source>
      <alias name='ua-gpu0'/>
      <address type='pci' domain='0x0000' bus='0x01' slot='0x00' function='0x0'/>
    </hostdev>
  </devices>
  <qemu:commandline>
    <qemu:arg value='-set'/>
    <qemu:arg value='device.ua-gpu0.x-nv-gpudirect-clique=3'/>
    <qemu:arg value='-global'/>
    <qemu:arg value='vfio-pci.x-nv-gpudirect-clique=1'/>
  </qemu:commandline>
</domain>
";

    #[test]
    fn reads_hostdevs_controllers_and_commandline() {
        let d = Domain::parse(VIRSH).unwrap();
        assert_eq!(d.name, "g1");
        assert_eq!(d.quote, '\'');
        assert_eq!(d.qemu_prefix.as_deref(), Some("qemu"));
        assert_eq!(d.hostdevs.len(), 1);
        let h = &d.hostdevs[0];
        assert_eq!(h.host.to_string(), "0000:1b:00.0");
        assert_eq!(h.alias.as_ref().unwrap().0, "ua-gpu0");
        assert_eq!(&VIRSH[h.alias.as_ref().unwrap().1.clone()], "ua-gpu0");
        assert_eq!(h.child_indent, "      ");
        let (g, r) = h.guest.as_ref().unwrap();
        assert_eq!((g.bus, g.slot, g.function), (1, 0, 0));
        assert!(VIRSH[r.clone()].starts_with("<address type='pci'"));
        assert_eq!(d.controllers.len(), 2);
        assert_eq!(d.controllers[1].alias.as_deref(), Some("ua-rp1"));
        assert_eq!(
            d.commandline,
            vec![
                CommandlineClique::Device {
                    alias: "ua-gpu0".into(),
                    value: "3".into()
                },
                CommandlineClique::Other("vfio-pci.x-nv-gpudirect-clique=1".into()),
            ]
        );
        assert_eq!(d.devices.child_indent, "    ");
        assert_eq!(d.devices.indent, "  ");
        assert_eq!(
            &VIRSH[d.devices.range.end - 10..d.devices.range.end],
            "</devices>"
        );
    }

    #[test]
    fn go_style_double_quotes_and_end_tags() {
        let xml = "<domain type=\"kvm\"><name>ns_vmi</name><devices><hostdev type=\"pci\" managed=\"no\" mode=\"subsystem\"><source><address type=\"pci\" domain=\"0x0000\" bus=\"0x1b\" slot=\"0x00\" function=\"0x0\"></address></source><alias name=\"ua-gpu-gpu1\"></alias></hostdev></devices></domain>";
        let d = Domain::parse(xml).unwrap();
        assert_eq!(d.quote, '"');
        assert_eq!(d.qemu_prefix, None);
        assert_eq!(d.hostdevs[0].alias.as_ref().unwrap().0, "ua-gpu-gpu1");
        assert_eq!(d.root.qname, "domain");
        assert_eq!(&xml[d.root.start_tag_end - 1..d.root.start_tag_end], ">");
    }

    #[test]
    fn bad_domains_name_what_is_wrong() {
        let e = Domain::parse("<domain><name>x</name></domain>").unwrap_err();
        assert_eq!(e.to_string(), "the domain has no <devices>");
        let e = Domain::parse("<network/>").unwrap_err();
        assert!(e.to_string().contains("<network>"), "{e}");
        let e = Domain::parse("<domain><name>x").unwrap_err();
        assert!(e.to_string().starts_with("not XML: line 1: "), "{e}");
        // Cut short on line 3: named there, not at line 1.
        let e = Domain::parse("<domain>\n<name>x</name>\n<devices>").unwrap_err();
        assert!(e.to_string().starts_with("not XML: line 3: "), "{e}");
        // A huge name is quoted as a short prefix, once.
        let huge = "a".repeat(1 << 20);
        let e = Domain::parse(&format!("<domain>\n</{huge}>"))
            .unwrap_err()
            .to_string();
        assert!(e.len() < 300, "{} bytes", e.len());
        assert_eq!(e.matches("(1048576 bytes)").count(), 1, "{e}");
        let e = Domain::parse(&format!("<{huge}/>"))
            .unwrap_err()
            .to_string();
        assert!(e.len() < 300, "{} bytes", e.len());
        let bad = "<domain><name>x</name><devices>\n<hostdev mode='subsystem' type='pci'><source><address bus='0x1g' slot='0' function='0'/></source></hostdev></devices></domain>";
        let e = Domain::parse(bad).unwrap_err();
        assert_eq!(e.to_string(), "line 2: address bus='0x1g' is not a number");
        let e = Domain::parse("<domain xmlns:qemu='urn:x'><name>x</name><devices/></domain>")
            .unwrap_err();
        assert!(e.to_string().contains("urn:x"), "{e}");
    }
}
