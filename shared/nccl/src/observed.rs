//! What NCCL did, read back from its debug output (`NCCL_DEBUG=INFO`): the
//! transport of every channel connection, and which bus id each rank holds;
//! and where that differs from a [`Prediction`].

use serde::{Deserialize, Serialize};

use super::predict::{Prediction, Transport};
use p2p_topology::bdf::Bdf;

/// One channel connection: `Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ObservedChannel {
    /// Sending rank.
    pub from: u32,
    /// Receiving rank.
    pub to: u32,
    /// The transport word NCCL printed (`P2P`, `SHM`, `NET`).
    pub transport: String,
    /// The whole `via` text (`P2P/direct pointer`, `SHM/direct/direct`).
    pub via: String,
}

/// NCCL's debug output, read.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Observed {
    /// NCCL's version line (`2.28.3+cuda13.0`), when present.
    pub version: Option<String>,
    /// Rank to bus id, from `rank R nranks N cudaDev D ... busId X` lines.
    pub ranks: Vec<(u32, Bdf)>,
    /// Every channel connection printed.
    pub channels: Vec<ObservedChannel>,
}

/// NCCL's `busId` (hex digits of `DDDD:BB:DD.F` run together, as
/// `busIdToInt64` makes it) as an address.
fn bus_from_nccl(hex: &str) -> Option<Bdf> {
    let v = u64::from_str_radix(hex, 16).ok()?;
    let s = format!(
        "{:04x}:{:02x}:{:02x}.{:x}",
        v >> 20,
        (v >> 12) & 0xff,
        (v >> 4) & 0xff,
        v & 0xf
    );
    s.parse().ok()
}

fn word_after<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let mut it = line.split_whitespace();
    while let Some(w) = it.next() {
        if w == key {
            return it.next();
        }
    }
    None
}

/// Reads NCCL's debug text; lines it does not know are skipped.
pub fn parse_log(text: &str) -> Observed {
    let mut o = Observed::default();
    for line in text.lines() {
        if let Some(v) = line.split("NCCL version ").nth(1) {
            o.version.get_or_insert_with(|| v.trim().to_string());
        }
        if let (Some(r), Some(b)) = (word_after(line, "rank"), word_after(line, "busId")) {
            if let (Ok(r), Some(b)) = (r.parse(), bus_from_nccl(b)) {
                if !o.ranks.contains(&(r, b)) {
                    o.ranks.push((r, b));
                }
            }
        }
        let Some(rest) = line.split(" NCCL INFO Channel ").nth(1) else {
            continue;
        };
        let Some((_, conn)) = rest.split_once(" : ") else {
            continue;
        };
        let Some((pair, via)) = conn.split_once(" via ") else {
            continue;
        };
        let Some((from, to)) = pair.split_once(" -> ") else {
            continue;
        };
        let rank = |s: &str| s.trim().split('[').next()?.parse::<u32>().ok();
        if let (Some(from), Some(to)) = (rank(from), rank(to)) {
            let via = via.trim().to_string();
            o.channels.push(ObservedChannel {
                from,
                to,
                transport: via.split('/').next().unwrap_or("").to_string(),
                via,
            });
        }
    }
    o
}

impl Observed {
    /// The bus id of `rank`: from the log, else `order[rank]` (ranks follow
    /// CUDA order when one process drives every GPU).
    pub fn bus(&self, rank: u32, order: &[Bdf]) -> Option<Bdf> {
        self.ranks
            .iter()
            .find(|(r, _)| *r == rank)
            .map(|(_, b)| *b)
            .or_else(|| order.get(rank as usize).copied())
    }

    /// The transports NCCL used between `a` and `b`, either direction.
    pub fn transports(&self, a: Bdf, b: Bdf, order: &[Bdf]) -> Vec<String> {
        let mut t: Vec<String> = self
            .channels
            .iter()
            .filter(|c| {
                let (f, to) = (self.bus(c.from, order), self.bus(c.to, order));
                (f, to) == (Some(a), Some(b)) || (f, to) == (Some(b), Some(a))
            })
            .map(|c| c.transport.clone())
            .collect();
        t.sort();
        t.dedup();
        t
    }
}

/// Every predicted pair held against NCCL's log.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PairCheck {
    /// Pairs whose every channel used the predicted transport, as `a-b`.
    pub confirmed: Vec<String>,
    /// Pairs NCCL opened no channel between (its rings and trees join
    /// neighbours only, so an all-reduce alone leaves some pairs out): not a
    /// difference, but nothing is known of them.
    pub not_connected: Vec<String>,
    /// Pairs whose channels used another transport than predicted, or that
    /// connected though an initialisation error was predicted.
    pub differences: Vec<String>,
}

/// Holds every pair of `pred` against what NCCL printed.
pub fn check_pairs(pred: &Prediction, seen: &Observed, order: &[Bdf]) -> PairCheck {
    let mut out = PairCheck::default();
    for p in &pred.pairs {
        let want = p.transport.to_string();
        let got = seen.transports(p.a, p.b, order);
        let name = format!("{}-{}", p.a, p.b);
        if p.transport == Transport::Error {
            if got.is_empty() {
                out.not_connected.push(format!(
                    "{name}: predicted an initialisation error; NCCL opened no channel between them"
                ));
            } else {
                out.differences.push(format!(
                    "{name}: predicted an initialisation error, NCCL connected over {}",
                    got.join("+")
                ));
            }
        } else if got.is_empty() {
            out.not_connected.push(format!(
                "{name}: predicted {want}; NCCL opened no channel between them"
            ));
        } else if got != [want.clone()] {
            out.differences.push(format!(
                "{name}: predicted {want}, NCCL used {}",
                got.join("+")
            ));
        } else {
            out.confirmed.push(name);
        }
    }
    out
}

/// Where NCCL's log differs from the prediction: one line per pair whose
/// channels used another transport. Pairs without a channel are not
/// differences ([`check_pairs`] lists them apart).
pub fn differences(pred: &Prediction, seen: &Observed, order: &[Bdf]) -> Vec<String> {
    check_pairs(pred, seen, order).differences
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_bus_ids_read_as_addresses() {
        // "0000:00:06.0" -> digits 0000 00 06 0 -> 0x60.
        assert_eq!(
            bus_from_nccl("60").map(|b| b.to_string()).as_deref(),
            Some("0000:00:06.0")
        );
        assert_eq!(
            bus_from_nccl("1b000").map(|b| b.to_string()).as_deref(),
            Some("0000:1b:00.0")
        );
    }

    fn verdict(a: &str, b: &str, t: Transport) -> crate::PairVerdict {
        crate::PairVerdict {
            a: a.parse().unwrap(),
            b: b.parse().unwrap(),
            path: crate::PathType::Nvl,
            bw_gbs: 0.0,
            p2p_level: crate::PathType::Pxb,
            topology_allows_p2p: true,
            driver: crate::DriverP2p::Allowed,
            transport: t,
            reasons: Vec::new(),
            decided_by: Vec::new(),
        }
    }

    /// Four GPUs on a ring 0-1-2-3 (NCCL's format, src/transport/p2p.cc at
    /// v2.28.3-1: `Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/...`): the
    /// pairs 0-2 and 1-3 have no channel and are reported as not connected,
    /// never as a difference; a pair over SHM where P2P was predicted is one.
    #[test]
    fn pairs_without_a_channel_are_not_differences() {
        let log = "\
h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
h:1:2 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[2] via SHM/direct/direct
h:1:2 [2] NCCL INFO Channel 00/0 : 2[2] -> 3[3] via P2P/CUMEM/read
h:1:2 [3] NCCL INFO Channel 00/0 : 3[3] -> 0[0] via P2P/CUMEM/read
";
        let order: Vec<Bdf> = [
            "0000:00:06.0",
            "0000:00:07.0",
            "0000:00:08.0",
            "0000:00:09.0",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        let mut pred = Prediction {
            pairs: Vec::new(),
            gpus: Vec::new(),
        };
        for (i, a) in order.iter().enumerate() {
            for b in &order[i + 1..] {
                pred.pairs
                    .push(verdict(&a.to_string(), &b.to_string(), Transport::P2p));
            }
        }
        let c = check_pairs(&pred, &parse_log(log), &order);
        assert_eq!(
            c.confirmed,
            [
                "0000:00:06.0-0000:00:07.0",
                "0000:00:06.0-0000:00:09.0",
                "0000:00:08.0-0000:00:09.0"
            ]
        );
        assert_eq!(c.not_connected.len(), 2, "{c:?}");
        assert!(c.not_connected[0]
            .starts_with("0000:00:06.0-0000:00:08.0: predicted P2P; NCCL opened no channel"));
        assert_eq!(
            c.differences,
            ["0000:00:07.0-0000:00:08.0: predicted P2P, NCCL used SHM"]
        );
    }
}
