//! The template search's verdict (`fleet --tuning`, scripts/fleet-tune.sh):
//! per saved tuning run and scheduled policy, the VMs placed well and refused
//! over every seed, regime and size, and which candidate each policy keeps.
//! The rule is one for every policy: the most VMs placed well less VMs
//! refused (an operator gains by one and loses by the other alike), fewer
//! refused on a tie, then the first file given.

use serde_json::Value;

use crate::tally::RunCount;

/// What `policy` ran with in the saved `--json` document `doc`: its claim
/// templates, then the scheduler profile, the order of vp2p's slices (on
/// the policies placed on them, when not the address order) and the
/// extender (on the pods it scores); files written before a field lack it.
pub fn setup(doc: &Value, policy: &str) -> String {
    let mut out = match policy {
        "vp2p" | "nvidia" => doc["templates"][policy].as_str().unwrap_or("-"),
        _ => "generated",
    }
    .to_string();
    if let Some(profile) = doc["scheduler_profile"].as_str() {
        out += &format!(", scheduler {profile}");
    }
    // NVIDIA's cut keeps the bus order whatever vp2p's slices use.
    if let Some(order) = doc["device_order"]
        .as_str()
        .filter(|o| *o != "address" && policy != "nvidia")
    {
        out += &format!(", {order} order");
    }
    // The extender scores the vp2p and kubevirt policies' pods only.
    if let Some(w) = doc["extender"]["weight"]
        .as_u64()
        .filter(|_| matches!(policy, "vp2p" | "kubevirt"))
    {
        let keep: Vec<&str> = doc["extender"]["keep"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        out += &format!(", extender {w} keep {}", keep.join(","));
    }
    out
}

/// One candidate: a policy's counts in one saved run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The saved run it comes from.
    pub file: String,
    /// The policy.
    pub policy: String,
    /// The claim templates it ran with.
    pub templates: String,
    /// VMs placed well, over every seed, regime and size.
    pub well: u32,
    /// VMs refused.
    pub refused: u32,
    /// VMs that arrived.
    pub arrived: u32,
}

impl Candidate {
    /// `policy`'s counts among `runs` (None when it did not run there).
    pub fn of(file: &str, templates: &str, policy: &str, runs: &[RunCount]) -> Option<Self> {
        let of: Vec<&RunCount> = runs.iter().filter(|r| r.policy == policy).collect();
        if of.is_empty() {
            return None;
        }
        let sum = |k: fn(&crate::tally::SizeCount) -> u32| -> u32 {
            of.iter().flat_map(|r| &r.sizes).map(k).sum()
        };
        Some(Candidate {
            file: file.to_string(),
            policy: policy.to_string(),
            templates: templates.to_string(),
            well: sum(|s| s.well_placed),
            refused: sum(|s| s.refused),
            arrived: sum(|s| s.arrived),
        })
    }

    /// Well placed less refused.
    pub fn net(&self) -> i64 {
        i64::from(self.well) - i64::from(self.refused)
    }
}

/// For each candidate, whether it is its policy's pick.
pub fn picks(candidates: &[Candidate]) -> Vec<bool> {
    let best = |c: &Candidate| {
        candidates
            .iter()
            .enumerate()
            .filter(|(_, o)| o.policy == c.policy)
            .max_by_key(|(i, o)| (o.net(), std::cmp::Reverse(o.refused), std::cmp::Reverse(*i)))
            .map(|(i, _)| i)
    };
    candidates
        .iter()
        .enumerate()
        .map(|(i, c)| best(c) == Some(i))
        .collect()
}

/// The table `fleet --tuning` prints: a line per candidate, the pick marked.
pub fn table(candidates: &[Candidate]) -> String {
    let mut out = format!(
        "{:<40} {:<9} {:>6} {:>8} {:>6} {:>8} {:>5}  TEMPLATES\n",
        "FILE", "POLICY", "WELL", "REFUSED", "NET", "ARRIVED", "PICK"
    );
    for (c, pick) in candidates.iter().zip(picks(candidates)) {
        out.push_str(&format!(
            "{:<40} {:<9} {:>6} {:>8} {:>6} {:>8} {:>5}  {}\n",
            c.file,
            c.policy,
            c.well,
            c.refused,
            c.net(),
            c.arrived,
            if pick { "*" } else { "" },
            c.templates
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(file: &str, policy: &str, well: u32, refused: u32) -> Candidate {
        Candidate {
            file: file.into(),
            policy: policy.into(),
            templates: "-".into(),
            well,
            refused,
            arrived: 713,
        }
    }

    #[test]
    fn each_policy_keeps_its_candidate_with_the_most_well_placed_less_refused() {
        // The tuning run of 2026-11-29 (seeds 1..3, 100 nodes, fill): nets
        // 469, 474, 478 for vp2p and 426, 420 for NVIDIA, worked by hand.
        let all = [
            c("vp2p-shipped", "vp2p", 554, 85),
            c("vp2p-nvlink-first", "vp2p", 562, 88),
            c("vp2p-pairs-off-nic", "vp2p", 555, 77),
            c("nvidia-generated", "nvidia", 496, 70),
            c("nvidia-root-complex-first", "nvidia", 487, 67),
            c("count", "count", 384, 54),
        ];
        assert_eq!(picks(&all), [false, false, true, true, false, true]);
        // A tie on the net goes to fewer refused, then to the first file.
        let tie = [
            c("a", "vp2p", 10, 4),
            c("b", "vp2p", 9, 3),
            c("c", "vp2p", 9, 3),
        ];
        assert_eq!(picks(&tie), [false, true, false]);
        let t = table(&all);
        assert!(t.lines().nth(3).unwrap().contains("  478 "), "{t}");
    }

    #[test]
    fn a_setup_names_the_order_and_the_extender_only_where_they_act() {
        let doc = serde_json::json!({
            "templates": {"vp2p": "t.yaml", "nvidia": "generated"},
            "device_order": "nic-last",
            "extender": {"weight": 5, "keep": ["4+nic", "8"]},
        });
        assert_eq!(
            setup(&doc, "vp2p"),
            "t.yaml, nic-last order, extender 5 keep 4+nic,8"
        );
        assert_eq!(setup(&doc, "count"), "generated, nic-last order");
        assert_eq!(setup(&doc, "nvidia"), "generated");
        // A file from before the fields: the templates alone.
        assert_eq!(setup(&serde_json::json!({}), "vp2p"), "-");
    }
}
