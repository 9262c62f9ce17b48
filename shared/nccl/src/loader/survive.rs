//! What of a file reaches NCCL's loader, and in what state
//! (`ncclTopoGetSystem`, src/graph/topo.cc:1398-1523 at v2.28.3-1): the
//! `<pci>` of each GPU in use (found by its bus id spelled as NCCL spells it,
//! topo.cc:1435, src/misc/utils.cc:26), the `<net>`s the net plugin names
//! (src/graph/xml.cc:916-918), what `ncclTopoTrimXml` keeps (xml.cc:962-998),
//! and which elements auto-detection walks and fills before the loader reads
//! them (`ncclTopoGetXmlFromSys`, xml.cc:573-734; `ncclTopoGetXmlFromCpu`,
//! xml.cc:476-549).
//!
//! A walk follows the file's own parents (a `<pci>` of the file always has
//! one, so sysfs is never asked where it sits, xml.cc:651-652): a GPU whose
//! bus id the file names fills its `<pci>`, the bridges the file puts above
//! it (sysfs or not) and the file's `<cpu>` above them. A net the plugin
//! names and the file does not is attached by auto-detection: without a PCI
//! device (a virtio or socket interface) below the file's first `<cpu>`,
//! which is then kept by every rank but filled by none (xml.cc:924-945,
//! topo.cc:1332); on a PCI function, through its own sysfs chain to the
//! first bridge the file names (xml.cc:683) or to the `<cpu>` of its NUMA
//! node (xml.cc:672-673), which every rank then walks and fills.

use super::reader::Element;
use super::LoaderContext;
use crate::fill::VmNic;

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
    /// The nets the plugin names that auto-detection hangs below this
    /// element without filling it (the file's first `<cpu>`).
    pub hung_nets: Vec<Vec<String>>,
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
        hung_nets: vec![Vec::new(); n],
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
    // Elements every rank's walk reaches: what a PCI net the file does not
    // name climbs to.
    let mut walked_by_all = vec![false; n];
    let nets = (0..n).filter(|&i| is(&elements[i], "net"));
    match ctx.nets {
        Some(plugin) => {
            for net in plugin {
                if let Some(i) = nets
                    .clone()
                    .find(|&i| elements[i].attr("name") == Some(net.name.as_str()))
                {
                    shared[i] = true;
                    continue;
                }
                match attach(elements, net) {
                    Attach::FirstCpu(c) => {
                        shared[c] = true;
                        s.hung_nets[c].push(net.name.clone());
                    }
                    Attach::Walked(start) => {
                        let mut at = Some(start);
                        while let Some(p) = at {
                            if !(is(&elements[p], "pci") || is(&elements[p], "cpu")) {
                                break;
                            }
                            shared[p] = true;
                            walked_by_all[p] = true;
                            at = elements[p].parent;
                        }
                    }
                    Attach::Outside => {}
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
    s.filled = (0..n)
        .map(|i| walked_by_all[i] || (s.visits[i] > 0 && (!shared[i] || s.visits[i] == ranks)))
        .collect();
    s
}

/// Where auto-detection attaches a net the file does not name.
enum Attach {
    /// Below the file's first `<cpu>`, unfilled: a net without a PCI device
    /// (its sysfs path is not a PCI device's, xml.cc:924-933, 944-945).
    FirstCpu(usize),
    /// Through its sysfs chain up to this element of the file (a bridge the
    /// file names, xml.cc:683, or the `<cpu>` of its NUMA node, xml.cc:672-673),
    /// which every rank walks from there.
    Walked(usize),
    /// Into nodes auto-detection creates itself, outside the file's.
    Outside,
}

fn attach(elements: &[Element], net: &VmNic) -> Attach {
    let first_cpu = || {
        (0..elements.len()).find(|&i| {
            is(&elements[i], "cpu")
                && elements[i]
                    .parent
                    .is_some_and(|p| is(&elements[p], "system"))
        })
    };
    let Some(f) = &net.function else {
        return first_cpu().map_or(Attach::Outside, Attach::FirstCpu);
    };
    let named = |b: &p2p_topology::Bdf| {
        let spelled = b.to_string();
        (0..elements.len())
            .find(|&i| is(&elements[i], "pci") && elements[i].attr("busid") == Some(&spelled))
    };
    if let Some(i) = std::iter::once(&f.busid)
        .chain(f.bridges.iter().rev())
        .find_map(named)
    {
        return Attach::Walked(i);
    }
    let numa = f.numa.to_string();
    (0..elements.len())
        .find(|&i| {
            is(&elements[i], "cpu")
                && elements[i]
                    .parent
                    .is_some_and(|p| is(&elements[p], "system"))
                && elements[i].attr("numaid") == Some(numa.as_str())
        })
        .map_or(Attach::Outside, Attach::Walked)
}
