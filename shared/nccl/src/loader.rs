//! Why NCCL 2.28.3 refuses a topology file at initialisation
//! (`ncclCommInitAll` fails) where a normal XML reader, and vp2p's own
//! [`parse`](super::parse), would accept it, or would stop with a message of
//! its own.
//!
//! NCCL reads the file with a reader of its own ([`reader`]), merges it with
//! what it detects for each GPU in use and the nets its plugin names, trims
//! what no GPU or net in use needs ([`survive`]), and only then builds its
//! system, reading attributes that have no default ([`required`]). A missing
//! one makes it print `NCCL WARN Attribute X of node Y not found`
//! (src/graph/xml.h:101) and fail with `ncclInternalError`. Line numbers
//! cited are at NCCL's tag v2.28.3-1.

mod reader;
mod required;
mod survive;

use serde::{Deserialize, Serialize};

use super::env::NcclEnv;
use super::fill::{CpuIdentity, VmNic};
use super::path::PathType;
use super::predict::{DriverP2p, GpuVerdict, PairVerdict, Prediction, Transport};
use p2p_topology::bdf::Bdf;
use p2p_topology::excerpt::short;

/// The NCCL tag whose source the refusals cite.
pub const NCCL_SOURCE_TAG: &str = "v2.28.3-1";

/// How NCCL's initialisation ends on a refused file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum NcclOutcome {
    /// `ncclInternalError` (3): a missing attribute or a syntax error.
    #[serde(rename = "ncclInternalError")]
    InternalError,
    /// `ncclInvalidUsage` (5): a `<system>` version other than 1.
    #[serde(rename = "ncclInvalidUsage")]
    InvalidUsage,
    /// The process dies: NCCL reads through a NULL pointer.
    #[serde(rename = "crash (NULL dereference)")]
    Crash,
}

impl std::fmt::Display for NcclOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::InternalError => "ncclInternalError",
            Self::InvalidUsage => "ncclInvalidUsage",
            Self::Crash => "crash (NULL dereference)",
        })
    }
}

/// One reason NCCL 2.28.3 refuses a topology file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LoaderRefusal {
    /// The 1-based line of the element (or of the stray character).
    pub line: u32,
    /// The element, by what names it: `<cpu numaid="0">`, `<pci busid="0000:1b:00.0">`.
    pub node: String,
    /// The attribute NCCL looks for; None for a syntax error or a misplaced element.
    pub attribute: Option<String>,
    /// What NCCL prints (with `NCCL_DEBUG=WARN` or more; kept for
    /// `ncclGetLastError` either way), after its host, process and file prefix.
    pub nccl_prints: String,
    /// How initialisation ends.
    pub nccl_result: NcclOutcome,
    /// The line of NCCL's source that refuses, at tag v2.28.3-1
    /// (`src/graph/topo.cc:501`).
    pub source: String,
    /// Why NCCL reads it there and does not fill it, in words.
    pub why: String,
}

/// Control characters (NCCL prints the byte it stopped at) made visible.
fn visible(s: &str) -> String {
    s.chars()
        .flat_map(|c| match c {
            '\n' => "\\n".chars().collect::<Vec<_>>(),
            '\t' => "\\t".chars().collect(),
            '\r' => "\\r".chars().collect(),
            c => vec![c],
        })
        .collect()
}

impl std::fmt::Display for LoaderRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.node)?;
        if let Some(a) = &self.attribute {
            write!(f, " {a}")?;
        }
        write!(
            f,
            ": NCCL prints \"{}\" -> {} ({} at NCCL {NCCL_SOURCE_TAG})",
            visible(&self.nccl_prints),
            self.nccl_result,
            self.source
        )
    }
}

/// What NCCL learns from the machine rather than the file, as far as its
/// loader's refusals depend on it.
pub struct LoaderContext<'a> {
    /// The bus ids of the GPUs NCCL uses (a `<pci>` is theirs when its busid
    /// is spelled as NCCL spells it, `0000:1b:00.0`); None: every GPU of the
    /// file (a file explained outside a VM, as in a VM that matches it).
    pub gpus: Option<&'a [Bdf]>,
    /// The net devices NCCL's net plugin names, with the PCI function each
    /// sits on (none for a socket interface without one): a `<net>` of the
    /// file survives the trim when its name is one of them, and one the file
    /// does not name is attached where auto-detection puts it. None: every
    /// `<net>` of the file, and no other.
    pub nets: Option<&'a [VmNic]>,
    /// Whether a bus id, as the file spells it, is a PCI device in sysfs
    /// (auto-detection then takes the `<pci>`'s class from there).
    pub in_sysfs: &'a dyn Fn(&str) -> bool,
    /// The CPU NCCL runs on: its `arch` (Rust's spelling, `x86_64`,
    /// `aarch64`) and `vendor` fill a `<cpu>` that auto-detection reaches.
    pub cpu: &'a CpuIdentity,
}

/// An element as a refusal names it: its kind and what identifies it.
fn label(e: &reader::Element) -> String {
    let key = match e.name.as_str() {
        "cpu" => "numaid",
        "pci" => "busid",
        "nvlink" | "pcilink" => "target",
        "net" => "name",
        "system" => "version",
        _ => "",
    };
    match e.attr(key).filter(|_| !key.is_empty()) {
        Some(v) => format!("<{} {key}=\"{}\">", e.name, short(v)),
        None => format!("<{}>", short(&e.name)),
    }
}

/// `strtol(s, NULL, 0)`: leading white space, a sign, `0x` hex, `0` octal,
/// else decimal, as far as digits go; 0 when none; clamped to 64 bits.
fn strtol(s: &str) -> i64 {
    let t = s.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let hex = t.len() > 2
        && (t.starts_with("0x") || t.starts_with("0X"))
        && t.as_bytes()[2].is_ascii_hexdigit();
    let (radix, digits) = match () {
        _ if hex => (16, &t[2..]),
        _ if t.starts_with('0') => (8, t),
        _ => (10, t),
    };
    let mut v: i128 = 0;
    for d in digits.chars().map_while(|c| c.to_digit(radix)) {
        v = (v * i128::from(radix) + i128::from(d)).min(i128::from(i64::MAX) + 1);
    }
    let v = if neg { -v } else { v };
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// `ncclTopoXmlLoadSystem` (src/graph/xml.cc:370-385): version 1 or nothing.
fn version(e: &reader::Element) -> Option<LoaderRefusal> {
    let (prints, result, source, why) = match e.attr("version") {
        None => (
            "NCCL WARN Attribute version of node system not found".to_string(),
            NcclOutcome::InternalError,
            "src/graph/xml.cc:372",
            "NCCL reads <system version> as it reads the file".to_string(),
        ),
        Some(v) => {
            // NCCL keeps strtol's long in an int.
            let n = strtol(v) as i32;
            if n == 1 {
                return None;
            }
            (
                format!("NCCL WARN XML Topology has wrong version {n}, 1 needed"),
                NcclOutcome::InvalidUsage,
                "src/graph/xml.cc:374",
                "NCCL 2.28.3 reads topology files of version 1 only".to_string(),
            )
        }
    };
    Some(LoaderRefusal {
        line: e.line,
        node: label(e),
        attribute: Some("version".into()),
        nccl_prints: prints,
        nccl_result: result,
        source: source.into(),
        why,
    })
}

/// Every reason NCCL 2.28.3 refuses `text` as its topology file in `ctx`,
/// in the order NCCL meets them (it stops at the first): the reader's, then
/// auto-detection's, then the loader's. Empty when NCCL accepts it.
pub fn refusals(text: &str, ctx: &LoaderContext) -> Vec<LoaderRefusal> {
    let read = reader::read(text);
    let systems: Vec<usize> = (0..read.elements.len())
        .filter(|&i| read.elements[i].parent.is_none() && read.elements[i].name == "system")
        .collect();
    let mut out: Vec<LoaderRefusal> = systems
        .iter()
        .filter_map(|&i| version(&read.elements[i]))
        .collect();
    if let Some(e) = read.error {
        out.push(LoaderRefusal {
            line: e.line,
            node: e.node,
            attribute: None,
            nccl_prints: format!("NCCL WARN {}", e.prints),
            nccl_result: NcclOutcome::InternalError,
            source: e.source.into(),
            why: "NCCL's own XML reader stops here (a normal XML reader may not)".into(),
        });
        return out;
    }
    if let Some(&system) = systems.first() {
        let s = survive::survivors(&read.elements, ctx);
        out.extend(required::check(&read.elements, system, &s, ctx));
    }
    out
}

/// The GPUs of a file as NCCL's reader sees it (a `<pci>` with a `<gpu>` or
/// a display class), in file order: the pairs of a file explained outside a
/// VM when NCCL refuses it, and vp2p's parser may not read it.
pub fn file_gpus(text: &str) -> Vec<Bdf> {
    let read = reader::read(text);
    (0..read.elements.len())
        .filter(|&i| survive::looks_like_gpu(&read.elements, i))
        .filter_map(|i| read.elements[i].attr("busid")?.parse().ok())
        .collect()
}

/// NCCL's verdicts when it refuses the file: it builds no system, so every
/// pair of `order` is [`Transport::Error`] (no path, [`PathType::Dis`]) and
/// no GPU gets a net; the reasons name the first refusal, where NCCL stops.
pub fn refused_prediction(
    order: &[Bdf],
    refusals: &[LoaderRefusal],
    env: &NcclEnv,
    driver: &dyn Fn(Bdf, Bdf) -> DriverP2p,
) -> Prediction {
    let mut reasons = vec![
        "NCCL refuses the topology file and initialisation fails: it builds no system".to_string(),
    ];
    if let Some(first) = refusals.first() {
        reasons.push(format!("first refusal, where NCCL stops: {first}"));
    }
    if refusals.len() > 1 {
        reasons.push(format!("{} more refusal(s) after it", refusals.len() - 1));
    }
    let decided_by = vec!["the topology file's refusals by NCCL's loader".to_string()];
    let mut pairs = Vec::new();
    for (i, &a) in order.iter().enumerate() {
        for &b in &order[i + 1..] {
            pairs.push(PairVerdict {
                a,
                b,
                path: PathType::Dis,
                bw_gbs: 0.0,
                p2p_level: env.p2p_level().map_or(PathType::Pxb, |(l, _)| l),
                topology_allows_p2p: false,
                driver: driver(a, b),
                transport: Transport::Error,
                reasons: reasons.clone(),
                decided_by: decided_by.clone(),
            });
        }
    }
    let gpus = order
        .iter()
        .map(|&gpu| GpuVerdict::without_net(gpu, reasons.clone(), decided_by.clone()))
        .collect();
    Prediction { pairs, gpus }
}

#[cfg(test)]
mod tests;
