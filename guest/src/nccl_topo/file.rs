//! Reading an NCCL topology file back into the shared model, with errors that
//! name the file and the line.

use std::path::Path;

use p2p_topology::excerpt::{short, xml_syntax};
use p2p_topology::hex::{self, HexWidth};
use p2p_topology::nccl_topo::{NcclCpu, NcclPci, NcclSystem, MAX_PCI_DEPTH, NCCL_TOPO_VERSION};
use p2p_topology::Bdf;

use super::NcclTopoError;

fn bad(path: &Path, node: roxmltree::Node, why: String) -> NcclTopoError {
    let pos = node.document().text_pos_at(node.range().start);
    NcclTopoError::Parse {
        path: path.to_path_buf(),
        line: pos.row,
        why,
    }
}

/// Reads hex attribute `name` of width `T` ([`hex::parse`]); None when absent.
fn hex_attr<T: HexWidth>(
    path: &Path,
    n: roxmltree::Node,
    name: &str,
) -> Result<Option<T>, NcclTopoError> {
    n.attribute(name)
        .map(|v| hex::parse(v).map_err(|e| bad(path, n, format!("{name}: {e}"))))
        .transpose()
}

/// Reads decimal attribute `name` (an integer that fits `T`); None when absent.
fn int_attr<T: TryFrom<i64>>(
    path: &Path,
    n: roxmltree::Node,
    name: &str,
) -> Result<Option<T>, NcclTopoError> {
    let Some(v) = n.attribute(name) else {
        return Ok(None);
    };
    let fail = |want: &str| bad(path, n, format!("{name}=\"{}\" {want}", short(v)));
    let wide: i64 = v.trim().parse().map_err(|_| fail("is not an integer"))?;
    T::try_from(wide).map(Some).map_err(|_| {
        fail(if wide < 0 && T::try_from(-1).is_err() {
            "must be a non-negative integer"
        } else {
            "is out of range"
        })
    })
}

/// `n`, a `<pci>` at nesting `depth` (1 directly below its `<cpu>`).
fn pci(path: &Path, n: roxmltree::Node, depth: usize) -> Result<NcclPci, NcclTopoError> {
    if depth > MAX_PCI_DEPTH {
        return Err(bad(
            path,
            n,
            format!(
                "<pci> nested {depth} deep: vp2p reads at most {MAX_PCI_DEPTH} levels \
                 (NCCL itself loads at most 256 nodes from a topology file)"
            ),
        ));
    }
    let busid = n
        .attribute("busid")
        .ok_or_else(|| bad(path, n, "<pci> without busid".into()))?;
    let busid: Bdf = busid
        .parse()
        .map_err(|e| bad(path, n, format!("busid: {e}")))?;
    let class = hex_attr::<u32>(path, n, "class")?.ok_or_else(|| {
        bad(
            path,
            n,
            format!("<pci busid=\"{busid}\"> without class (NCCL needs it)"),
        )
    })?;
    let mut children = Vec::new();
    for c in n.children().filter(|c| c.has_tag_name("pci")) {
        children.push(pci(path, c, depth + 1)?);
    }
    Ok(NcclPci {
        busid,
        class,
        vendor: hex_attr(path, n, "vendor")?,
        device: hex_attr(path, n, "device")?,
        subsystem_vendor: hex_attr(path, n, "subsystem_vendor")?,
        subsystem_device: hex_attr(path, n, "subsystem_device")?,
        link_speed: n.attribute("link_speed").map(str::to_string),
        link_width: int_attr(path, n, "link_width")?,
        children,
    })
}

/// Parses `text` (read from `path`) as NCCL 2.28 would accept it: a `<system
/// version="1">` of `<cpu numaid=...>` elements holding nested `<pci>`s.
/// Elements NCCL adds itself (`<gpu>`, `<nic>`) are ignored.
pub fn parse(path: &Path, text: &str) -> Result<NcclSystem, NcclTopoError> {
    let doc = roxmltree::Document::parse(text).map_err(|e| {
        let s = xml_syntax(text, &e);
        NcclTopoError::Parse {
            path: path.to_path_buf(),
            line: s.line,
            why: s.why,
        }
    })?;
    let root = doc.root_element();
    if !root.has_tag_name("system") {
        return Err(bad(
            path,
            root,
            format!(
                "the root element is <{}>, not <system>",
                short(root.tag_name().name())
            ),
        ));
    }
    let version: Option<u32> = int_attr(path, root, "version")?;
    if version != Some(NCCL_TOPO_VERSION) {
        return Err(bad(
            path,
            root,
            format!(
                "<system version=\"{}\">: NCCL 2.28 reads version {NCCL_TOPO_VERSION} only",
                version.map_or("(none)".into(), |v| v.to_string())
            ),
        ));
    }
    let mut cpus = Vec::new();
    for c in root.children().filter(|c| c.has_tag_name("cpu")) {
        let numaid = int_attr::<i32>(path, c, "numaid")?
            .ok_or_else(|| bad(path, c, "<cpu> without numaid (NCCL needs it)".into()))?;
        let mut pcis = Vec::new();
        for p in c.children().filter(|p| p.has_tag_name("pci")) {
            pcis.push(pci(path, p, 1)?);
        }
        cpus.push(NcclCpu {
            numaid,
            affinity: c.attribute("affinity").map(str::to_string),
            arch: c.attribute("arch").map(str::to_string),
            vendor: c.attribute("vendor").map(str::to_string),
            familyid: int_attr(path, c, "familyid")?,
            modelid: int_attr(path, c, "modelid")?,
            pci: pcis,
        });
    }
    Ok(NcclSystem { cpus })
}
