//! One checked condition and its verdict: what the pre-boot check and the
//! PCIe cost rules ([`crate::pcie_cost`]) both produce.

use serde::{Deserialize, Serialize};

/// One condition's outcome.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The condition holds; nothing to do.
    Pass,
    /// P2P may work, or could not be confirmed (for example facts a captured tree lacks).
    Warn,
    /// The condition fails: P2P will not work, or runs at a fraction of its
    /// speed (a link trained narrower than both ends), until the fix is applied.
    Fail,
}

/// One checked condition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CheckItem {
    /// `host`, a device address, or a pair `A B`.
    pub scope: String,
    /// Short name of the condition (`iommu`, `vfio-binding`, `acs-route`, ...).
    pub check: String,
    /// PASS, WARN or FAIL for this condition.
    pub verdict: Verdict,
    /// What was read and found.
    pub evidence: String,
    /// What to change, when it is not a pass.
    pub fix: Option<String>,
    /// The whole input the evidence quotes part of (the kernel command line,
    /// of which the text names only the IOMMU tokens); JSON only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
}
