//! Linux CPU lists ("0-31,64-95"), for NUMA affinity.

use std::collections::BTreeSet;

/// A parsed CPU list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CpuList(pub BTreeSet<u32>);

impl CpuList {
    /// Parses "0-3,8,10-11"; None on anything else.
    pub fn parse(s: &str) -> Option<Self> {
        let mut set = BTreeSet::new();
        for part in s.trim().split(',').filter(|p| !p.is_empty()) {
            match part.split_once('-') {
                Some((lo, hi)) => {
                    let (lo, hi): (u32, u32) = (lo.parse().ok()?, hi.parse().ok()?);
                    if hi < lo || hi - lo > 1 << 16 {
                        return None;
                    }
                    set.extend(lo..=hi);
                }
                None => {
                    set.insert(part.parse().ok()?);
                }
            }
        }
        Some(Self(set))
    }

    /// True when every CPU of this non-empty list is also in `other`; false when empty.
    pub fn is_subset(&self, other: &CpuList) -> bool {
        !self.0.is_empty() && self.0.is_subset(&other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ranges_and_singles() {
        let l = CpuList::parse("0-2,8,10-11\n").unwrap();
        assert_eq!(
            l.0.into_iter().collect::<Vec<_>>(),
            vec![0, 1, 2, 8, 10, 11]
        );
        assert!(CpuList::parse("3-1").is_none());
        assert!(CpuList::parse("a").is_none());
        assert!(CpuList::parse("0-4")
            .unwrap()
            .is_subset(&CpuList::parse("0-31").unwrap()));
    }
}
