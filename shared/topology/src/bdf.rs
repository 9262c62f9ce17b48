//! PCI addresses in the `DDDD:BB:DD.F` form sysfs and VMMs use.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A PCI function address: domain, bus, device (0..32) and function (0..8).
///
/// Ordered by domain, bus, device, function, which is the order `lspci` and
/// `nvidia-smi` list functions in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bdf {
    /// PCI segment (domain) number, 0 on most single-segment hosts (`0000` in `0000:07:00.0`).
    pub domain: u32,
    /// PCI bus number of the function (0x00-0xff).
    pub bus: u8,
    /// Device (slot) number on the bus, 0-31.
    pub device: u8,
    /// Function number within the device, 0-7.
    pub function: u8,
}

/// Why a string is not a PCI address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{}' is not a PCI address (want DDDD:BB:DD.F or BB:DD.F): {why}", crate::excerpt::short(.input))]
pub struct BdfParseError {
    /// The string that was given, as typed (the message quotes a short prefix).
    pub input: String,
    /// Which part of the address is malformed, in words.
    pub why: &'static str,
}

impl Bdf {
    /// Builds an address, refusing device numbers above 31 and functions above 7.
    pub fn new(domain: u32, bus: u8, device: u8, function: u8) -> Option<Self> {
        (device < 32 && function < 8).then_some(Self {
            domain,
            bus,
            device,
            function,
        })
    }
}

impl fmt::Display for Bdf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl FromStr for Bdf {
    type Err = BdfParseError;

    /// Accepts `DDDD:BB:DD.F`, the 8-digit domain `nvidia-smi` prints
    /// (`00000000:07:00.0`) and the short `BB:DD.F` (domain 0).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why| BdfParseError {
            input: s.to_string(),
            why,
        };
        let (head, function) = s.rsplit_once('.').ok_or_else(|| err("missing '.F'"))?;
        let mut parts: Vec<&str> = head.split(':').collect();
        let domain = match parts.len() {
            3 => {
                let d = parts.remove(0);
                if d.is_empty() || d.len() > 8 {
                    return Err(err("domain must be 1 to 8 hex digits"));
                }
                u32::from_str_radix(d, 16).map_err(|_| err("domain is not hex"))?
            }
            2 => 0,
            _ => return Err(err("want DDDD:BB:DD.F")),
        };
        let hex_u8 = |t: &str, what| {
            if t.is_empty() || t.len() > 2 {
                return Err(err(what));
            }
            u8::from_str_radix(t, 16).map_err(|_| err(what))
        };
        let bus = hex_u8(parts[0], "bus must be 1 or 2 hex digits")?;
        let device = hex_u8(parts[1], "device must be 1 or 2 hex digits")?;
        if function.len() != 1 {
            return Err(err("function must be one digit 0..7"));
        }
        let function = hex_u8(function, "function must be one digit 0..7")?;
        Bdf::new(domain, bus, device, function).ok_or_else(|| err("device > 31 or function > 7"))
    }
}

impl Serialize for Bdf {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Bdf {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for Bdf {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Bdf".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "PCI address DDDD:BB:DD.F in lower-case hex, as sysfs and lspci write it",
            "pattern": "^[0-9a-f]{4}:[0-9a-f]{2}:[0-1][0-9a-f]\\.[0-7]$"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_the_forms_tools_print() {
        let b: Bdf = "0000:07:00.0".parse().unwrap();
        assert_eq!(b, Bdf::new(0, 7, 0, 0).unwrap());
        assert_eq!("00000000:07:00.0".parse::<Bdf>().unwrap(), b);
        assert_eq!("07:00.0".parse::<Bdf>().unwrap(), b);
        assert_eq!(
            "10000:e1:1f.7".parse::<Bdf>().unwrap().to_string(),
            "10000:e1:1f.7"
        );
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "0000:07:00",
            "0000:07:20.0",
            "0000:07:00.8",
            "x:07:00.0",
            "0000:107:00.0",
            "0:0:0:0.0",
        ] {
            assert!(bad.parse::<Bdf>().is_err(), "{bad} parsed");
        }
    }

    proptest! {
        #[test]
        fn display_parse_round_trip(domain in 0u32..0x10000, bus: u8, device in 0u8..32, function in 0u8..8) {
            let b = Bdf::new(domain, bus, device, function).unwrap();
            prop_assert_eq!(b.to_string().parse::<Bdf>().unwrap(), b);
        }
    }
}
