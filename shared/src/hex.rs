//! Register offsets, capability ids, masks and bus numbers in JSON as the text
//! output writes them: lower-case hex strings with a `0x` prefix, two digits
//! for bytes (`"0xc8"`), four for 16-bit values (`"0x0148"`), eight for 32-bit
//! masks and values (`"0x0000ff00"`). Used with `#[serde(with = "...")]`; the
//! reader also takes plain JSON numbers, so older reports still load.

use serde::{Deserialize, Deserializer, Serializer};

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

fn parse<'de, D: Deserializer<'de>>(d: D, max: u64) -> Result<u64, D::Error> {
    let v = match HexOrNumber::deserialize(d)? {
        HexOrNumber::Number(n) => n,
        HexOrNumber::Text(t) => {
            let digits = t
                .strip_prefix("0x")
                .or_else(|| t.strip_prefix("0X"))
                .unwrap_or(&t);
            u64::from_str_radix(digits, 16)
                .map_err(|_| serde::de::Error::custom(format!("'{t}' is not a hex number")))?
        }
    };
    if v > max {
        return Err(serde::de::Error::custom(format!(
            "{v:#x} is larger than {max:#x}"
        )));
    }
    Ok(v)
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
                parse(d, u64::from(<$ty>::MAX)).map(|v| v as $ty)
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
        match Option::<HexOrNumber>::deserialize(d)? {
            None => Ok(None),
            Some(HexOrNumber::Number(n)) => u8::try_from(n)
                .map(Some)
                .map_err(|_| serde::de::Error::custom(format!("{n:#x} is not a byte"))),
            Some(HexOrNumber::Text(t)) => {
                let digits = t.strip_prefix("0x").unwrap_or(&t);
                u8::from_str_radix(digits, 16)
                    .map(Some)
                    .map_err(|_| serde::de::Error::custom(format!("'{t}' is not a hex byte")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
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
        assert!(
            serde_json::from_str::<R>(r#"{"offset":"0x1c8","mask":"0","pointer":null}"#).is_err()
        );
    }
}
