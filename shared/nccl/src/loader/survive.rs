//! What of a file reaches NCCL's loader, and in what state
//! (`ncclTopoGetSystem`, src/graph/topo.cc:1398-1523 at v2.28.3-1): the
//! `<pci>` of each GPU in use (found by its bus id spelled as NCCL spells it,
//! topo.cc:1435, src/misc/utils.cc:26), the `<net>`s the net plugin names
//! (src/graph/xml.cc:916-918), what `ncclTopoTrimXml` keeps (xml.cc:962-998),
//! and which elements auto-detection walks and fills before the loader reads
//! them (`ncclTopoGetXmlFromSys`, xml.cc:573-734; `ncclTopoGetXmlFromCpu`,
//! xml.cc:476-549).

use super::reader::Element;
use super::LoaderContext;

/// The file as the loader meets it, per element (indices of the reader's
/// elements).
#[derive(Debug, Clone, Default)]
pub(super) struct Survivors {
    /// It survives the trim.
    pub kept: Vec<bool>,
    /// The `<pci>` of a GPU in use.
    pub used: Vec<bool>,
    /// The `<pci>` of each GPU in use, in rank order.
    pub ranks: Vec<usize>,
    /// How many ranks' auto-detection walks it.
    pub visits: Vec<usize>,
    /// Every copy of it the loader reads was filled by auto-detection.
    ///
    /// Each rank reads the file, fills what its own GPU's walk reaches, trims
    /// and then all copies are fused; two copies are one only when their
    /// attributes are equal (`xmlFindNode`, src/graph/xml.h:195-216). An
    /// element under a `<net>` the plugin names (or a `keep="1"`) is kept by
    /// every rank, so unless every rank's walk fills it, an unfilled copy
    /// reaches the loader beside the filled one. GPUs in use that the file
    /// does not list are left out of this count (where their sysfs walk
    /// lands in the file is not modelled).
    pub filled: Vec<bool>,
}

/// Whether `e` is kind `name`.
pub(super) fn is(e: &Element, name: &str) -> bool {
    e.name == name
}

/// The first kept child of `i` named `name` (`xmlGetSub`, src/graph/xml.h:309).
pub(super) fn child(elements: &[Element], i: usize, name: &str) -> Option<usize> {
    elements[i]
        .children
        .iter()
        .copied()
        .find(|&c| is(&elements[c], name))
}

/// A `<pci>` that auto-detection treats as a GPU when no VM says which are
/// used: it has a `<gpu>` or a display class (prefix `0x03`, as NCCL's
/// dictionary matches, src/graph/xml.h:407-419).
pub(super) fn looks_like_gpu(elements: &[Element], i: usize) -> bool {
    is(&elements[i], "pci")
        && (child(elements, i, "gpu").is_some()
            || elements[i]
                .attr("class")
                .is_some_and(|c| c.starts_with("0x03")))
}

/// What survives, who walks what, and what is filled, for `elements` in `ctx`.
pub(super) fn survivors(elements: &[Element], ctx: &LoaderContext) -> Survivors {
    let n = elements.len();
    let mut s = Survivors {
        kept: vec![false; n],
        used: vec![false; n],
        ranks: Vec::new(),
        visits: vec![0; n],
        filled: vec![false; n],
    };
    let pcis = || (0..n).filter(|&i| is(&elements[i], "pci"));
    match ctx.gpus {
        Some(gpus) => {
            for g in gpus {
                let spelled = g.to_string();
                if let Some(i) = pcis().find(|&i| elements[i].attr("busid") == Some(&spelled)) {
                    if !s.used[i] {
                        s.used[i] = true;
                        s.ranks.push(i);
                    }
                }
            }
        }
        None => {
            for i in pcis().filter(|&i| looks_like_gpu(elements, i)) {
                s.used[i] = true;
                s.ranks.push(i);
            }
        }
    }
    // Keeps every rank sets alike: the file's own keep="1" and the <net>s
    // the plugin names (each rank asks the plugin).
    let mut shared: Vec<bool> = elements
        .iter()
        .map(|e| e.attr("keep") == Some("1"))
        .collect();
    let nets = (0..n).filter(|&i| is(&elements[i], "net"));
    match ctx.nets {
        Some(names) => {
            for name in names {
                if let Some(i) = nets
                    .clone()
                    .find(|&i| elements[i].attr("name") == Some(name))
                {
                    shared[i] = true;
                }
            }
        }
        None => {
            for i in nets.filter(|&i| elements[i].attr("name").is_some()) {
                shared[i] = true;
            }
        }
    }
    // Plus each used GPU's <gpu>, kept by its own rank (topo.cc:1438).
    let mut anchor = shared.clone();
    for &u in &s.ranks {
        if let Some(g) = child(elements, u, "gpu") {
            anchor[g] = true;
        }
    }
    // Children always follow their parent in the reader's order.
    let mut holds = anchor.clone();
    for i in (0..n).rev() {
        holds[i] |= s.used[i];
        if let Some(p) = elements[i].parent {
            holds[p] |= holds[i];
            shared[p] |= shared[i];
        }
    }
    let removable = |e: &Element| matches!(e.name.as_str(), "pci" | "cpu" | "nic" | "net");
    let mut whole = vec![false; n];
    for i in 0..n {
        let (parent_kept, parent_whole) = match elements[i].parent {
            Some(p) => (s.kept[p], whole[p]),
            None => (true, false),
        };
        whole[i] = parent_whole || anchor[i];
        s.kept[i] = parent_kept && (whole[i] || holds[i] || !removable(&elements[i]));
    }
    // Each rank's walk: its <pci>, then up through <pci>s to the <cpu>. A
    // <pci> without busid kills NCCL there (a refusal of its own); what is
    // above it counts as walked, as it is once that busid is given.
    for &u in &s.ranks {
        s.visits[u] += 1;
        let mut at = elements[u].parent;
        while let Some(p) = at {
            let e = &elements[p];
            if !(is(e, "pci") || is(e, "cpu")) {
                break;
            }
            s.visits[p] += 1;
            if is(e, "cpu") {
                break;
            }
            at = e.parent;
        }
    }
    let ranks = s.ranks.len();
    s.filled = s
        .visits
        .iter()
        .zip(&shared)
        .map(|(&v, &sh)| v > 0 && (!sh || v == ranks))
        .collect();
    s
}
