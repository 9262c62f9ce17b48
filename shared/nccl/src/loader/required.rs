//! The attributes NCCL 2.28.3 cannot do without, read where it reads them:
//! first during auto-detection (`ncclTopoFillGpu`, src/graph/xml.cc:887-896,
//! for each GPU in use), then by the loader (`ncclTopoGetSystemFromXml`,
//! src/graph/topo.cc:673-700) on what the trim kept: each `<cpu>` and the
//! `<pci>` tree below it, then every `<nvlink>`, `<c2c>` and `<pcilink>`.
//! Each missing attribute is one refusal; NCCL itself stops at the first.

use super::reader::Element;
use super::survive::{child, is, Survivors};
use super::{label, LoaderContext, LoaderRefusal, NcclOutcome};

/// NCCL's `ncclTopoGetXmlFromCpu` fills `arch` with the architecture it was
/// built for (src/graph/xml.cc:492-502), in its dictionary's spelling.
fn built_arch(rust_arch: &str) -> Option<&'static str> {
    match rust_arch {
        "x86_64" => Some("x86_64"),
        "aarch64" => Some("arm64"),
        "powerpc64" => Some("ppc64"),
        _ => None,
    }
}

/// The node type NCCL's PCI class dictionary gives a class
/// (`kvDictPciClass`, src/graph/topo.cc:409; prefix match, xml.h:407-419).
fn is_switch_class(class: &str) -> bool {
    !["0x068000", "0x068001", "0x03", "0x02"]
        .iter()
        .any(|k| class.starts_with(k))
}

/// `busIdToInt64` (src/misc/utils.cc:30-45) as `%lx` prints it.
fn bus_hex(busid: &str) -> String {
    let digits: String = busid
        .chars()
        .filter(|c| *c != '.' && *c != ':')
        .take_while(char::is_ascii_hexdigit)
        .take(16)
        .collect();
    let v = u128::from_str_radix(&digits, 16)
        .unwrap_or(0)
        .min(i64::MAX as u128);
    format!("{:x}", v & 0x00ff_ffff_ffff_ffff)
}

struct Check<'a> {
    elements: &'a [Element],
    s: &'a Survivors,
    ctx: &'a LoaderContext<'a>,
    out: Vec<LoaderRefusal>,
    /// `<cpu>`s whose missing numaid auto-detection already refused.
    numa_refused: Vec<usize>,
    /// `<pci>`s auto-detection already died at.
    crashed: Vec<usize>,
    /// NICs already made, by (numaid, busid) as the loader keys them.
    nics: Vec<(Option<&'a str>, Option<&'a str>)>,
}

impl<'a> Check<'a> {
    fn refuse(
        &mut self,
        i: usize,
        attribute: Option<&str>,
        nccl_prints: String,
        nccl_result: NcclOutcome,
        source: &'static str,
        mut why: String,
    ) {
        let e = &self.elements[i];
        if let Some(k) = attribute.and_then(|a| e.dropped.iter().position(|d| d == a)) {
            why.push_str(&format!(
                "; the file gives it, but as attribute {} of the element: NCCL keeps the first 16 \
                 (MAX_ATTR_COUNT, src/graph/xml.h:18) and drops the rest with only an INFO \
                 (src/graph/xml.cc:164)",
                17 + k
            ));
        }
        self.out.push(LoaderRefusal {
            line: e.line,
            node: label(e),
            attribute: attribute.map(str::to_string),
            nccl_prints,
            nccl_result,
            source: source.into(),
            why,
        });
    }

    /// `xmlGetAttrStr` and the getters built on it (src/graph/xml.h:98-105).
    fn missing(&mut self, i: usize, attr: &str, source: &'static str, why: String) {
        let name = self.elements[i].name.clone();
        self.refuse(
            i,
            Some(attr),
            format!("NCCL WARN Attribute {attr} of node {name} not found"),
            NcclOutcome::InternalError,
            source,
            why,
        );
    }

    fn crash(&mut self, i: usize, attr: &str, source: &'static str, why: String) {
        self.refuse(
            i,
            Some(attr),
            "(nothing: the process dies of a segmentation fault)".into(),
            NcclOutcome::Crash,
            source,
            why,
        );
    }

    fn has(&self, i: usize, attr: &str) -> bool {
        self.elements[i].attr(attr).is_some()
    }

    fn gpu_name(&self, u: usize) -> String {
        self.elements[u].attr("busid").unwrap_or("?").to_string()
    }

    /// Auto-detection, per GPU in use: its walk up the file's tree and its
    /// `<nvlink>`s' missing classes.
    fn detection(&mut self) {
        for &u in &self.s.ranks {
            let gpu = self.gpu_name(u);
            let mut at = self.elements[u].parent;
            while let Some(p) = at {
                if is(&self.elements[p], "cpu") {
                    if !self.has(p, "affinity")
                        && !self.has(p, "numaid")
                        && !self.numa_refused.contains(&p)
                    {
                        self.numa_refused.push(p);
                        self.refuse(
                            p,
                            Some("numaid"),
                            "NCCL WARN GetXmlFromCpu : could not find CPU numa ID.".into(),
                            NcclOutcome::InternalError,
                            "src/graph/xml.cc:483",
                            format!("auto-detection for GPU {gpu} reaches this <cpu>, which has neither affinity nor numaid"),
                        );
                    }
                    break;
                }
                if !is(&self.elements[p], "pci") {
                    break;
                }
                if !self.has(p, "busid") {
                    if !self.crashed.contains(&p) {
                        self.crashed.push(p);
                        self.crash(p, "busid", "src/graph/xml.cc:579", format!(
                            "auto-detection for GPU {gpu} walks up to this <pci> and hands its busid, missing, to getPciPath, which reads through the NULL pointer (src/graph/xml.cc:413-416)"
                        ));
                    }
                    break;
                }
                at = self.elements[p].parent;
            }
            let Some(g) = child(self.elements, u, "gpu") else {
                continue;
            };
            for l in self.elements[g].children.clone() {
                if is(&self.elements[l], "nvlink")
                    && !self.has(l, "tclass")
                    && !self.has(l, "target")
                {
                    self.crash(l, "target", "src/graph/xml.cc:872", format!(
                        "auto-detection for GPU {gpu} fills a missing tclass from the target's sysfs class, and hands the target, missing too, to getPciPath, which reads through the NULL pointer"
                    ));
                }
            }
        }
    }

    fn cpu(&mut self, c: usize) {
        let filled = self.s.filled[c];
        let unfilled = match self.s.hung_nets[c].as_slice() {
            [] => "no GPU in use sits below this <cpu> in the file (or, with a <net> in use below it, not every GPU in use does), so auto-detection leaves a copy of it unfilled".to_string(),
            nets => format!(
                "NCCL's net plugin names {}, which the file does not list and which has no PCI device, so auto-detection hangs it below the file's first <cpu> without filling it (src/graph/xml.cc:944-945); every rank then keeps this <cpu>, and the copy of a rank whose GPU sits below another <cpu> reaches the loader unfilled beside the filled one (copies merge only when equal, src/graph/xml.cc:291-303)",
                nets.join(", ")
            ),
        };
        if !self.has(c, "numaid") && !self.numa_refused.contains(&c) {
            self.missing(c, "numaid", "src/graph/topo.cc:501", "NCCL reads numaid of every <cpu> it keeps, and auto-detection never fills it in a <cpu> of the file".into());
        }
        let host_x86 = self.ctx.cpu.arch == "x86_64";
        let arch = match self.elements[c].attr("arch") {
            Some(a) => Some(a.to_string()),
            None if filled => built_arch(&self.ctx.cpu.arch).map(str::to_string),
            None => None,
        };
        match arch {
            None => self.missing(c, "arch", "src/graph/topo.cc:512", unfilled.clone()),
            Some(a) if a.starts_with("x86_64") => {
                let fills = filled && host_x86;
                let vendor = match self.elements[c].attr("vendor") {
                    Some(v) => Some(v.to_string()),
                    None if fills => self.ctx.cpu.vendor.clone(),
                    None => {
                        self.missing(
                            c,
                            "vendor",
                            "src/graph/topo.cc:515",
                            format!("arch {a} makes NCCL read vendor; {unfilled}"),
                        );
                        None
                    }
                };
                let lines = match vendor.as_deref() {
                    Some(v) if v.starts_with("GenuineIntel") => {
                        Some(("src/graph/topo.cc:519", "src/graph/topo.cc:520"))
                    }
                    Some(v) if v.starts_with("CentaurHauls") || v.starts_with("  Shanghai  ") => {
                        Some(("src/graph/topo.cc:528", "src/graph/topo.cc:529"))
                    }
                    _ => None,
                };
                if let Some((family_at, model_at)) = lines {
                    let v = vendor.unwrap_or_default();
                    let fills_both = fills && !self.has(c, "familyid");
                    if !self.has(c, "familyid") && !fills_both {
                        self.missing(
                            c,
                            "familyid",
                            family_at,
                            format!("vendor {v} makes NCCL read familyid and modelid; {unfilled}"),
                        );
                    }
                    if !self.has(c, "modelid") && !fills_both {
                        let why = if self.has(c, "familyid") && fills {
                            format!("vendor {v} makes NCCL read modelid; auto-detection fills familyid and modelid together, and only when familyid is missing (src/graph/xml.cc:525-546)")
                        } else {
                            format!("vendor {v} makes NCCL read familyid and modelid; {unfilled}")
                        };
                        self.missing(c, "modelid", model_at, why);
                    }
                }
            }
            Some(_) => {}
        }
        let numaid = self.elements[c].attr("numaid");
        for k in self.elements[c].children.clone() {
            if self.s.kept[k] && is(&self.elements[k], "pci") {
                self.pci(k, numaid);
            }
        }
    }

    /// `ncclTopoAddPci` (src/graph/topo.cc:414-482) on a kept `<pci>`.
    fn pci(&mut self, i: usize, numaid: Option<&'a str>) {
        let e = &self.elements[i];
        let busid = e.attr("busid");
        let filled = self.s.filled[i];
        let from_sysfs = filled && busid.is_some_and(|b| (self.ctx.in_sysfs)(b));
        let class = e.attr("class");
        if class.is_none() && !self.s.used[i] && !from_sysfs {
            let why = if filled {
                "auto-detection takes a <pci>'s class from sysfs, and this bus id is not in sysfs"
                    .into()
            } else {
                "auto-detection never reaches this <pci> (no GPU in use below it, or not below it for every GPU in use)".into()
            };
            self.missing(i, "class", "src/graph/topo.cc:418", why);
        }
        if busid.is_none() && self.s.visits[i] == 0 {
            self.missing(
                i,
                "busid",
                "src/graph/topo.cc:422",
                "NCCL reads busid of every <pci> it loads".into(),
            );
        }
        let gpu = child(self.elements, i, "gpu").filter(|&g| self.s.kept[g]);
        let nic = child(self.elements, i, "nic").filter(|&n| self.s.kept[n]);
        let made = if self.s.used[i] {
            true
        } else if let Some(g) = gpu {
            if !self.has(g, "rank") {
                return;
            }
            for (attr, at) in [
                ("sm", "src/graph/topo.cc:399"),
                ("rank", "src/graph/topo.cc:400"),
                ("dev", "src/graph/topo.cc:401"),
                ("gdr", "src/graph/topo.cc:402"),
            ] {
                if !self.has(g, attr) {
                    self.missing(g, attr, at, "a <gpu> with rank that no GPU in use fills: NCCL reads sm, rank, dev and gdr".into());
                }
            }
            true
        } else if nic.is_some() {
            let key = (numaid, busid);
            let first = !self.nics.contains(&key);
            self.nics.push(key);
            first
        } else if class.is_none_or(is_switch_class) || from_sysfs {
            for k in self.elements[i].children.clone() {
                if self.s.kept[k]
                    && !is(&self.elements[k], "pcilink")
                    && is(&self.elements[k], "pci")
                {
                    self.pci(k, numaid);
                }
            }
            true
        } else {
            false
        };
        if made && !filled {
            let why = "NCCL reads the link of every <pci> that becomes a node, and auto-detection never fills this one".to_string();
            if !self.has(i, "link_width") {
                self.missing(i, "link_width", "src/graph/topo.cc:471", why.clone());
            }
            if !self.has(i, "link_speed") {
                self.missing(i, "link_speed", "src/graph/topo.cc:472", why);
            }
        }
    }

    /// Whether `p` is a `<pci>` the loader made a PCI switch node of.
    fn is_switch(&self, p: usize) -> bool {
        is(&self.elements[p], "pci")
            && !self.s.used[p]
            && child(self.elements, p, "gpu").is_none()
            && child(self.elements, p, "nic").is_none()
            && self.elements[p].attr("class").is_none_or(is_switch_class)
    }

    /// The `<nvlink>`, `<c2c>` and `<pcilink>` passes (topo.cc:691-693).
    fn links(&mut self) {
        let n = self.elements.len();
        let kept = |k: usize, name: &str| self.s.kept[k] && is(&self.elements[k], name);
        for l in (0..n).filter(|&l| kept(l, "nvlink")) {
            let gpu_pci = self.elements[l]
                .parent
                .and_then(|g| self.elements[g].parent);
            let filled = gpu_pci.is_some_and(|p| self.s.used[p]);
            if !self.has(l, "count") {
                self.missing(
                    l,
                    "count",
                    "src/graph/topo.cc:564",
                    "NCCL reads count of every <nvlink>".into(),
                );
            }
            match self.elements[l].attr("tclass") {
                None if !filled => self.missing(
                    l,
                    "tclass",
                    "src/graph/topo.cc:566",
                    "auto-detection fills tclass only for a GPU in use".into(),
                ),
                Some(t) if t.starts_with("0x03") && !self.has(l, "target") => {
                    let why =
                        format!("tclass {t} names a GPU, so NCCL reads the target GPU's bus id");
                    self.missing(l, "target", "src/graph/topo.cc:573", why);
                }
                _ => {}
            }
        }
        for l in (0..n).filter(|&l| kept(l, "c2c")) {
            for (attr, at) in [
                ("count", "src/graph/topo.cc:651"),
                ("bw", "src/graph/topo.cc:653"),
            ] {
                if !self.has(l, attr) {
                    self.missing(
                        l,
                        attr,
                        at,
                        "NCCL reads count and bw of every <c2c>, and never fills them".into(),
                    );
                }
            }
        }
        for l in (0..n).filter(|&l| kept(l, "pcilink")) {
            let mut at = self.elements[l].parent;
            while let Some(p) = at.filter(|&p| !self.has(p, "busid")) {
                at = self.elements[p].parent;
            }
            if let Some(p) = at.filter(|&p| !self.is_switch(p)) {
                let id = bus_hex(self.elements[p].attr("busid").unwrap_or(""));
                self.refuse(
                    l,
                    None,
                    format!("NCCL WARN Add PCI Link error : could not find PCI SW {id}"),
                    NcclOutcome::InternalError,
                    "src/graph/topo.cc:615",
                    "a <pcilink> must sit in a <pci> the loader made a PCI switch of".into(),
                );
            }
            if !self.has(l, "target") {
                self.missing(
                    l,
                    "target",
                    "src/graph/topo.cc:620",
                    "NCCL reads target of every <pcilink>".into(),
                );
            }
        }
    }
}

/// Every refusal of a file NCCL's reader read whole, whose `<system>` is
/// element `system`.
pub(super) fn check(
    elements: &[Element],
    system: usize,
    s: &Survivors,
    ctx: &LoaderContext,
) -> Vec<LoaderRefusal> {
    let mut c = Check {
        elements,
        s,
        ctx,
        out: Vec::new(),
        numa_refused: Vec::new(),
        crashed: Vec::new(),
        nics: Vec::new(),
    };
    c.detection();
    for k in elements[system].children.clone() {
        if s.kept[k] && is(&elements[k], "cpu") {
            c.cpu(k);
        }
    }
    c.links();
    c.out
}
