//! What a GPU pair moves on bare metal, for `p2p-guest doctor`'s ratio: a
//! table of published bare-metal measurements (each row with its source and
//! date), and for a link no row covers, the link's raw rate times the
//! efficiency of a published case of the same kind of link, said as such.
//! Pure: the guest supplies the link, this answers the figure.

use serde::{Deserialize, Serialize};

/// The link between two GPUs, as the expected figure depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Link {
    /// NVLink of one generation (2: V100, 3: A100, 4: H100/H200, 5: B200),
    /// `links` of them between the pair.
    Nvlink {
        /// NVLink generation.
        generation: u8,
        /// Links joining the pair (NV18: 18).
        links: u32,
    },
    /// PCI Express of one generation (1 to 6) and width in lanes.
    Pcie {
        /// PCIe generation, from the link speed (16 GT/s: 4, 32 GT/s: 5).
        generation: u8,
        /// Lanes.
        width: u8,
    },
}

impl Link {
    /// The NVLink generation of a GPU of compute capability `major` (7: 2,
    /// 8: 3, 9: 4, 10: 5); None for others.
    pub fn nvlink_generation(major: i32) -> Option<u8> {
        match major {
            7 => Some(2),
            8 => Some(3),
            9 => Some(4),
            10 => Some(5),
            _ => None,
        }
    }

    /// The PCIe generation of a link speed in GT/s (2.5: 1 ... 64: 6).
    pub fn pcie_generation(gts: f32) -> Option<u8> {
        [
            (2.5, 1),
            (5.0, 2),
            (8.0, 3),
            (16.0, 4),
            (32.0, 5),
            (64.0, 6),
        ]
        .into_iter()
        .find(|(s, _)| (gts - s).abs() < 0.01)
        .map(|(_, g)| g)
    }

    /// The link's raw data rate per direction, GB/s (1e9 bytes): NVLink 2 to
    /// 4 carry 25 GB/s per link per direction, NVLink 5 50 (NVIDIA's
    /// per-GPU totals: V100 300 GB/s over 6 links, A100 600 over 12, H100 900
    /// over 18, B200 1800 over 18, both directions); PCIe the lane rate after
    /// line encoding (8b/10b to Gen2, 128b/130b Gen3 to Gen5, Gen6's FLIT
    /// 242/256) times the lanes.
    pub fn raw_gbps(&self) -> f64 {
        match *self {
            Link::Nvlink { generation, links } => {
                let per_link = if generation >= 5 { 50.0 } else { 25.0 };
                per_link * f64::from(links)
            }
            Link::Pcie { generation, width } => {
                let lane = match generation {
                    1 => 2.5 * 0.8 / 8.0,
                    2 => 5.0 * 0.8 / 8.0,
                    3 => 8.0 * 128.0 / 130.0 / 8.0,
                    4 => 16.0 * 128.0 / 130.0 / 8.0,
                    5 => 32.0 * 128.0 / 130.0 / 8.0,
                    _ => 64.0 * 242.0 / 256.0 / 8.0,
                };
                lane * f64::from(width)
            }
        }
    }

    /// `NV18`, `PCIe Gen5 x16`.
    pub fn name(&self) -> String {
        match self {
            Link::Nvlink { generation, links } => format!("NV{links} (NVLink{generation})"),
            Link::Pcie { generation, width } => format!("PCIe Gen{generation} x{width}"),
        }
    }
}

/// One published bare-metal measurement.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, schemars::JsonSchema)]
pub struct PublishedCase {
    /// The link measured.
    pub link: Link,
    /// The machine and GPU (`HGX H100 SXM, 8 GPUs through NVSwitch`).
    pub machine: &'static str,
    /// The tool and test (`p2pBandwidthLatencyTest, P2P=Enabled writes`).
    pub tool: &'static str,
    /// GB/s one way (copy engine, peer access on).
    pub uni_gbps: f64,
    /// GB/s both ways at once (the sum), when published.
    pub bi_gbps: Option<f64>,
    /// Where it was published.
    pub source: &'static str,
    /// When (`2021-12-16`, or the bound the source gives).
    pub date: &'static str,
    /// What the figure is and how it was read from the source.
    pub note: &'static str,
}

/// The published cases, one per kind of link: NVLink's is taken for every
/// NVLink generation and link count, PCIe's for every PCIe generation and width.
pub const PUBLISHED: [PublishedCase; 2] = [
    PublishedCase {
        link: Link::Nvlink {
            generation: 4,
            links: 18,
        },
        machine: "HGX H100 SXM, 8 GPUs, NV18 through NVSwitch, bare metal",
        tool: "CUDA sample p2pBandwidthLatencyTest (cudaMemcpyPeerAsync: copy engine), P2P=Enabled",
        uni_gbps: 376.6,
        bi_gbps: Some(783.0),
        source: "https://github.com/NVIDIA/nccl/issues/1264",
        date: "2024 (issue opened after NVIDIA/nccl#1161 of 2024-01-27)",
        note: "unidirectional P2P writes GPU0 -> GPU2..7 371.0-376.8 GB/s (376.6 the middle of that row); bidirectional ~783 GB/s as the issue's title states",
    },
    PublishedCase {
        link: Link::Pcie {
            generation: 4,
            width: 16,
        },
        machine: "A100 (PCIe Gen4 x16), bare metal",
        tool: "measured peak of GPU ingress over the link (BaM authors)",
        uni_gbps: 25.0,
        bi_gbps: None,
        source: "https://github.com/ZaidQureshi/bam/issues/54",
        date: "2025-02-14",
        note: "the measured peak (25 GB/s) of a PCIe Gen4 x16 link the BaM paper quotes, confirmed as measured by its author in the issue; no GPU-to-GPU figure over PCIe was found published with its machine",
    },
];

/// How an expected figure was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// Measured and published for this very link.
    Published,
    /// The link's raw rate times the efficiency of the published case of the
    /// same kind of link (no figure published for this one).
    RawTimesPublishedEfficiency,
}

/// The figure a pair should reach on bare metal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Expected {
    /// The pair's link.
    pub link: Link,
    /// GB/s one way, copy engine.
    pub uni_gbps: f64,
    /// GB/s both ways at once, when known.
    pub bi_gbps: Option<f64>,
    /// The link's raw rate per direction ([`Link::raw_gbps`]).
    pub raw_gbps: f64,
    /// Published for this link, or derived.
    pub basis: Basis,
    /// The published case used, its source and date.
    pub source: String,
    /// Its date.
    pub date: String,
    /// One sentence: what the figure is.
    pub note: String,
}

/// The expected bare-metal figure for `link`: the published case of that
/// very link, else its raw rate times the efficiency (measured / raw) of
/// the published case of the same kind (NVLink or PCIe).
pub fn expected(link: Link) -> Expected {
    let same_kind = |c: &&PublishedCase| {
        matches!(
            (c.link, link),
            (Link::Nvlink { .. }, Link::Nvlink { .. }) | (Link::Pcie { .. }, Link::Pcie { .. })
        )
    };
    let case = PUBLISHED
        .iter()
        .find(same_kind)
        .expect("PUBLISHED holds one NVLink and one PCIe case");
    let raw = link.raw_gbps();
    if case.link == link {
        return Expected {
            link,
            uni_gbps: case.uni_gbps,
            bi_gbps: case.bi_gbps,
            raw_gbps: raw,
            basis: Basis::Published,
            source: case.source.into(),
            date: case.date.into(),
            note: format!("{}: {} ({})", case.machine, case.tool, case.note),
        };
    }
    let eff = case.uni_gbps / case.link.raw_gbps();
    let bi_eff = case.bi_gbps.map(|b| b / (2.0 * case.link.raw_gbps()));
    Expected {
        link,
        uni_gbps: raw * eff,
        bi_gbps: bi_eff.map(|e| 2.0 * raw * e),
        raw_gbps: raw,
        basis: Basis::RawTimesPublishedEfficiency,
        source: case.source.into(),
        date: case.date.into(),
        note: format!(
            "no bare-metal figure published for {}: its raw {raw:.1} GB/s times {:.3}, the efficiency of {} on {} ({:.1} of {:.1} GB/s)",
            link.name(),
            eff,
            case.link.name(),
            case.machine,
            case.uni_gbps,
            case.link.raw_gbps()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_published_case_carries_a_source_and_a_date() {
        for c in PUBLISHED {
            assert!(c.source.starts_with("https://"), "{c:?}");
            assert!(!c.date.is_empty() && c.date.contains("20"), "{c:?}");
            assert!(!c.machine.is_empty() && !c.tool.is_empty() && !c.note.is_empty());
            // A measurement never beats its link's raw rate.
            assert!(c.uni_gbps < c.link.raw_gbps(), "{c:?}");
        }
        // One case per kind, as expected() assumes.
        assert_eq!(
            PUBLISHED
                .iter()
                .filter(|c| matches!(c.link, Link::Nvlink { .. }))
                .count(),
            1
        );
    }

    #[test]
    fn raw_rates_by_hand() {
        // H100/H200 NV18: 18 links x 25 GB/s per direction.
        let nv18 = Link::Nvlink {
            generation: 4,
            links: 18,
        };
        assert_eq!(nv18.raw_gbps(), 450.0);
        // B200: 18 x 50.
        let b = Link::Nvlink {
            generation: 5,
            links: 18,
        };
        assert_eq!(b.raw_gbps(), 900.0);
        // Gen5 x16: 32 GT/s x 16 x 128/130 / 8 = 63.0 GB/s.
        let g5 = Link::Pcie {
            generation: 5,
            width: 16,
        };
        assert!((g5.raw_gbps() - 63.015).abs() < 0.01);
        // Gen4 x8 is half of Gen4 x16 (31.5 GB/s).
        let g4x8 = Link::Pcie {
            generation: 4,
            width: 8,
        };
        assert!((g4x8.raw_gbps() - 15.754).abs() < 0.01);
        assert_eq!(Link::pcie_generation(32.0), Some(5));
        assert_eq!(Link::pcie_generation(3.0), None);
        assert_eq!(Link::nvlink_generation(9), Some(4));
    }

    #[test]
    fn nv18_is_published_and_others_derive_from_it() {
        let nv18 = expected(Link::Nvlink {
            generation: 4,
            links: 18,
        });
        assert_eq!(nv18.basis, Basis::Published);
        assert_eq!(nv18.uni_gbps, 376.6);
        assert_eq!(nv18.bi_gbps, Some(783.0));
        // NV12 of A100: 300 GB/s raw x (376.6 / 450).
        let nv12 = expected(Link::Nvlink {
            generation: 3,
            links: 12,
        });
        assert_eq!(nv12.basis, Basis::RawTimesPublishedEfficiency);
        assert!((nv12.uni_gbps - 300.0 * 376.6 / 450.0).abs() < 1e-9);
        assert!(nv12.note.contains("no bare-metal figure published"));
        // PCIe Gen5 x16 from the Gen4 x16 case: 63.0 x 25 / 31.5.
        let g5 = expected(Link::Pcie {
            generation: 5,
            width: 16,
        });
        assert!((g5.uni_gbps - 50.0).abs() < 0.01, "{}", g5.uni_gbps);
        assert_eq!(g5.bi_gbps, None);
    }
}
