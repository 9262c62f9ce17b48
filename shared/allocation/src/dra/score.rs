//! How well a node can serve one claim of vp2p's devices, from its published
//! devices and which of them are free: the nearest level at which the claim's
//! GPUs (and its NIC) fit, and whether taking them costs the node a larger
//! VM it could still take. A scheduler extender (`p2p-host dra extender`)
//! scores each feasible node by it, so a VM lands where its nearest level is
//! free and, among such nodes, where it spoils no room a larger VM needs.
//! Pure: devices in, a score out.
//!
//! Which devices a claim takes is the scheduler's allocator's choice, not
//! the extender's: [`taken_by`] follows its order (devices as published,
//! the first group that fits), so the room left is the room it will leave.
//!
//! The levels are those of the shipped tiered claims, nearest first: a whole
//! Fabric Manager partition of the claim's size (`fmPartition<N>`), NVLink
//! among GPUs without partitions (`nvlinkDomain`), then the clique attributes
//! (`cliquePix` .. `cliqueNode`), then anywhere on the node.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use super::{Device, DeviceAttribute};

/// What one claim asks of a node: GPUs, and whether an RDMA NIC beside them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    /// GPUs in the claim.
    pub gpus: usize,
    /// Whether the claim also asks for a NIC.
    pub nic: bool,
}

/// Why a text is not an [`Ask`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not an ask: GPUs, optionally +nic (e.g. 4+nic, 8)")]
pub struct AskParseError(pub String);

impl FromStr for Ask {
    type Err = AskParseError;

    /// `N` or `N+nic`, N at least 1.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (count, nic) = match s.strip_suffix("+nic") {
            Some(c) => (c, true),
            None => (s, false),
        };
        match count.parse::<usize>() {
            Ok(gpus) if gpus > 0 => Ok(Ask { gpus, nic }),
            _ => Err(AskParseError(s.to_string())),
        }
    }
}

impl fmt::Display for Ask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.gpus, if self.nic { "+nic" } else { "" })
    }
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
    /// Whether the devices the allocator takes for it leave the node room
    /// for fewer of a larger kept ask than before ([`fit_keeping`], [`room`]).
    pub spoils: bool,
}

/// The most an extender may score a node (the scheduler's
/// `MaxExtenderPriority`, k8s.io/kube-scheduler extender/v1).
pub const MAX_SCORE: i64 = 10;

impl Fit {
    /// The node's score, 0 ..= [`MAX_SCORE`]: two points a level (both NVLink
    /// levels alike), one taken off when the placement spoils a larger ask.
    pub fn score(self) -> i64 {
        let rank: i64 = match self.level {
            Level::FmPartition | Level::NvLink => 0,
            Level::Pix => 1,
            Level::Pxb => 2,
            Level::Phb => 3,
            Level::Node => 4,
            Level::Anywhere => 5,
        };
        (MAX_SCORE - 2 * rank - i64::from(self.spoils)).max(0)
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
                spoils: false,
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
                spoils: false,
            });
        }
    }
    None
}

/// How many claims of `ask` the node's free devices hold, each placed at
/// its best level as the allocator would take it ([`taken_by`]) before the
/// next: the room a node has for one size.
pub fn room(driver: &str, devices: &[Candidate<'_>], ask: Ask) -> usize {
    let mut left: Vec<Candidate<'_>> = devices.to_vec();
    let mut n = 0;
    while let Some(fit) = best_fit(driver, &left, ask) {
        let taken = taken_by(driver, &left, ask, fit.level);
        if taken.is_empty() {
            break;
        }
        for i in taken {
            left[i].free = false;
        }
        n += 1;
    }
    n
}

/// [`best_fit`], with [`Fit::spoils`] set: whether the devices
/// [`taken_by`] the claim at its level leave [`room`] for fewer of one of
/// `keep` (the asks larger than this one) than the node had before.
pub fn fit_keeping<'a>(
    driver: &str,
    devices: &[Candidate<'a>],
    ask: Ask,
    keep: &[Ask],
) -> Option<Fit> {
    let fit = best_fit(driver, devices, ask)?;
    let taken = taken_by(driver, devices, ask, fit.level);
    let after: Vec<Candidate<'a>> = devices
        .iter()
        .enumerate()
        .map(|(i, c)| Candidate {
            device: c.device,
            free: c.free && !taken.contains(&i),
        })
        .collect();
    let spoils = keep
        .iter()
        .filter(|k| k.gpus > ask.gpus)
        .any(|&k| room(driver, &after, k) < room(driver, devices, k));
    Some(Fit { spoils, ..fit })
}

/// The devices (indices into `devices`) the scheduler's allocator takes for
/// `ask` at `level`: it walks the devices in their published order, so the
/// group it takes is the one of the first free GPU whose group fits (with a
/// free NIC of the same group at the PCIe levels), and of it the first free
/// GPUs; the NIC is the first free one sharing the group, or at the NVLink
/// levels and anywhere the first free one. Empty when the ask does not fit
/// at that level.
pub fn taken_by(driver: &str, devices: &[Candidate<'_>], ask: Ask, level: Level) -> Vec<usize> {
    let attr = |i: usize, id: &str| {
        devices[i]
            .device
            .attribute(driver, &format!("{driver}/{id}"))
    };
    let of_kind = |k: &str| -> Vec<usize> {
        (0..devices.len())
            .filter(|&i| attr(i, "kind").and_then(DeviceAttribute::as_str) == Some(k))
            .collect()
    };
    let gpus = of_kind("gpu");
    let free_nics: Vec<usize> = of_kind("nic")
        .into_iter()
        .filter(|&i| devices[i].free)
        .collect();
    let partition = format!("fmPartition{}", ask.gpus);
    let Some(id) = level.attribute(ask.gpus) else {
        let take: Vec<usize> = gpus
            .iter()
            .copied()
            .filter(|&i| devices[i].free)
            .take(ask.gpus)
            .collect();
        if take.len() < ask.gpus || (ask.nic && free_nics.is_empty()) {
            return Vec::new();
        }
        return take
            .into_iter()
            .chain(free_nics.first().copied().filter(|_| ask.nic))
            .collect();
    };
    let pcie = !matches!(level, Level::FmPartition | Level::NvLink);
    let member = |i: usize| !(level == Level::NvLink && attr(i, &partition).is_some());
    for &first in gpus.iter().filter(|&&i| devices[i].free && member(i)) {
        let Some(value) = attr(first, &id) else {
            continue;
        };
        let group: Vec<usize> = gpus
            .iter()
            .copied()
            .filter(|&i| member(i) && attr(i, &id) == Some(value))
            .collect();
        let free: Vec<usize> = group.iter().copied().filter(|&i| devices[i].free).collect();
        let whole = level != Level::FmPartition || group.len() == ask.gpus;
        if !whole || free.len() < ask.gpus {
            continue;
        }
        let nic = if !ask.nic {
            None
        } else if pcie {
            match free_nics.iter().find(|&&n| attr(n, &id) == Some(value)) {
                Some(&n) => Some(n),
                None => continue,
            }
        } else {
            match free_nics.first() {
                Some(&n) => Some(n),
                None => return Vec::new(),
            }
        };
        return free.into_iter().take(ask.gpus).chain(nic).collect();
    }
    Vec::new()
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
    fn an_ask_reads_as_gpus_and_an_optional_nic() {
        assert_eq!("4+nic".parse(), Ok(Ask { gpus: 4, nic: true }));
        assert_eq!(
            "8".parse(),
            Ok(Ask {
                gpus: 8,
                nic: false
            })
        );
        assert_eq!(Ask { gpus: 4, nic: true }.to_string(), "4+nic");
        for bad in ["0", "nic", "4+gpu", ""] {
            assert!(bad.parse::<Ask>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_allocator_takes_the_first_group_in_published_order_that_fits() {
        // sw0 (four GPUs, listed first) and sw1 (two): the tightest switch
        // for a pair is sw1, but the allocator walks g0 first.
        let g = |n: &str, sw: &str| dev(n, "gpu", &[("cliquePix", sw), ("cliqueNode", "node0")]);
        let devs = vec![
            g("g0", "sw0"),
            g("g1", "sw0"),
            g("g2", "sw0"),
            g("g3", "sw0"),
            g("g4", "sw1"),
            g("g5", "sw1"),
        ];
        let pair = Ask {
            gpus: 2,
            nic: false,
        };
        let free = with_free(&devs, &[]);
        assert_eq!(best_fit(D, &free, pair).unwrap().left_in_group, 0);
        assert_eq!(taken_by(D, &free, pair, Level::Pix), vec![0, 1]);
        // g0 and g2 taken: sw0 keeps g1 and g3, the first free pair.
        assert_eq!(
            taken_by(D, &with_free(&devs, &["g0", "g2"]), pair, Level::Pix),
            vec![1, 3]
        );
        // With a NIC asked at the switch and the NIC only on sw1, sw0 is
        // passed over.
        let mut with_nic = devs.clone();
        with_nic.push(dev(
            "n0",
            "nic",
            &[("cliquePix", "sw1"), ("cliqueNode", "node0")],
        ));
        let ask = Ask { gpus: 2, nic: true };
        assert_eq!(
            taken_by(D, &with_free(&with_nic, &[]), ask, Level::Pix),
            vec![4, 5, 6]
        );
        // Four at one switch do not fit on sw1 alone: nothing.
        assert!(taken_by(
            D,
            &with_free(&devs, &["g0"]),
            Ask {
                gpus: 4,
                nic: false
            },
            Level::Pix
        )
        .is_empty());
    }

    #[test]
    fn a_placement_that_costs_a_larger_kept_ask_scores_a_point_less() {
        let devs = two_switches();
        let pair = Ask {
            gpus: 2,
            nic: false,
        };
        let four = Ask { gpus: 4, nic: true };
        // All free: the node takes four and the NIC (at the root port); a
        // pair on sw0 leaves two GPUs: the four no longer fit.
        let fit = fit_keeping(D, &with_free(&devs, &[]), pair, &[four]).unwrap();
        assert_eq!((fit.level, fit.spoils, fit.score()), (Level::Pix, true, 7));
        // The four did not fit before (g0 taken): nothing is spoiled.
        let fit = fit_keeping(D, &with_free(&devs, &["g0"]), pair, &[four]).unwrap();
        assert_eq!((fit.level, fit.spoils, fit.score()), (Level::Pix, false, 8));
        // Only larger asks are kept: a pair does not guard pairs.
        let fit = fit_keeping(D, &with_free(&devs, &[]), pair, &[pair]).unwrap();
        assert!(!fit.spoils);
        // The four itself spoils no larger ask.
        let fit = fit_keeping(D, &with_free(&devs, &[]), four, &[four]).unwrap();
        assert_eq!((fit.level, fit.spoils), (Level::Pxb, false));
    }

    #[test]
    fn room_counts_each_larger_ask_the_node_still_holds() {
        // Two sockets, each two switches of two GPUs with a NIC per switch
        // (an HGX board's PCIe, as the fleet's switch-pairs shape).
        let mut devs = Vec::new();
        for (sock, sws) in [("node0", ["sw0", "sw1"]), ("node1", ["sw2", "sw3"])] {
            for sw in sws {
                let at = [("cliquePix", sw), ("cliqueNode", sock)];
                devs.push(dev(&format!("{sw}g0"), "gpu", &at));
                devs.push(dev(&format!("{sw}g1"), "gpu", &at));
                devs.push(dev(&format!("{sw}n"), "nic", &at));
            }
        }
        let four = Ask { gpus: 4, nic: true };
        let pair = Ask {
            gpus: 2,
            nic: false,
        };
        assert_eq!(room(D, &with_free(&devs, &[]), four), 2);
        // A pair on sw0 leaves one socket whole: room for one four, not two,
        // though a four still fits (the point a fit-only test missed).
        let fit = fit_keeping(D, &with_free(&devs, &[]), pair, &[four]).unwrap();
        assert!(fit.spoils);
        // With sw0 taken, a pair on sw1 costs nothing more: socket 1 stays.
        let fit = fit_keeping(D, &with_free(&devs, &["sw0g0", "sw0g1"]), pair, &[four]).unwrap();
        assert_eq!((fit.level, fit.spoils, fit.score()), (Level::Pix, false, 8));
        assert_eq!(room(D, &with_free(&devs, &["sw0g0", "sw0g1"]), four), 1);
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
