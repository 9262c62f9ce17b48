//! How well a node can serve one claim of vp2p's devices, from its published
//! devices and which of them are free: the nearest level at which the claim's
//! GPUs (and its NIC) fit, and how much of the group it takes them from is
//! left broken. A scheduler extender (`p2p-host dra extender`) scores each
//! feasible node by it, so a VM lands where its nearest level is free and
//! where it breaks the fewest larger groups. Pure: devices in, a score out.
//!
//! The levels are those of the shipped tiered claims, nearest first: a whole
//! Fabric Manager partition of the claim's size (`fmPartition<N>`), NVLink
//! among GPUs without partitions (`nvlinkDomain`), then the clique attributes
//! (`cliquePix` .. `cliqueNode`), then anywhere on the node.

use std::collections::BTreeMap;

use super::{Device, DeviceAttribute};

/// What one claim asks of a node: GPUs, and whether an RDMA NIC beside them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    /// GPUs in the claim.
    pub gpus: usize,
    /// Whether the claim also asks for a NIC.
    pub nic: bool,
}

/// A level a claim's devices can share, nearest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// One Fabric Manager partition of exactly the claim's size, all free.
    FmPartition,
    /// One NVLink domain (GPUs without Fabric Manager partitions).
    NvLink,
    /// One PCIe switch.
    Pix,
    /// Switches below one root port.
    Pxb,
    /// One root complex.
    Phb,
    /// One NUMA node.
    Node,
    /// Anywhere on the node.
    Anywhere,
}

impl Level {
    /// Every level, nearest first.
    pub const ALL: [Level; 7] = [
        Level::FmPartition,
        Level::NvLink,
        Level::Pix,
        Level::Pxb,
        Level::Phb,
        Level::Node,
        Level::Anywhere,
    ];

    /// The attribute (in the driver's domain) whose equal value holds the
    /// level; None for anywhere. `gpus` names the partition size.
    pub fn attribute(self, gpus: usize) -> Option<String> {
        Some(match self {
            Level::FmPartition => format!("fmPartition{gpus}"),
            Level::NvLink => "nvlinkDomain".into(),
            Level::Pix => "cliquePix".into(),
            Level::Pxb => "cliquePxb".into(),
            Level::Phb => "cliquePhb".into(),
            Level::Node => "cliqueNode".into(),
            Level::Anywhere => return None,
        })
    }

    /// Its name in the shipped tiered claims.
    pub fn name(self) -> &'static str {
        match self {
            Level::FmPartition => "fm-partition",
            Level::NvLink => "nvlink",
            Level::Pix => "switch",
            Level::Pxb => "switches",
            Level::Phb => "root-complex",
            Level::Node => "numa-node",
            Level::Anywhere => "anywhere",
        }
    }
}

/// Where a claim fits best on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fit {
    /// The nearest level it fits at.
    pub level: Level,
    /// Free GPUs the chosen group keeps after the claim (the smallest over
    /// the groups of that level it fits in): 0 when it fills a group exactly.
    pub left_in_group: usize,
}

/// The most an extender may score a node (the scheduler's
/// `MaxExtenderPriority`, k8s.io/kube-scheduler extender/v1).
pub const MAX_SCORE: i64 = 10;

impl Fit {
    /// The node's score, 0 ..= [`MAX_SCORE`]: two points a level (both NVLink
    /// levels alike), one taken off when the claim leaves its group broken.
    pub fn score(self) -> i64 {
        let rank: i64 = match self.level {
            Level::FmPartition | Level::NvLink => 0,
            Level::Pix => 1,
            Level::Pxb => 2,
            Level::Phb => 3,
            Level::Node => 4,
            Level::Anywhere => 5,
        };
        let broken = i64::from(self.left_in_group > 0 && self.level != Level::Anywhere);
        (MAX_SCORE - 2 * rank - broken).max(0)
    }
}

/// One published device as the scorer sees it.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    /// The device.
    pub device: &'a Device,
    /// Whether no claim holds it.
    pub free: bool,
}

/// The best fit of `ask` on a node whose devices under `driver` are
/// `devices`; None when it does not fit at all. GPUs and NICs are told
/// apart by the `kind` attribute.
pub fn best_fit<'a>(driver: &str, devices: &[Candidate<'a>], ask: Ask) -> Option<Fit> {
    fn attr<'a>(driver: &str, c: &Candidate<'a>, id: &str) -> Option<&'a DeviceAttribute> {
        c.device.attribute(driver, &format!("{driver}/{id}"))
    }
    let kind = |c: &Candidate<'a>| attr(driver, c, "kind").and_then(DeviceAttribute::as_str);
    let gpus: Vec<&Candidate<'a>> = devices.iter().filter(|c| kind(c) == Some("gpu")).collect();
    let nics: Vec<&Candidate<'a>> = devices
        .iter()
        .filter(|c| kind(c) == Some("nic") && c.free)
        .collect();
    if ask.gpus == 0 || (ask.nic && nics.is_empty()) {
        return None;
    }
    for level in Level::ALL {
        let Some(id) = level.attribute(ask.gpus) else {
            let free = gpus.iter().filter(|c| c.free).count();
            return (free >= ask.gpus).then(|| Fit {
                level,
                left_in_group: free - ask.gpus,
            });
        };
        let partition = format!("fmPartition{}", ask.gpus);
        // value -> (GPUs with it, of them free)
        let mut groups: BTreeMap<&DeviceAttribute, (usize, usize)> = BTreeMap::new();
        for g in &gpus {
            if level == Level::NvLink && attr(driver, g, &partition).is_some() {
                continue;
            }
            if let Some(v) = attr(driver, g, &id) {
                let e = groups.entry(v).or_default();
                e.0 += 1;
                e.1 += usize::from(g.free);
            }
        }
        let best = groups
            .iter()
            .filter(|(v, (all, free))| {
                let fits = if level == Level::FmPartition {
                    *all == ask.gpus && *free == ask.gpus
                } else {
                    *free >= ask.gpus
                };
                // The NIC shares the PCIe levels' attribute; beside NVLink
                // it is asked only to be free on the node.
                let nic_ok = !ask.nic
                    || matches!(level, Level::FmPartition | Level::NvLink)
                    || nics.iter().any(|n| attr(driver, n, &id) == Some(*v));
                fits && nic_ok
            })
            .map(|(_, (_, free))| free - ask.gpus)
            .min();
        if let Some(left_in_group) = best {
            return Some(Fit {
                level,
                left_in_group,
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "gpu.vp2p.io";

    fn dev(name: &str, kind: &str, attrs: &[(&str, &str)]) -> Device {
        let mut a = BTreeMap::new();
        a.insert(
            format!("{D}/kind"),
            DeviceAttribute::String(kind.to_string()),
        );
        for (k, v) in attrs {
            let value = match v.parse::<i64>() {
                Ok(i) => DeviceAttribute::Int(i),
                Err(_) => DeviceAttribute::String(v.to_string()),
            };
            a.insert(format!("{D}/{k}"), value);
        }
        Device {
            name: name.to_string(),
            attributes: a,
        }
    }

    /// Two switches of two GPUs below one root complex, and a NIC on the
    /// first switch (a layout worked by hand).
    fn two_switches() -> Vec<Device> {
        let g = |n: &str, sw: &str| {
            dev(
                n,
                "gpu",
                &[
                    ("cliquePix", sw),
                    ("cliquePxb", "rp0"),
                    ("cliquePhb", "pci0000:00"),
                    ("cliqueNode", "node0"),
                ],
            )
        };
        vec![
            g("g0", "sw0"),
            g("g1", "sw0"),
            g("g2", "sw1"),
            g("g3", "sw1"),
            dev(
                "n0",
                "nic",
                &[
                    ("cliquePix", "sw0"),
                    ("cliquePxb", "rp0"),
                    ("cliquePhb", "pci0000:00"),
                    ("cliqueNode", "node0"),
                ],
            ),
        ]
    }

    fn with_free<'a>(devs: &'a [Device], taken: &[&str]) -> Vec<Candidate<'a>> {
        devs.iter()
            .map(|device| Candidate {
                device,
                free: !taken.contains(&device.name.as_str()),
            })
            .collect()
    }

    #[test]
    fn a_pair_fits_one_switch_and_scores_highest_where_it_fills_a_switch() {
        let devs = two_switches();
        let ask = Ask {
            gpus: 2,
            nic: false,
        };
        // All free: a switch of two, filled exactly.
        let all = best_fit(D, &with_free(&devs, &[]), ask).unwrap();
        assert_eq!((all.level, all.left_in_group), (Level::Pix, 0));
        assert_eq!(all.score(), 8);
        // g0 taken: sw1 still holds a pair.
        let one = best_fit(D, &with_free(&devs, &["g0"]), ask).unwrap();
        assert_eq!(one.level, Level::Pix);
        // g0 and g2 taken: no switch holds two, the root port does.
        let split = best_fit(D, &with_free(&devs, &["g0", "g2"]), ask).unwrap();
        assert_eq!((split.level, split.left_in_group), (Level::Pxb, 0));
        assert_eq!(split.score(), 6);
    }

    #[test]
    fn a_nic_must_share_the_level_and_be_free() {
        let devs = two_switches();
        let ask = Ask { gpus: 2, nic: true };
        // The NIC sits on sw0: a pair there is PIX with it.
        let fit = best_fit(D, &with_free(&devs, &["g2"]), ask).unwrap();
        assert_eq!(fit.level, Level::Pix);
        // sw0's GPUs taken: sw1's pair reaches the NIC at the root port.
        let fit = best_fit(D, &with_free(&devs, &["g0"]), ask).unwrap();
        assert_eq!(fit.level, Level::Pxb);
        // The NIC taken: no fit at all.
        assert_eq!(best_fit(D, &with_free(&devs, &["n0"]), ask), None);
    }

    #[test]
    fn a_partition_counts_only_whole_and_free_and_nvlink_skips_partitioned_gpus() {
        let g = |n: &str, p2: &str, p4: &str| {
            dev(
                n,
                "gpu",
                &[
                    ("fmPartition2", p2),
                    ("fmPartition4", p4),
                    ("nvlinkDomain", "d0"),
                    ("cliqueNode", "node0"),
                ],
            )
        };
        let devs = vec![
            g("g0", "3", "1"),
            g("g1", "3", "1"),
            g("g2", "4", "1"),
            g("g3", "4", "1"),
        ];
        let pair = Ask {
            gpus: 2,
            nic: false,
        };
        let four = Ask {
            gpus: 4,
            nic: false,
        };
        assert_eq!(
            best_fit(D, &with_free(&devs, &[]), four).unwrap().level,
            Level::FmPartition
        );
        // One GPU of the four taken: partition 1 is not whole; NVLink is
        // not offered on partitioned GPUs; NUMA node has three: no fit.
        assert_eq!(best_fit(D, &with_free(&devs, &["g0"]), four), None);
        // A pair: partition 4 (g2, g3) is whole.
        let fit = best_fit(D, &with_free(&devs, &["g0"]), pair).unwrap();
        assert_eq!((fit.level, fit.score()), (Level::FmPartition, 10));
        // g0 and g2 taken: no partition of two is whole; g1 and g3 share
        // only the NUMA node.
        let fit = best_fit(D, &with_free(&devs, &["g0", "g2"]), pair).unwrap();
        assert_eq!(fit.level, Level::Node);
    }

    #[test]
    fn too_few_free_gpus_do_not_fit_and_anywhere_is_the_last_resort() {
        let devs = vec![
            dev("g0", "gpu", &[("cliqueNode", "node0")]),
            dev("g1", "gpu", &[("cliqueNode", "node1")]),
        ];
        let pair = Ask {
            gpus: 2,
            nic: false,
        };
        let fit = best_fit(D, &with_free(&devs, &[]), pair).unwrap();
        assert_eq!((fit.level, fit.score()), (Level::Anywhere, 0));
        assert_eq!(best_fit(D, &with_free(&devs, &["g1"]), pair), None);
    }
}
