//! Fabric Manager partitions (shared NVSwitch virtualization model): the list
//! `fmpm -l` prints, read so the chooser offers only whole partitions.
//!
//! `fmpm` (github.com/NVIDIA/Fabric-Manager-Client, `listPartitions` in
//! fmpm.cpp) writes `fmGetSupportedFabricPartitions`'s answer with jsoncpp's
//! StyledWriter: an object with `version`, `numPartitions`, `maxNumPartitions`
//! and `partitionInfo`, a list of `{partitionId, isActive, numGpus, gpuInfo}`,
//! each `gpuInfo` entry `{physicalId, uuid, pciBusId, numNvLinksAvailable,
//! maxNumNvLinks, nvlinkLineRateMBps}`. Only `partitionId`, `isActive` and
//! `gpuInfo[].pciBusId` are read; other keys are ignored.

use serde::{Deserialize, Serialize};

use crate::bdf::Bdf;

/// One Fabric Manager partition: GPUs that share one NVSwitch fabric.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FmPartition {
    /// Fabric Manager's partition id (`fmpm -a ID` activates it).
    pub id: u32,
    /// Activated already: its GPUs are in use by a VM.
    pub active: bool,
    /// Its GPUs' PCI addresses, as Fabric Manager gives them (`pciBusId`).
    pub gpus: Vec<Bdf>,
}

/// Why a partition list could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FmPartitionError {
    /// The text is not the JSON `fmpm -l` prints.
    #[error("not the JSON `fmpm -l` prints: {0}")]
    Json(String),
    /// A `pciBusId` is not a PCI address.
    #[error("partition {partition}: pciBusId '{value}' is not a PCI address")]
    BadBusId {
        /// The partition holding it.
        partition: u32,
        /// The value as given.
        value: String,
    },
    /// `numGpus` disagrees with the `gpuInfo` list.
    #[error("partition {partition}: numGpus is {said} but gpuInfo lists {listed}")]
    CountMismatch {
        /// The partition.
        partition: u32,
        /// `numGpus`.
        said: usize,
        /// Entries of `gpuInfo`.
        listed: usize,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct List {
    partition_info: Vec<Info>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Info {
    partition_id: u32,
    #[serde(default)]
    is_active: Active,
    num_gpus: Option<usize>,
    #[serde(default)]
    gpu_info: Vec<Gpu>,
}

#[derive(Deserialize, Default)]
#[serde(untagged)]
enum Active {
    #[default]
    No,
    Flag(bool),
    Number(u64),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Gpu {
    pci_bus_id: String,
}

/// Reads `fmpm -l`'s output.
pub fn parse_fmpm_list(text: &str) -> Result<Vec<FmPartition>, FmPartitionError> {
    let list: List =
        serde_json::from_str(text).map_err(|e| FmPartitionError::Json(e.to_string()))?;
    let mut out = Vec::new();
    for p in list.partition_info {
        if let Some(said) = p.num_gpus.filter(|n| *n != p.gpu_info.len()) {
            return Err(FmPartitionError::CountMismatch {
                partition: p.partition_id,
                said,
                listed: p.gpu_info.len(),
            });
        }
        let gpus = p
            .gpu_info
            .iter()
            .map(|g| {
                g.pci_bus_id
                    .trim()
                    .to_ascii_lowercase()
                    .parse::<Bdf>()
                    .map_err(|_| FmPartitionError::BadBusId {
                        partition: p.partition_id,
                        value: g.pci_bus_id.clone(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let active = match p.is_active {
            Active::No => false,
            Active::Flag(b) => b,
            Active::Number(n) => n != 0,
        };
        out.push(FmPartition {
            id: p.partition_id,
            active,
            gpus,
        });
    }
    out.sort_by_key(|p| p.id);
    Ok(out)
}
