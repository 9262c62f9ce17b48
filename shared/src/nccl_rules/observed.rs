//! What NCCL did, read back from its debug output (`NCCL_DEBUG=INFO`): the
//! transport of every channel connection, and which bus id each rank holds;
//! and where that differs from a [`Prediction`].

use serde::{Deserialize, Serialize};

use super::predict::{Prediction, Transport};
use crate::bdf::Bdf;

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

/// Where NCCL's log differs from the prediction: one line per pair whose
/// channels used another transport (or none was printed).
pub fn differences(pred: &Prediction, seen: &Observed, order: &[Bdf]) -> Vec<String> {
    let mut out = Vec::new();
    for p in &pred.pairs {
        let want = p.transport.to_string();
        let got = seen.transports(p.a, p.b, order);
        if got.is_empty() {
            out.push(format!(
                "{}-{}: predicted {want}, NCCL printed no channel between them",
                p.a, p.b
            ));
        } else if got != [want.clone()] {
            out.push(format!(
                "{}-{}: predicted {want}, NCCL used {}",
                p.a,
                p.b,
                got.join("+")
            ));
        }
        if p.transport == Transport::Error && !got.is_empty() {
            out.push(format!(
                "{}-{}: predicted an initialisation error, NCCL connected",
                p.a, p.b
            ));
        }
    }
    out
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
}
