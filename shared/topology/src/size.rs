//! Byte sizes as operators write them (`256M`, `256MiB`, `4 KiB`, `0x1000`)
//! and as vp2p prints them (`256 MiB`): one parser and one printer for the
//! host's and the guest's options and reports.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A number of bytes. Units are powers of 1024 (`K`, `KB` and `KiB` alike).
///
/// ```
/// use p2p_topology::ByteSize;
/// let s: ByteSize = "256M".parse().unwrap();
/// assert_eq!(s, "256MiB".parse().unwrap());
/// assert_eq!(s, "0x10000000".parse().unwrap());
/// assert_eq!(s.to_string(), "256 MiB");
/// assert_eq!(ByteSize(4097).to_string(), "4097 B");
/// ```
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(transparent)]
pub struct ByteSize(pub u64);

/// A size that could not be read, with the text given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a size: want a number of bytes with an optional K, M, G or T (KiB to TiB, powers of 1024), or hex 0x...")]
pub struct ByteSizeError(pub String);

const UNITS: [(&str, u32); 5] = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10), ("B", 0)];

impl ByteSize {
    /// The bytes as `usize`, for buffer lengths (saturating on 32-bit hosts).
    pub fn as_usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

impl FromStr for ByteSize {
    type Err = ByteSizeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ByteSizeError(s.to_string());
        let t = s.trim();
        if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            return u64::from_str_radix(hex, 16)
                .map(ByteSize)
                .map_err(|_| bad());
        }
        let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (num, unit) = t.split_at(digits);
        let num: u64 = num.parse().map_err(|_| bad())?;
        let unit = unit.trim();
        let unit = unit
            .strip_suffix("iB")
            .or_else(|| unit.strip_suffix('B'))
            .unwrap_or(unit);
        let shift = match unit.to_ascii_uppercase().as_str() {
            "" => 0,
            "K" => 10,
            "M" => 20,
            "G" => 30,
            "T" => 40,
            _ => return Err(bad()),
        };
        num.checked_mul(1u64 << shift).map(ByteSize).ok_or_else(bad)
    }
}

impl fmt::Display for ByteSize {
    /// The largest unit that divides the size exactly: `256 MiB`, `4097 B`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (unit, shift) in UNITS {
            let scale = 1u64 << shift;
            if self.0 >= scale && self.0 % scale == 0 {
                return write!(f, "{} {unit}", self.0 / scale);
            }
        }
        write!(f, "{} B", self.0)
    }
}

impl From<u64> for ByteSize {
    fn from(b: u64) -> Self {
        ByteSize(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_a_unit_means_the_same_power_of_1024() {
        for s in ["16K", "16k", "16KB", "16KiB", "16 KiB", "0x4000", "16384"] {
            assert_eq!(s.parse::<ByteSize>(), Ok(ByteSize(16384)), "{s}");
        }
        assert_eq!("1G".parse::<ByteSize>(), Ok(ByteSize(1 << 30)));
        assert_eq!("2T".parse::<ByteSize>(), Ok(ByteSize(2 << 40)));
        assert_eq!("0".parse::<ByteSize>(), Ok(ByteSize(0)));
    }

    #[test]
    fn bad_sizes_name_the_text() {
        for s in ["", "x", "12Q", "1.5G", "-4", "0xg", "99999999999T", "M"] {
            let e = s.parse::<ByteSize>().unwrap_err();
            assert_eq!(e.0, s);
            assert!(e.to_string().starts_with(&format!("'{s}' is not a size")));
        }
    }

    #[test]
    fn printing_uses_the_largest_exact_unit() {
        assert_eq!(ByteSize(256 << 30).to_string(), "256 GiB");
        assert_eq!(ByteSize(3 << 40).to_string(), "3 TiB");
        assert_eq!(ByteSize(16 << 20).to_string(), "16 MiB");
        assert_eq!(ByteSize(1536).to_string(), "1536 B");
        assert_eq!(ByteSize(0).to_string(), "0 B");
        for b in [1u64, 4096, 1 << 20, 3 << 30, 12345] {
            assert_eq!(
                ByteSize(b).to_string().replace(' ', "").parse(),
                Ok(ByteSize(b))
            );
        }
    }
}
