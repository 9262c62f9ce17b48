//! An NCCL topology file, or NCCL's own dump (`NCCL_TOPO_DUMP_FILE`), read
//! with everything NCCL's rules use: CPUs and their x86 identity, the PCI
//! tree, `<gpu>` elements with their `<nvlink>`s, and NICs with their nets.

use p2p_topology::bdf::Bdf;
use p2p_topology::excerpt::{short, xml_syntax};
use p2p_topology::hex;
use p2p_topology::nccl_topo::MAX_PCI_DEPTH;

/// Why a topology text cannot be read, with the 1-based line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {why}")]
pub struct TopoXmlError {
    /// The line of the offending element; for a text that is not XML, where
    /// the parser stopped (the last line when the text ends early).
    pub line: u32,
    /// What is wrong, in words.
    pub why: String,
}

/// A whole file: the `<cpu>` elements of `<system version="1">`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TopoXml {
    /// One per NUMA node.
    pub cpus: Vec<XmlCpu>,
}

/// A `<cpu>` and what hangs below it.
#[derive(Debug, Clone, PartialEq)]
pub struct XmlCpu {
    /// `numaid`; -1 when NCCL does not know the node.
    pub numaid: i32,
    /// `arch` (`x86_64`, `arm64`, `ppc64`); None when the file leaves it to NCCL.
    pub arch: Option<String>,
    /// `vendor` (`GenuineIntel`, `AuthenticAMD`); None when left to NCCL.
    pub vendor: Option<String>,
    /// `familyid`, for Intel and Zhaoxin.
    pub familyid: Option<u32>,
    /// `modelid`, for Intel and Zhaoxin.
    pub modelid: Option<u32>,
    /// PCI nodes directly below the CPU.
    pub pci: Vec<XmlPci>,
    /// Nets of a `<nic>` placed directly below the CPU (NCCL's socket
    /// transport puts a NIC without a PCI address there).
    pub nets: Vec<XmlNet>,
    /// Where the element starts.
    pub line: u32,
}

/// A `<pci>`: a switch, a GPU or a NIC.
#[derive(Debug, Clone, PartialEq)]
pub struct XmlPci {
    /// `busid`.
    pub busid: Bdf,
    /// `class`, 24 bits.
    pub class: u32,
    /// `link_speed` as the kernel spells it (`32.0 GT/s PCIe`).
    pub link_speed: Option<String>,
    /// `link_width`; 0 or absent counts as 16.
    pub link_width: Option<u32>,
    /// The `<gpu>` child, when NCCL (or the file) put one.
    pub gpu: Option<XmlGpu>,
    /// Nets of the `<nic>` child.
    pub nets: Vec<XmlNet>,
    /// `<pci>` children.
    pub children: Vec<XmlPci>,
    /// Where the element starts.
    pub line: u32,
}

/// A `<gpu>` element.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct XmlGpu {
    /// `sm` (compute capability x 10), when written.
    pub sm: Option<u32>,
    /// `gdr`: GPUDirect RDMA support, when written.
    pub gdr: Option<bool>,
    /// `<nvlink>` children. Any one of them makes NCCL skip NVML's NVLink
    /// detection for this GPU (src/graph/xml.cc).
    pub nvlinks: Vec<XmlNvLink>,
}

/// An `<nvlink>`.
#[derive(Debug, Clone, PartialEq)]
pub struct XmlNvLink {
    /// `target`: the peer's bus id (a GPU, or an NVSwitch's placeholder id);
    /// empty when the file gives none for a link that is not to a GPU.
    pub target: String,
    /// `count`: links to that target.
    pub count: u32,
    /// `tclass`: the target's class (0x0302.. GPU, 0x068000 NVSwitch, 0x068001 CPU).
    pub tclass: u32,
}

/// A `<net>` of a `<nic>`.
#[derive(Debug, Clone, PartialEq)]
pub struct XmlNet {
    /// `name` (`mlx5_0`, `eth0`).
    pub name: String,
    /// `speed` in Mb/s.
    pub speed_mbps: Option<u64>,
    /// `gdr`: the NIC can read and write GPU memory (GPUDirect RDMA).
    pub gdr: Option<bool>,
}

fn line_of(n: roxmltree::Node) -> u32 {
    n.document().text_pos_at(n.range().start).row
}

fn bad(n: roxmltree::Node, why: impl Into<String>) -> TopoXmlError {
    TopoXmlError {
        line: line_of(n),
        why: why.into(),
    }
}

/// A decimal attribute's type, with what its values must be in words.
trait Decimal: std::str::FromStr {
    /// What the attribute must hold, for the message.
    const WANT: &'static str;
}

impl Decimal for u32 {
    const WANT: &'static str = "must be a non-negative integer (at most 4294967295)";
}

impl Decimal for u64 {
    const WANT: &'static str = "must be a non-negative integer";
}

impl Decimal for i32 {
    const WANT: &'static str = "must be an integer (-1 for unknown)";
}

impl Decimal for i64 {
    const WANT: &'static str = "must be an integer";
}

fn num<T: Decimal>(n: roxmltree::Node, name: &str) -> Result<Option<T>, TopoXmlError> {
    n.attribute(name)
        .map(|v| {
            v.trim().parse().map_err(|_| {
                bad(
                    n,
                    format!(
                        "<{}> {name}=\"{}\" {}",
                        n.tag_name().name(),
                        short(v),
                        T::WANT
                    ),
                )
            })
        })
        .transpose()
}

fn hex_attr(n: roxmltree::Node, name: &str) -> Result<Option<u32>, TopoXmlError> {
    n.attribute(name)
        .map(|v| {
            hex::parse::<u32>(v)
                .map_err(|e| bad(n, format!("<{}> {name}: {e}", n.tag_name().name())))
        })
        .transpose()
}

fn flag(n: roxmltree::Node, name: &str) -> Result<Option<bool>, TopoXmlError> {
    Ok(num::<i64>(n, name)?.map(|v| v != 0))
}

fn nets(nic: roxmltree::Node) -> Result<Vec<XmlNet>, TopoXmlError> {
    let mut out = Vec::new();
    for net in nic.children().filter(|c| c.has_tag_name("net")) {
        out.push(XmlNet {
            name: net.attribute("name").unwrap_or("").to_string(),
            speed_mbps: num(net, "speed")?,
            gdr: flag(net, "gdr")?,
        });
    }
    Ok(out)
}

fn gpu(n: roxmltree::Node) -> Result<XmlGpu, TopoXmlError> {
    let mut nvlinks = Vec::new();
    for l in n.children().filter(|c| c.has_tag_name("nvlink")) {
        let tclass = hex_attr(l, "tclass")?.ok_or_else(|| bad(l, "<nvlink> without tclass"))?;
        // NCCL reads the target only of a link to a GPU (src/graph/topo.cc:573).
        let target = match l.attribute("target") {
            Some(t) => t.to_string(),
            None if !l.attribute("tclass").is_some_and(|t| t.starts_with("0x03")) => String::new(),
            None => return Err(bad(l, "<nvlink> to a GPU without target")),
        };
        nvlinks.push(XmlNvLink {
            target,
            count: num(l, "count")?.ok_or_else(|| bad(l, "<nvlink> without count"))?,
            tclass,
        });
    }
    Ok(XmlGpu {
        sm: num(n, "sm")?,
        gdr: flag(n, "gdr")?,
        nvlinks,
    })
}

/// The class of a `<pci>` that gives none, where what it holds settles it:
/// a `<gpu>` (NCCL sets `0x03` on a GPU's own `<pci>`, src/graph/xml.cc:890
/// at v2.28.3-1), a `<nic>` (`0x02`, xml.cc:941), or `<pci>`s (a switch;
/// NCCL reads its class from sysfs, or refuses the file when the bus id is
/// not there, which [`super::loader`] tells first).
fn class_nccl_gives(n: roxmltree::Node) -> Option<u32> {
    let holds = |name: &str| n.children().any(|c| c.has_tag_name(name));
    if holds("gpu") {
        Some(0x030000)
    } else if holds("nic") {
        Some(0x020000)
    } else if holds("pci") {
        Some(0x060400)
    } else {
        None
    }
}

/// `n`, a `<pci>` at nesting `depth` (1 directly below its `<cpu>`).
fn pci(n: roxmltree::Node, depth: usize) -> Result<XmlPci, TopoXmlError> {
    if depth > MAX_PCI_DEPTH {
        return Err(bad(
            n,
            format!(
                "<pci> nested {depth} deep: vp2p reads at most {MAX_PCI_DEPTH} levels \
                 (NCCL itself loads at most 256 nodes from a topology file)"
            ),
        ));
    }
    let text = n
        .attribute("busid")
        .ok_or_else(|| bad(n, "<pci> without busid"))?;
    let busid: Bdf = text
        .parse()
        .map_err(|e| bad(n, format!("<pci> busid: {e}")))?;
    let class = match hex_attr(n, "class")? {
        Some(c) => c,
        None => class_nccl_gives(n).ok_or_else(|| {
            bad(
                n,
                format!("<pci busid=\"{busid}\"> without class (NCCL needs it)"),
            )
        })?,
    };
    let mut out = XmlPci {
        busid,
        class,
        link_speed: n.attribute("link_speed").map(str::to_string),
        link_width: num(n, "link_width")?,
        gpu: None,
        nets: Vec::new(),
        children: Vec::new(),
        line: line_of(n),
    };
    for c in n.children().filter(|c| c.is_element()) {
        match c.tag_name().name() {
            "pci" => out.children.push(pci(c, depth + 1)?),
            "gpu" => out.gpu = Some(gpu(c)?),
            "nic" => out.nets.extend(nets(c)?),
            _ => {}
        }
    }
    Ok(out)
}

/// Reads `text` as NCCL 2.28's XML reader accepts it. NCCL's own dumps write
/// a stray empty attribute (`=""`) after each `<nvlink>`'s attributes; its
/// reader skips it, and so does this one.
pub fn parse(text: &str) -> Result<TopoXml, TopoXmlError> {
    let cleaned = text.replace(" =\"\"", "");
    let doc = roxmltree::Document::parse(&cleaned).map_err(|e| {
        let s = xml_syntax(&cleaned, &e);
        TopoXmlError {
            line: s.line,
            why: format!("not XML: {}", s.why),
        }
    })?;
    let root = doc.root_element();
    if !root.has_tag_name("system") {
        return Err(bad(
            root,
            format!(
                "top element is <{}>, NCCL wants <system>",
                short(root.tag_name().name())
            ),
        ));
    }
    match root.attribute("version") {
        Some("1") => {}
        Some(v) => {
            return Err(bad(
                root,
                format!(
                    "<system version=\"{}\">: NCCL 2.28 reads version 1 only",
                    short(v)
                ),
            ))
        }
        None => {
            return Err(bad(
                root,
                "<system> without version (NCCL wants version=\"1\")",
            ))
        }
    }
    let mut cpus = Vec::new();
    for c in root.children().filter(|c| c.has_tag_name("cpu")) {
        let numaid = num(c, "numaid")?.ok_or_else(|| bad(c, "<cpu> without numaid"))?;
        let mut cpu = XmlCpu {
            numaid,
            arch: c.attribute("arch").map(str::to_string),
            vendor: c.attribute("vendor").map(str::to_string),
            familyid: num(c, "familyid")?,
            modelid: num(c, "modelid")?,
            pci: Vec::new(),
            nets: Vec::new(),
            line: line_of(c),
        };
        for s in c.children().filter(|s| s.is_element()) {
            match s.tag_name().name() {
                "pci" => cpu.pci.push(pci(s, 1)?),
                "nic" => cpu.nets.extend(nets(s)?),
                _ => {}
            }
        }
        cpus.push(cpu);
    }
    Ok(TopoXml { cpus })
}

impl TopoXml {
    /// Every `<pci>`, depth first, with the `numaid` of the `<cpu>` it hangs below.
    pub fn pci_nodes(&self) -> Vec<(i32, &XmlPci)> {
        fn walk<'a>(numa: i32, p: &'a [XmlPci], out: &mut Vec<(i32, &'a XmlPci)>) {
            for n in p {
                out.push((numa, n));
                walk(numa, &n.children, out);
            }
        }
        let mut out = Vec::new();
        for c in &self.cpus {
            walk(c.numaid, &c.pci, &mut out);
        }
        out
    }

    /// The `<pci>` at `busid`.
    pub fn find(&self, busid: Bdf) -> Option<&XmlPci> {
        self.pci_nodes()
            .into_iter()
            .map(|(_, n)| n)
            .find(|n| n.busid == busid)
    }

    /// Every `<pci>` whose class is a display controller (0x03xxxx): the GPUs.
    pub fn gpu_busids(&self) -> Vec<Bdf> {
        self.pci_nodes()
            .into_iter()
            .filter(|(_, n)| n.class >> 16 == 0x03)
            .map(|(_, n)| n.busid)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_line() {
        let e = parse("<system version=\"1\">\n <cpu numaid=\"0\">\n  <pci busid=\"zz\" class=\"0x060400\"/>\n </cpu>\n</system>").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.why.contains("busid: 'zz' is not a PCI address"), "{e}");
        let e = parse("<system version=\"2\"/>").unwrap_err();
        assert!(e.why.contains("version 1 only"), "{e}");
        let e = parse("<system version=\"1\">\n<cpu>").unwrap_err();
        assert!(e.why.starts_with("not XML"), "{e}");
        let e = parse("<system version=\"1\">\n<cpu numaid=\"x\"/></system>").unwrap_err();
        assert_eq!(
            (e.line, e.why.as_str()),
            (2, "<cpu> numaid=\"x\" must be an integer (-1 for unknown)")
        );
    }

    /// `<pci>` elements nested `depth` deep below one `<cpu>`, one per line
    /// from line 3.
    fn nested(depth: usize) -> String {
        let mut s = String::from("<system version=\"1\">\n<cpu numaid=\"0\">\n");
        for i in 0..depth {
            s += &format!(
                "<pci busid=\"0000:{:02x}:00.0\" class=\"0x060400\">\n",
                i % 256
            );
        }
        s += &"</pci>".repeat(depth);
        s + "\n</cpu>\n</system>\n"
    }

    /// NCCL loads at most 256 nodes (NCCL_TOPO_XML_MAX_NODES, v2.28.3-1), so
    /// 256 levels of `<pci>` are read and the 257th is refused at its line;
    /// 12,000 levels (which overflowed the stack) are refused the same way.
    #[test]
    fn pci_nesting_is_bounded_at_nccls_node_limit() {
        let xml = parse(&nested(MAX_PCI_DEPTH)).unwrap();
        assert_eq!(xml.pci_nodes().len(), MAX_PCI_DEPTH);
        for depth in [MAX_PCI_DEPTH + 1, 12_000] {
            let e = parse(&nested(depth)).unwrap_err();
            // The 257th <pci> starts on line 2 + 257.
            assert_eq!(e.line, 259, "{e}");
            assert!(e.why.starts_with("<pci> nested 257 deep"), "{e}");
        }
    }

    /// A huge attribute is quoted as a short prefix with its length, once.
    #[test]
    fn huge_values_are_quoted_short_and_once() {
        let huge = "a".repeat(1 << 20);
        for (attr, at) in [
            ("busid", "busid=\"0000:00:06.0\""),
            ("class", "class=\"0x030200\""),
            ("link_width", "link_width=\"16\""),
        ] {
            let text = "<system version=\"1\">\n<cpu numaid=\"0\">\n<pci busid=\"0000:00:06.0\" class=\"0x030200\" link_width=\"16\"/>\n</cpu>\n</system>"
                .replace(at, &format!("{attr}=\"{huge}\""));
            let e = parse(&text).unwrap_err();
            assert_eq!(e.line, 3, "{attr}");
            assert!(e.why.len() < 300, "{attr}: {} bytes", e.why.len());
            assert_eq!(e.why.matches("(1048576 bytes)").count(), 1, "{}", e.why);
        }
    }

    /// A file cut short is reported at the line where it ends, not line 1.
    #[test]
    fn truncated_file_names_its_last_line() {
        let whole = nested(3);
        let cut = &whole[..whole.find("</pci>").unwrap()];
        let e = parse(cut).unwrap_err();
        assert_eq!(e.line, cut.trim_end().lines().count() as u32, "{e}");
        assert_eq!(e.line, 5);
        assert!(e.why.contains("ends"), "{e}");
    }

    /// What NCCL fills or never reads is not demanded: the class of a GPU's
    /// own `<pci>` (NCCL sets 0x03), of a switch (sysfs), of a NIC's (0x02);
    /// the target of an NVLink to an NVSwitch.
    #[test]
    fn what_nccl_fills_is_not_demanded() {
        let text = "<system version=\"1\">\n<cpu numaid=\"0\">\n<pci busid=\"0000:ff:00.0\">\n<pci busid=\"0000:00:06.0\"><gpu><nvlink count=\"18\" tclass=\"0x068000\"/></gpu></pci>\n</pci>\n<pci busid=\"0000:00:09.0\"><nic><net name=\"mlx5_0\"/></nic></pci>\n</cpu>\n</system>";
        let xml = parse(text).unwrap();
        let classes: Vec<u32> = xml.pci_nodes().iter().map(|(_, p)| p.class).collect();
        assert_eq!(classes, [0x060400, 0x030000, 0x020000]);
        assert_eq!(xml.gpu_busids(), ["0000:00:06.0".parse::<Bdf>().unwrap()]);
        let link = &xml
            .find("0000:00:06.0".parse().unwrap())
            .unwrap()
            .gpu
            .as_ref()
            .unwrap()
            .nvlinks[0];
        assert_eq!((link.target.as_str(), link.count), ("", 18));
        let e = parse(&text.replace("0x068000", "0x030200")).unwrap_err();
        assert_eq!(
            (e.line, e.why.as_str()),
            (4, "<nvlink> to a GPU without target")
        );
    }

    /// `count="-1"` is a number: the message says what the count must be.
    #[test]
    fn negative_count_says_what_a_count_must_be() {
        let text = "<system version=\"1\">\n<cpu numaid=\"0\">\n<pci busid=\"0000:00:06.0\" class=\"0x030200\">\n<gpu>\n<nvlink target=\"0000:00:07.0\" count=\"-1\" tclass=\"0x030200\"/>\n</gpu>\n</pci>\n</cpu>\n</system>";
        let e = parse(text).unwrap_err();
        assert_eq!(
            (e.line, e.why.as_str()),
            (
                5,
                "<nvlink> count=\"-1\" must be a non-negative integer (at most 4294967295)"
            )
        );
    }
}
