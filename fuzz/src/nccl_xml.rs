//! NCCL's loader rules and the NCCL topology XML reader
//! (`p2p_nccl::parse`) on any text, then NCCL's model over what it read, as `p2p-guest nccl-topo explain --file F`
//! runs it outside a VM. The invariants: no panic and no stack overflow; an
//! error names a line of the text and quotes at most short prefixes of it; a
//! tree that is read nests no deeper than `MAX_PCI_DEPTH`.

use p2p_nccl::{xml::XmlPci, CpuIdentity, DriverP2p, Graph, NcclEnv};
use p2p_nccl::loader::{self, LoaderContext};
use p2p_nccl::VmFacts;
use p2p_topology::nccl_topo::MAX_PCI_DEPTH;

/// The longest error message the reader may write: a few short quotes
/// (`p2p_topology::excerpt::QUOTE_MAX` characters each) and the words around them.
pub const MESSAGE_MAX: usize = 600;

fn depth(p: &[XmlPci]) -> usize {
    // Iterative, so that a reader that let a deep tree through fails here
    // rather than overflowing the fuzzer's own stack.
    let mut deepest = 0;
    let mut stack: Vec<(&XmlPci, usize)> = p.iter().map(|n| (n, 1)).collect();
    while let Some((n, d)) = stack.pop() {
        deepest = deepest.max(d);
        stack.extend(n.children.iter().map(|c| (c, d + 1)));
    }
    deepest
}

/// NCCL's loader rules (`p2p_nccl::loader`) on the text, as
/// explain runs them outside a VM: every refusal names a line of the text
/// and quotes it short.
fn check_loader(text: &str) -> Result<(), String> {
    let cpu = CpuIdentity {
        arch: "x86_64".into(),
        vendor: Some("GenuineIntel".into()),
        familyid: Some(6),
        modelid: Some(207),
    };
    let ctx = LoaderContext {
        gpus: None,
        nets: None,
        in_sysfs: &|_| false,
        cpu: &cpu,
    };
    let lines = text.lines().count().max(1);
    for r in loader::refusals(text, &ctx) {
        if r.line == 0 || r.line as usize > lines + 1 {
            return Err(format!("refusal at line {} of a {lines}-line text: {r}", r.line));
        }
        let said = r.node.len() + r.nccl_prints.len() + r.attribute.map_or(0, |a| a.len());
        if said > MESSAGE_MAX {
            return Err(format!("a {said}-byte refusal: {:.200}", r.nccl_prints));
        }
    }
    Ok(())
}

/// Checks one input; Err says which invariant broke.
pub fn check(data: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(data);
    check_loader(&text)?;
    let xml = match p2p_nccl::parse(&text) {
        Ok(xml) => xml,
        Err(e) => {
            let lines = text.lines().count().max(1);
            if e.line == 0 || e.line as usize > lines + 1 {
                return Err(format!("line {} of a {lines}-line text: {e}", e.line));
            }
            if e.why.len() > MESSAGE_MAX {
                return Err(format!("a {}-byte message: {:.200}", e.why.len(), e.why));
            }
            return Ok(());
        }
    };
    for c in &xml.cpus {
        let d = depth(&c.pci);
        if d > MAX_PCI_DEPTH {
            return Err(format!("a tree {d} deep was read"));
        }
    }
    // The model over the file, in a VM that matches it (explain --file F
    // --no-driver outside a VM).
    let vm = VmFacts::from_file(
        &xml,
        CpuIdentity {
            arch: "x86_64".into(),
            vendor: Some("GenuineIntel".into()),
            familyid: Some(6),
            modelid: Some(207),
        },
    );
    let order: Vec<_> = vm.gpus.iter().map(|g| g.busid).collect();
    let eff = p2p_nccl::effective(Some(&xml), &vm);
    let graph = Graph::build(&eff.xml);
    p2p_nccl::predict(&graph, &NcclEnv::default(), &order, &|_, _| DriverP2p::Allowed);
    Ok(())
}
