//! NCCL's path types and how its level variables name them.

use serde::{Deserialize, Serialize};

/// How far apart two nodes are, as NCCL 2.28 classifies a path
/// (`src/graph/topo.h`, `PATH_*`); the order is NCCL's, nearest first.
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
#[serde(rename_all = "UPPERCASE")]
pub enum PathType {
    /// The node itself.
    Loc,
    /// One NVLink hop, or GPU-NVSwitch-GPU.
    Nvl,
    /// NVLink through an intermediate GPU.
    Nvb,
    /// A C2C link between GPU and CPU.
    C2c,
    /// At most one PCIe switch.
    Pix,
    /// Several PCIe switches, no host bridge.
    Pxb,
    /// PCIe to a CPU that is joined to the GPU by C2C.
    P2c,
    /// To a NIC through another GPU over NVLink.
    Pxn,
    /// Through a CPU's host bridge.
    Phb,
    /// Across the link between CPUs (NUMA nodes).
    Sys,
    /// Over the network.
    Net,
    /// No path.
    Dis,
}

impl PathType {
    /// NCCL's own spelling (`topoPathTypeStr`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Loc => "LOC",
            Self::Nvl => "NVL",
            Self::Nvb => "NVB",
            Self::C2c => "C2C",
            Self::Pix => "PIX",
            Self::Pxb => "PXB",
            Self::P2c => "P2C",
            Self::Pxn => "PXN",
            Self::Phb => "PHB",
            Self::Sys => "SYS",
            Self::Net => "NET",
            Self::Dis => "DIS",
        }
    }

    /// Every type in NCCL's order.
    pub const ALL: [PathType; 12] = [
        Self::Loc,
        Self::Nvl,
        Self::Nvb,
        Self::C2c,
        Self::Pix,
        Self::Pxb,
        Self::P2c,
        Self::Pxn,
        Self::Phb,
        Self::Sys,
        Self::Net,
        Self::Dis,
    ];

    /// A level variable's value as NCCL 2.28's `ncclGetLevel` reads it: a
    /// name from LOC to SYS, else a number in the old numbering
    /// (0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and above SYS); None when NCCL would
    /// ignore the value.
    pub fn from_level(value: &str) -> Option<PathType> {
        if let Some(t) = Self::ALL[..=Self::Sys as usize]
            .iter()
            .find(|t| t.as_str() == value)
        {
            return Some(*t);
        }
        if !value.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        // strtol: the leading digits; NCCL clamps old levels above 4 to SYS.
        let digits: String = value.chars().take_while(|c| c.is_ascii_digit()).collect();
        let old: u64 = digits.parse().unwrap_or(u64::MAX);
        Some(match old {
            0 => Self::Loc,
            1 => Self::Pix,
            2 => Self::Pxb,
            3 => Self::Phb,
            _ => Self::Sys,
        })
    }
}

impl std::fmt::Display for PathType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_names_and_old_numbers_as_ncclgetlevel_reads_them() {
        // Names accepted up to SYS only (the loop runs i <= PATH_SYS).
        assert_eq!(PathType::from_level("PHB"), Some(PathType::Phb));
        assert_eq!(PathType::from_level("SYS"), Some(PathType::Sys));
        assert_eq!(PathType::from_level("NET"), None);
        assert_eq!(
            PathType::from_level("phb"),
            None,
            "strcmp is case-sensitive"
        );
        // levelsOldToNew = { LOC, PIX, PXB, PHB, SYS, SYS }, clamped.
        assert_eq!(PathType::from_level("0"), Some(PathType::Loc));
        assert_eq!(PathType::from_level("2"), Some(PathType::Pxb));
        assert_eq!(PathType::from_level("5"), Some(PathType::Sys));
        assert_eq!(PathType::from_level("9"), Some(PathType::Sys));
        assert_eq!(PathType::from_level("x"), None);
    }

    #[test]
    fn order_is_ncclss_numbering() {
        assert!(PathType::Pix < PathType::Pxb && PathType::Pxb < PathType::Phb);
        assert_eq!(PathType::Sys as usize, 9);
        assert_eq!(PathType::Dis as usize, 11);
    }
}
