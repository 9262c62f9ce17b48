//! PCIe link speeds in the three spellings vp2p meets: sysfs (`32.0 GT/s PCIe`),
//! QEMU's `x-speed` (`32`, `2_5`) and NCCL's `link_speed` (the sysfs string).

use std::fmt;

use serde::{Deserialize, Serialize};

/// A PCIe generation's transfer rate.
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
pub enum LinkSpeed {
    /// 2.5 GT/s, PCIe 1.x (Gen1).
    #[serde(rename = "2.5 GT/s PCIe")]
    Gt2_5,
    /// 5.0 GT/s, PCIe 2.0 (Gen2).
    #[serde(rename = "5.0 GT/s PCIe")]
    Gt5,
    /// 8.0 GT/s, PCIe 3.0 (Gen3).
    #[serde(rename = "8.0 GT/s PCIe")]
    Gt8,
    /// 16.0 GT/s, PCIe 4.0 (Gen4).
    #[serde(rename = "16.0 GT/s PCIe")]
    Gt16,
    /// 32.0 GT/s, PCIe 5.0 (Gen5).
    #[serde(rename = "32.0 GT/s PCIe")]
    Gt32,
    /// 64.0 GT/s, PCIe 6.0 (Gen6).
    #[serde(rename = "64.0 GT/s PCIe")]
    Gt64,
}

impl LinkSpeed {
    const ALL: [LinkSpeed; 6] = [
        LinkSpeed::Gt2_5,
        LinkSpeed::Gt5,
        LinkSpeed::Gt8,
        LinkSpeed::Gt16,
        LinkSpeed::Gt32,
        LinkSpeed::Gt64,
    ];

    /// Reads the kernel's spelling (`max_link_speed`): `32.0 GT/s PCIe`, and the
    /// `32 GT/s` of kernels up to 5.6. "Unknown" and anything else give None.
    pub fn from_sysfs(s: &str) -> Option<Self> {
        let rate = s.trim().strip_suffix(" PCIe").unwrap_or(s.trim());
        let rate = rate.strip_suffix(" GT/s")?;
        let gt: f32 = rate.trim().parse().ok()?;
        Self::ALL
            .into_iter()
            .find(|l| (l.gigatransfers() - gt).abs() < 0.01)
    }

    /// The kernel's current spelling, which NCCL's `link_speed` table also uses.
    pub fn sysfs(self) -> &'static str {
        match self {
            LinkSpeed::Gt2_5 => "2.5 GT/s PCIe",
            LinkSpeed::Gt5 => "5.0 GT/s PCIe",
            LinkSpeed::Gt8 => "8.0 GT/s PCIe",
            LinkSpeed::Gt16 => "16.0 GT/s PCIe",
            LinkSpeed::Gt32 => "32.0 GT/s PCIe",
            LinkSpeed::Gt64 => "64.0 GT/s PCIe",
        }
    }

    /// QEMU's `x-speed` value (PCIELinkSpeed).
    pub fn qemu(self) -> &'static str {
        match self {
            LinkSpeed::Gt2_5 => "2_5",
            LinkSpeed::Gt5 => "5",
            LinkSpeed::Gt8 => "8",
            LinkSpeed::Gt16 => "16",
            LinkSpeed::Gt32 => "32",
            LinkSpeed::Gt64 => "64",
        }
    }

    /// Giga-transfers per second per lane.
    pub fn gigatransfers(self) -> f32 {
        match self {
            LinkSpeed::Gt2_5 => 2.5,
            LinkSpeed::Gt5 => 5.0,
            LinkSpeed::Gt8 => 8.0,
            LinkSpeed::Gt16 => 16.0,
            LinkSpeed::Gt32 => 32.0,
            LinkSpeed::Gt64 => 64.0,
        }
    }
}

impl fmt::Display for LinkSpeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.sysfs())
    }
}

/// A function's link as the guest should see it: the maximum sysfs reports
/// (what NCCL reads), else the current one; a width of 0 counts as unknown.
pub fn max_or_current(link: &crate::topology::LinkInfo) -> (Option<LinkSpeed>, Option<u8>) {
    let speed = link
        .max_speed
        .as_deref()
        .and_then(LinkSpeed::from_sysfs)
        .or_else(|| {
            link.current_speed
                .as_deref()
                .and_then(LinkSpeed::from_sysfs)
        });
    let width = link
        .max_width
        .filter(|w| *w > 0)
        .or(link.current_width.filter(|w| *w > 0));
    (speed, width)
}

/// Whether QEMU's `x-width` (PCIELinkWidth) takes `width`.
pub fn qemu_width_valid(width: u8) -> bool {
    matches!(width, 1 | 2 | 4 | 8 | 12 | 16 | 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_spellings_parse_and_unknown_does_not() {
        // The strings come from drivers/pci/pci-sysfs.c (PCIE_SPEED2STR) in 6.x
        // and the older "N GT/s" form NCCL still lists for kernels <= 5.6.
        assert_eq!(
            LinkSpeed::from_sysfs("32.0 GT/s PCIe"),
            Some(LinkSpeed::Gt32)
        );
        assert_eq!(
            LinkSpeed::from_sysfs("2.5 GT/s PCIe"),
            Some(LinkSpeed::Gt2_5)
        );
        assert_eq!(LinkSpeed::from_sysfs("16 GT/s"), Some(LinkSpeed::Gt16));
        assert_eq!(
            LinkSpeed::from_sysfs("5.0 GT/s PCIe\n"),
            Some(LinkSpeed::Gt5)
        );
        assert_eq!(LinkSpeed::from_sysfs("Unknown"), None);
        assert_eq!(LinkSpeed::from_sysfs("12 GT/s"), None);
        assert_eq!(LinkSpeed::Gt2_5.qemu(), "2_5");
        assert!(qemu_width_valid(16) && !qemu_width_valid(3) && !qemu_width_valid(0));
    }
}
