//! Hex numbers as text, read one way everywhere.
//!
//! - Attribute text: [`parse`] reads a sysfs id attribute (`vendor`,
//!   `device`, `class`, `subsystem_vendor`, ...; the kernel writes them as
//!   `0x%04x\n`, `class` as `0x%06x\n`) and an NCCL topology XML attribute
//!   (`vendor="0x10de"`, `class="0x030200"`), into the width the caller asks
//!   for. The host's scanner, the guest's probe, the guest's function reader
//!   and the NCCL file reader all use it, so they accept the same text and
//!   refuse it in the same words ([`HexError`]); each adds where the text was
//!   (the file, or the file, line and attribute).
//! - JSON: register offsets, capability ids, masks and bus numbers as the
//!   text output writes them: lower-case hex strings with a `0x` prefix, two
//!   digits for bytes (`"0xc8"`), four for 16-bit values (`"0x0148"`), eight
//!   for 32-bit masks and values (`"0x0000ff00"`). Used with
//!   `#[serde(with = "...")]`; the reader takes any string [`parse`] takes,
//!   and plain JSON numbers too, so older reports still load.

use serde::{Deserialize, Deserializer, Serializer};

/// An unsigned integer a hex number is read into; its width bounds the value.
pub trait HexWidth: Copy + TryFrom<u64> {
    /// Bits the type holds (16 for `u16`).
    const BITS: u32;
}

macro_rules! hex_width {
    ($($ty:ty),*) => {$(
        impl HexWidth for $ty {
            const BITS: u32 = <$ty>::BITS;
        }
    )*};
}

hex_width!(u8, u16, u32, u64);

/// Text that is not a hex number of the width asked for. The message names
/// the text and the width; the caller adds the file (and line, attribute).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{}' is not a hex number of at most {bits} bits", crate::excerpt::short(.text))]
pub struct HexError {
    /// The text, without the surrounding whitespace (the message quotes a
    /// short prefix).
    pub text: String,
    /// Bits of the width asked for.
    pub bits: u32,
}

/// Reads a hex number of width `T` from attribute text.
///
/// Accepted: surrounding whitespace (sysfs ends every attribute with a
/// newline), then an optional `0x` or `0X` prefix, then one or more hex
/// digits of either case, leading zeros allowed, whose value fits in `T`:
/// `0x10de\n`, `0x10de`, `0X10DE` and `10de` all read as 0x10de. (sysfs always
/// writes the prefix; NCCL reads its own XML with `strtol(.., 16)`, which takes
/// the digits with or without it.)
///
/// Refused, with a [`HexError`]: empty text, a prefix without digits (`0x`),
/// a sign, a second prefix, an underscore or whitespace between digits, any
/// other character that is not a hex digit, and a value wider than `T`
/// (`0x10000` as a `u16`).
pub fn parse<T: HexWidth>(text: &str) -> Result<T, HexError> {
    let t = text.trim();
    let digits = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    let bad = || HexError {
        text: t.to_string(),
        bits: T::BITS,
    };
    // from_str_radix alone would take a leading '+'.
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    // Leading zeros never overflow: past 16 digits the value is still checked.
    u64::from_str_radix(digits, 16)
        .ok()
        .and_then(|v| T::try_from(v).ok())
        .ok_or_else(bad)
}

/// The JSON Schema of these strings (`#[schemars(with = "...::hex::Hex")]`).
pub struct Hex;

impl schemars::JsonSchema for Hex {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Hex".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "a register offset, id, mask, value or bus number: 0x and lower-case hex digits, as the text output writes it",
            "pattern": "^0x[0-9a-f]+$"
        })
    }
}

/// A hex string or a number, as a reader accepts it.
#[derive(Deserialize)]
#[serde(untagged)]
enum HexOrNumber {
    Text(String),
    Number(u64),
}

impl HexOrNumber {
    fn value<T: HexWidth, E: serde::de::Error>(self) -> Result<T, E> {
        match self {
            HexOrNumber::Text(t) => parse(&t).map_err(E::custom),
            HexOrNumber::Number(n) => T::try_from(n)
                .map_err(|_| E::custom(format!("{n} does not fit in {} bits", T::BITS))),
        }
    }
}

macro_rules! hex_module {
    ($name:ident, $ty:ty, $width:literal) => {
        #[doc = concat!("`", stringify!($ty), "` as a hex string.")]
        pub mod $name {
            use super::*;

            /// Writes the value as `0x` and its hex digits.
            pub fn serialize<S: Serializer>(v: &$ty, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&format!(concat!("{:#0", $width, "x}"), v))
            }

            /// Reads a hex string or a number.
            pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<$ty, D::Error> {
                HexOrNumber::deserialize(d)?.value()
            }
        }
    };
}

hex_module!(u8, u8, 4);
hex_module!(u16, u16, 6);
hex_module!(u32, u32, 10);

/// `Option<u8>` as a hex string or null.
pub mod opt_u8 {
    use super::*;

    /// Writes `0x..` or null.
    pub fn serialize<S: Serializer>(v: &Option<u8>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.serialize_str(&format!("{v:#04x}")),
            None => s.serialize_none(),
        }
    }

    /// Reads a hex string, a number or null.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u8>, D::Error> {
        Option::<HexOrNumber>::deserialize(d)?
            .map(HexOrNumber::value)
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::{parse, HexError};

    fn refused<T: super::HexWidth + std::fmt::Debug>(text: &str) -> String {
        parse::<T>(text).unwrap_err().to_string()
    }

    #[test]
    fn attributes_as_sysfs_and_nccl_write_them() {
        // sysfs: `0x%04x\n`; class `0x%06x\n`.
        assert_eq!(parse::<u16>("0x10de\n"), Ok(0x10de));
        assert_eq!(parse::<u32>("0x030200\n"), Ok(0x03_0200));
        // NCCL's XML: `vendor="0x10de"`, upper-case too.
        assert_eq!(parse::<u16>("0x10de"), Ok(0x10de));
        assert_eq!(parse::<u16>("0X10DE"), Ok(0x10de));
        assert_eq!(parse::<u16>("0x10De"), Ok(0x10de));
        // Bare digits, as strtol(.., 16) takes them; whitespace around.
        assert_eq!(parse::<u16>("10de"), Ok(0x10de));
        assert_eq!(parse::<u16>(" \t0x10de \n"), Ok(0x10de));
        // Leading zeros, even past 16 digits.
        assert_eq!(parse::<u8>("0x0000000000000000000000c8"), Ok(0xc8));
        assert_eq!(parse::<u16>("0"), Ok(0));
        // Every bit of the width.
        assert_eq!(parse::<u8>("0xff"), Ok(u8::MAX));
        assert_eq!(parse::<u16>("0xffff"), Ok(u16::MAX));
        assert_eq!(parse::<u32>("0xffffffff"), Ok(u32::MAX));
        assert_eq!(parse::<u64>("0xffffffffffffffff"), Ok(u64::MAX));
    }

    #[test]
    fn refusals_name_the_text_and_the_width() {
        assert_eq!(
            parse::<u16>(""),
            Err(HexError {
                text: String::new(),
                bits: 16
            })
        );
        assert_eq!(
            refused::<u16>("\n"),
            "'' is not a hex number of at most 16 bits"
        );
        assert_eq!(
            refused::<u16>("0x"),
            "'0x' is not a hex number of at most 16 bits"
        );
        assert_eq!(
            refused::<u16>("0X\n"),
            "'0X' is not a hex number of at most 16 bits"
        );
        // Overflow for the width, by one bit and by far.
        assert_eq!(
            refused::<u16>("0x10000\n"),
            "'0x10000' is not a hex number of at most 16 bits"
        );
        assert_eq!(
            refused::<u8>("0x1c8"),
            "'0x1c8' is not a hex number of at most 8 bits"
        );
        assert_eq!(
            refused::<u32>("0x100000000"),
            "'0x100000000' is not a hex number of at most 32 bits"
        );
        assert_eq!(
            refused::<u64>("0x10000000000000000"),
            "'0x10000000000000000' is not a hex number of at most 64 bits"
        );
        // Garbage.
        assert_eq!(
            refused::<u32>("0xzz0200\n"),
            "'0xzz0200' is not a hex number of at most 32 bits"
        );
        for t in [
            "nvidia", "0x10dg", "x10de", "0x0x10de", "+10de", "-1", "0x+1", "0x10_de", "0x10 de",
            "0x10de,", "#10de", "0o17",
        ] {
            assert!(parse::<u64>(t).is_err(), "{t:?} was taken");
        }
    }
    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct R {
        #[serde(with = "super::u8")]
        offset: u8,
        #[serde(with = "super::u32")]
        mask: u32,
        #[serde(with = "super::opt_u8")]
        pointer: Option<u8>,
    }

    #[test]
    fn reads_as_the_text_writes() {
        let r = R {
            offset: 0xc8,
            mask: 0xff00,
            pointer: None,
        };
        let j = serde_json::to_string(&r).unwrap();
        assert_eq!(j, r#"{"offset":"0xc8","mask":"0x0000ff00","pointer":null}"#);
        assert_eq!(serde_json::from_str::<R>(&j).unwrap(), r);
        // Older reports wrote numbers.
        let old: R = serde_json::from_str(r#"{"offset":200,"mask":65280,"pointer":177}"#).unwrap();
        assert_eq!(
            old,
            R {
                offset: 0xc8,
                mask: 0xff00,
                pointer: Some(0xb1)
            }
        );
        let err = |j: &str| serde_json::from_str::<R>(j).unwrap_err().to_string();
        assert!(err(r#"{"offset":"0x1c8","mask":"0","pointer":null}"#)
            .starts_with("'0x1c8' is not a hex number of at most 8 bits"));
        assert!(err(r#"{"offset":456,"mask":"0","pointer":null}"#)
            .starts_with("456 does not fit in 8 bits"));
        // The optional byte reads as the others do (it took only `0x` before).
        let r: R =
            serde_json::from_str(r#"{"offset":"0XC8","mask":"ff00","pointer":"0XB1"}"#).unwrap();
        assert_eq!(r.pointer, Some(0xb1));
        assert!(err(r#"{"offset":"0xc8","mask":"0","pointer":"0x1b1"}"#)
            .starts_with("'0x1b1' is not a hex number of at most 8 bits"));
        assert!(err(r#"{"offset":"0xc8","mask":"0","pointer":"+b1"}"#)
            .starts_with("'+b1' is not a hex number of at most 8 bits"));
    }
}
