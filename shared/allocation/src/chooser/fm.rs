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

use p2p_topology::bdf::Bdf;

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
    #[error("not the JSON `fmpm -l` prints ({0}); the file should hold {{\"partitionInfo\": [{{\"partitionId\": N, \"isActive\": 0 or 1, \"numGpus\": N, \"gpuInfo\": [{{\"pciBusId\": \"00000000:07:00.0\"}}, ...]}}, ...]}}")]
    Json(String),
    /// A `pciBusId` is not a PCI address.
    #[error("partition {partition}: pciBusId '{}' is not a PCI address", p2p_topology::excerpt::short(.value))]
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
    #[serde(default, deserialize_with = "is_active")]
    is_active: bool,
    num_gpus: Option<usize>,
    #[serde(default)]
    gpu_info: Vec<Gpu>,
}

/// `isActive`: jsoncpp writes fmpm's 0 or 1; true and false are taken too.
fn is_active<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    struct Flag;
    impl serde::de::Visitor<'_> for Flag {
        type Value = bool;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("isActive as fmpm writes it: 0 or 1 (or true or false)")
        }
        fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<bool, E> {
            Ok(v)
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<bool, E> {
            Ok(v != 0)
        }
    }
    d.deserialize_any(Flag)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Gpu {
    pci_bus_id: String,
}

/// Reads `fmpm -l`'s output.
pub fn parse_fmpm_list(text: &str) -> Result<Vec<FmPartition>, FmPartitionError> {
    let list: List = serde_json::from_str(text)
        .map_err(|e| FmPartitionError::Json(p2p_topology::excerpt::json_error(&e)))?;
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
        out.push(FmPartition {
            id: p.partition_id,
            active: p.is_active,
            gpus,
        });
    }
    out.sort_by_key(|p| p.id);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wrong isActive says what fmpm writes there, not serde's internal
    /// names (once `data did not match any variant of untagged enum Active`).
    #[test]
    fn a_bad_is_active_says_what_the_file_should_hold() {
        let text = r#"{"partitionInfo": [{"partitionId": 1, "isActive": "yes", "gpuInfo": []}]}"#;
        let e = parse_fmpm_list(text).unwrap_err().to_string();
        assert!(!e.contains("enum"), "{e}");
        assert!(
            e.contains("expected isActive as fmpm writes it: 0 or 1 (or true or false)"),
            "{e}"
        );
        assert!(e.contains("the file should hold {\"partitionInfo\""), "{e}");
        for (v, active) in [("0", false), ("1", true), ("true", true), ("false", false)] {
            let text = format!(
                r#"{{"partitionInfo": [{{"partitionId": 1, "isActive": {v}, "gpuInfo": []}}]}}"#
            );
            assert_eq!(parse_fmpm_list(&text).unwrap()[0].active, active, "{v}");
        }
        let e = parse_fmpm_list(r#"{"partitionInfo": [{"partitionId": 1, "isActive": -1}]}"#)
            .unwrap_err();
        assert!(e.to_string().contains("expected isActive"), "{e}");
    }

    /// Deeply nested JSON is refused without recursing;
    /// a huge pciBusId is quoted short.
    #[test]
    fn deep_or_huge_input_is_refused_in_few_words() {
        // The typed reader stops at the first value of a wrong type (an
        // ignored key is skipped without recursion): deep input is refused early.
        let deep = format!("{{\"partitionInfo\": {}", "[".repeat(100_000));
        let e = parse_fmpm_list(&deep).unwrap_err().to_string();
        assert!(e.contains("invalid type: sequence"), "{e}");
        let huge = format!(
            r#"{{"partitionInfo": [{{"partitionId": 1, "gpuInfo": [{{"pciBusId": "{}"}}]}}]}}"#,
            "z".repeat(1 << 20)
        );
        let e = parse_fmpm_list(&huge).unwrap_err().to_string();
        assert!(e.len() < 300, "{} bytes", e.len());
    }
}
