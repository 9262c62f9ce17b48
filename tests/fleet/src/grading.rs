//! The benchmark's own grader of a pair of devices, written apart from
//! vp2p's classifier so that the figures are not graded by the code that
//! publishes the cliques: `nvidia-smi topo -m`'s classes from its legend,
//! read from the sysfs tree alone.
//!
//! - NV: the operator's NVLink map (`nvlink.json`) joins them.
//! - SYS / NODE: below different host bridges (`devices/pciDDDD:BB`), on
//!   different NUMA nodes or the same one (`numa_node`).
//! - PHB: one host bridge, different root ports.
//! - PIX: the path between them traverses at most a single PCIe bridge, a
//!   switch counting as one (its upstream port and the downstream ports
//!   below it), as nvidia-smi counts; PXB: more than one.
//!
//! A port's kind comes from its PCI Express capability (the Device/Port
//! Type field, bits 7:4 of the PCI Express Capabilities register; PCI
//! Express Base Specification 6.0, section 7.5.3.2): 4 root port, 5 switch
//! upstream port, 6 switch downstream port.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::trees::Class;

/// Reads pairs' classes from one sysfs tree.
#[derive(Debug, Clone)]
pub struct Grader {
    root: PathBuf,
    nvlinks: BTreeSet<(String, String)>,
}

/// A function on the path from its host bridge: the host bridge's
/// directory name and the functions from the root port down.
struct Chain {
    host_bridge: String,
    functions: Vec<String>,
}

impl Grader {
    /// The grader of the tree at `root` (holding `bus/` and `devices/`),
    /// with the NVLink map `nvlink` (`{"links": [{"a", "b", "count"}]}`) if any.
    pub fn new(root: &Path, nvlink: Option<&Path>) -> Result<Self, String> {
        let mut nvlinks = BTreeSet::new();
        if let Some(f) = nvlink {
            let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
            let v: Value =
                serde_json::from_str(&text).map_err(|e| format!("{}: {e}", f.display()))?;
            for l in v["links"].as_array().into_iter().flatten() {
                let (Some(a), Some(b)) = (l["a"].as_str(), l["b"].as_str()) else {
                    return Err(format!("{}: a link without `a` and `b`", f.display()));
                };
                if l["count"].as_u64().unwrap_or(1) > 0 {
                    nvlinks.insert(ordered(a, b));
                }
            }
        }
        Ok(Self {
            root: root.to_path_buf(),
            nvlinks,
        })
    }

    /// The class of the pair (`a` and `b` are PCI addresses, 0000:23:00.0).
    pub fn class(&self, a: &str, b: &str) -> Result<Class, String> {
        if self.nvlinks.contains(&ordered(a, b)) {
            return Ok(Class::Nv);
        }
        let (ca, cb) = (self.chain(a)?, self.chain(b)?);
        if ca.host_bridge != cb.host_bridge {
            return Ok(if self.numa(a) == self.numa(b) {
                Class::Node
            } else {
                Class::Sys
            });
        }
        let shared = ca
            .functions
            .iter()
            .zip(&cb.functions)
            .take_while(|(x, y)| x == y)
            .count();
        if shared == 0 {
            return Ok(Class::Phb);
        }
        // The bridges between them: the deepest shared one, and those below
        // it on each side (the devices themselves excluded).
        let below = |c: &Chain| -> Vec<String> {
            c.functions[shared..c.functions.len().saturating_sub(1)].to_vec()
        };
        let mut path = vec![ca.functions[shared - 1].clone()];
        path.extend(below(&ca));
        path.extend(below(&cb));
        let parent = |f: &str, c: &Chain| -> Option<String> {
            let i = c.functions.iter().position(|x| x == f)?;
            i.checked_sub(1).map(|p| c.functions[p].clone())
        };
        // A switch counts once: a downstream port whose upstream port is on
        // the path is part of a switch already counted.
        let bridges = path
            .iter()
            .filter(|f| {
                if self.port_type(f) != Some(6) {
                    return true;
                }
                let up = parent(f, &ca).or_else(|| parent(f, &cb));
                !up.is_some_and(|u| path.contains(&u) && self.port_type(&u) == Some(5))
            })
            .count();
        Ok(if bridges <= 1 { Class::Pix } else { Class::Pxb })
    }

    /// The function's place below its host bridge, from its link in
    /// `bus/pci/devices` (`../../../devices/pci0000:20/0000:20:00.0/...`).
    fn chain(&self, bdf: &str) -> Result<Chain, String> {
        let link = self.root.join("bus/pci/devices").join(bdf);
        let target = std::fs::read_link(&link).map_err(|e| format!("{}: {e}", link.display()))?;
        let parts: Vec<String> = target
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let at = parts
            .iter()
            .position(|p| p.starts_with("pci") && p.contains(':'))
            .ok_or_else(|| format!("{}: no host bridge in {}", link.display(), target.display()))?;
        Ok(Chain {
            host_bridge: parts[at].clone(),
            functions: parts[at + 1..].to_vec(),
        })
    }

    fn numa(&self, bdf: &str) -> Option<i64> {
        let f = self
            .root
            .join("bus/pci/devices")
            .join(bdf)
            .join("numa_node");
        std::fs::read_to_string(f).ok()?.trim().parse().ok()
    }

    /// The Device/Port Type of the function's PCI Express capability.
    fn port_type(&self, bdf: &str) -> Option<u8> {
        let f = self.root.join("bus/pci/devices").join(bdf).join("config");
        let config = std::fs::read(f).ok()?;
        let byte = |i: usize| config.get(i).copied();
        // Status register bit 4: a capability list is present.
        if byte(0x06)? & 0x10 == 0 {
            return None;
        }
        let mut at = usize::from(byte(0x34)? & 0xfc);
        for _ in 0..48 {
            if at < 0x40 {
                return None;
            }
            if byte(at)? == 0x10 {
                return Some(byte(at + 2)? >> 4);
            }
            at = usize::from(byte(at + 1)? & 0xfc);
        }
        None
    }
}

fn ordered(a: &str, b: &str) -> (String, String) {
    if a <= b {
        (a.to_string(), b.to_string())
    } else {
        (b.to_string(), a.to_string())
    }
}
