//! Protobuf's wire format, by hand (<https://protobuf.dev/programming-guides/encoding/>):
//! a message is a sequence of records, each a key (field number << 3 | wire
//! type, as a varint) and a value: a varint (wire type 0) or a length and that
//! many bytes (wire type 2). The field numbers and wire types come from
//! [`super::table`], never from vp2p's generated code.

use super::table::Field;

/// Appends `v` as a base-128 varint, low group first.
pub fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A field's key: its number << 3 | its wire type.
pub fn key(f: Field) -> u64 {
    (u64::from(f.number) << 3) | u64::from(f.ty.wire_type())
}

/// A message being encoded, field by field in the order given.
#[derive(Debug, Default, Clone)]
pub struct Writer(Vec<u8>);

impl Writer {
    /// An empty message.
    pub fn new() -> Self {
        Self::default()
    }

    fn len_delimited(mut self, f: Field, bytes: &[u8]) -> Self {
        assert_eq!(f.ty.wire_type(), 2, "{} is not length-delimited", f.name);
        varint(key(f), &mut self.0);
        varint(bytes.len() as u64, &mut self.0);
        self.0.extend_from_slice(bytes);
        self
    }

    /// A string field.
    pub fn string(self, f: Field, s: &str) -> Self {
        self.len_delimited(f, s.as_bytes())
    }

    /// A bytes field.
    pub fn bytes(self, f: Field, b: &[u8]) -> Self {
        self.len_delimited(f, b)
    }

    /// A message field (or one map entry: a message of key 1 and value 2).
    pub fn message(self, f: Field, m: Writer) -> Self {
        self.len_delimited(f, &m.0)
    }

    /// A varint field (bool, int32, int64; a negative int is 10 bytes).
    pub fn varint(mut self, f: Field, v: i64) -> Self {
        assert_eq!(f.ty.wire_type(), 0, "{} is not a varint", f.name);
        varint(key(f), &mut self.0);
        varint(v as u64, &mut self.0);
        self
    }

    /// The encoded message.
    pub fn finish(self) -> Vec<u8> {
        self.0
    }
}

/// One record's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 2.
    Len(Vec<u8>),
}

/// A decoded message: its records in wire order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded(pub Vec<(u32, Value)>);

fn read_varint(bytes: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes
            .get(*at)
            .ok_or_else(|| format!("varint cut at byte {at}"))?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(format!("varint longer than 10 bytes before byte {at}"))
}

impl Decoded {
    /// Decodes `bytes`; only wire types 0 and 2 (the only ones these APIs use).
    pub fn parse(bytes: &[u8]) -> Result<Self, String> {
        let mut at = 0;
        let mut out = Vec::new();
        while at < bytes.len() {
            let k = read_varint(bytes, &mut at)?;
            let number = u32::try_from(k >> 3).map_err(|_| format!("key {k} at {at}"))?;
            let value = match k & 7 {
                0 => Value::Varint(read_varint(bytes, &mut at)?),
                2 => {
                    let len = read_varint(bytes, &mut at)? as usize;
                    let end = at
                        .checked_add(len)
                        .filter(|e| *e <= bytes.len())
                        .ok_or_else(|| format!("field {number}: {len} bytes past the end"))?;
                    let v = bytes[at..end].to_vec();
                    at = end;
                    Value::Len(v)
                }
                w => return Err(format!("field {number}: wire type {w}")),
            };
            out.push((number, value));
        }
        Ok(Self(out))
    }

    /// Every value of field `f`, checked to be of its wire type.
    fn values(&self, f: Field) -> impl Iterator<Item = &Value> + '_ {
        self.0
            .iter()
            .filter(move |(n, _)| *n == f.number)
            .map(move |(_, v)| {
                let wt = match v {
                    Value::Varint(_) => 0,
                    Value::Len(_) => 2,
                };
                assert_eq!(
                    wt,
                    f.ty.wire_type(),
                    "field {} came as wire type {wt}",
                    f.name
                );
                v
            })
    }

    /// Every length-delimited value of `f` (a repeated string, bytes, message).
    pub fn all_bytes(&self, f: Field) -> Vec<Vec<u8>> {
        self.values(f)
            .map(|v| match v {
                Value::Len(b) => b.clone(),
                Value::Varint(_) => unreachable!(),
            })
            .collect()
    }

    /// Every string of `f`.
    pub fn strings(&self, f: Field) -> Vec<String> {
        self.all_bytes(f)
            .into_iter()
            .map(|b| String::from_utf8(b).expect("a string field holds UTF-8"))
            .collect()
    }

    /// The string of `f` (the last one, as protobuf's merge rules say), or "".
    pub fn string(&self, f: Field) -> String {
        self.strings(f).pop().unwrap_or_default()
    }

    /// Every message of `f`.
    pub fn messages(&self, f: Field) -> Vec<Decoded> {
        self.all_bytes(f)
            .iter()
            .map(|b| Decoded::parse(b).expect("a message field holds a message"))
            .collect()
    }

    /// The varint of `f` (the last one), or 0.
    pub fn varint(&self, f: Field) -> u64 {
        self.values(f)
            .filter_map(|v| match v {
                Value::Varint(x) => Some(*x),
                Value::Len(_) => None,
            })
            .last()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_the_encoding_guides_examples() {
        // "150" is 96 01; 1 is 01 (protobuf.dev, encoding, "Base 128 Varints").
        let mut v = Vec::new();
        varint(150, &mut v);
        assert_eq!(v, [0x96, 0x01]);
        v.clear();
        varint(1, &mut v);
        assert_eq!(v, [0x01]);
        let mut at = 0;
        assert_eq!(read_varint(&[0x96, 0x01], &mut at), Ok(150));
    }
}
