//! NVLink state through NVML: each GPU's active links and where they go, and
//! which pairs NVML says can do NVLink P2P.

use std::ffi::OsStr;

use nvml_wrapper::enum_wrappers::device::{P2pCapabilitiesIndex, P2pStatus};
use nvml_wrapper::Nvml;
use p2p_topology::Bdf;
use serde::{Deserialize, Serialize};

pub use p2p_report::probe::GpuLinks;

/// An NVLink P2P path NVML reports between two GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NvLinkPair {
    /// One GPU of the pair.
    pub a: Bdf,
    /// The other GPU of the pair.
    pub b: Bdf,
    /// Direct links, or the smaller switch link count (what nvidia-smi prints).
    pub count: u32,
}

/// NVML's picture, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NvLinkView {
    /// The NVIDIA driver's version as NVML reports it; None when unknown.
    pub driver_version: Option<String>,
    /// Each GPU's NVLinks, in NVML's device order.
    pub gpus: Vec<GpuLinks>,
    /// GPU pairs with an NVLink P2P path; pairs without one are left out.
    pub pairs: Vec<NvLinkPair>,
    /// Why NVML could not be asked; None when it answered.
    pub unavailable: Option<String>,
}

impl NvLinkView {
    /// NVLinks between two GPUs, either order; None when NVML reports no
    /// NVLink path between them.
    pub fn count_between(&self, a: Bdf, b: Bdf) -> Option<u32> {
        self.pairs
            .iter()
            .find(|p| (p.a == a && p.b == b) || (p.a == b && p.b == a))
            .map(|p| p.count)
    }
}

/// Asks NVML; an absent library or driver gives an empty view that says why.
pub fn read() -> NvLinkView {
    match read_inner() {
        Ok(v) => v,
        Err(why) => NvLinkView {
            driver_version: None,
            gpus: Vec::new(),
            pairs: Vec::new(),
            unavailable: Some(why),
        },
    }
}

fn read_inner() -> Result<NvLinkView, String> {
    let mut builder = Nvml::builder();
    builder.lib_path(OsStr::new("libnvidia-ml.so.1"));
    let nvml = builder
        .init()
        .or_else(|_| Nvml::init())
        .map_err(|e| format!("NVML not available: {e}"))?;
    let driver_version = nvml.sys_driver_version().ok();
    let n = nvml
        .device_count()
        .map_err(|e| format!("NVML device count: {e}"))?;
    let mut devs = Vec::new();
    for i in 0..n {
        let d = nvml
            .device_by_index(i)
            .map_err(|e| format!("NVML device {i}: {e}"))?;
        let bdf: Bdf = d
            .pci_info()
            .map_err(|e| format!("NVML device {i} PCI info: {e}"))?
            .bus_id
            .to_ascii_lowercase()
            .parse()
            .map_err(|e| format!("NVML device {i}: {e}"))?;
        devs.push((bdf, d));
    }
    let known: Vec<Bdf> = devs.iter().map(|(b, _)| *b).collect();
    let mut gpus = Vec::new();
    let mut direct: Vec<(Bdf, Bdf)> = Vec::new();
    for (bdf, d) in &devs {
        let mut g = GpuLinks {
            bdf: *bdf,
            active: 0,
            to_gpus: 0,
            to_switches: 0,
        };
        for link in 0..18 {
            let l = d.link_wrapper_for(link);
            if !l.is_active().unwrap_or(false) {
                continue;
            }
            g.active += 1;
            let remote = l
                .remote_pci_info()
                .ok()
                .and_then(|p| p.bus_id.to_ascii_lowercase().parse::<Bdf>().ok());
            match remote {
                Some(r) if known.contains(&r) => {
                    g.to_gpus += 1;
                    direct.push((*bdf, r));
                }
                _ => g.to_switches += 1,
            }
        }
        gpus.push(g);
    }
    let mut pairs = Vec::new();
    for i in 0..devs.len() {
        for j in i + 1..devs.len() {
            let (a, b) = (devs[i].0, devs[j].0);
            let n_direct = direct.iter().filter(|(x, y)| *x == a && *y == b).count() as u32;
            let switched = gpus[i].to_switches.min(gpus[j].to_switches);
            let nvlink_ok = matches!(
                devs[i]
                    .1
                    .p2p_status(&devs[j].1, P2pCapabilitiesIndex::NvLink),
                Ok(P2pStatus::Ok)
            );
            let count = if n_direct > 0 {
                n_direct
            } else if nvlink_ok {
                switched
            } else {
                0
            };
            if count > 0 {
                pairs.push(NvLinkPair { a, b, count });
            }
        }
    }
    Ok(NvLinkView {
        driver_version,
        gpus,
        pairs,
        unavailable: None,
    })
}
