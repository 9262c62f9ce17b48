//! The two numbers a GPU goes by in a run, as distinct types: its position
//! among the GPUs the run uses, and CUDA's device ordinal. They differ as
//! soon as `--gpus` picks a subset, and a report must not print one as the
//! other.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A GPU's position among the GPUs a run uses: `gpus[i]` of a bench report,
/// the `src`/`dst` of its pairs and measurements.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(transparent)]
pub struct GpuIndex(pub usize);

/// CUDA's device ordinal (what `cuDeviceGet` and `CUDA_VISIBLE_DEVICES` number).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(transparent)]
pub struct CudaOrdinal(pub usize);

impl fmt::Display for GpuIndex {
    /// `GPU0`, as the bench's tables label rows and columns.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GPU{}", self.0)
    }
}

impl fmt::Display for CudaOrdinal {
    /// The bare number, as CUDA prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
