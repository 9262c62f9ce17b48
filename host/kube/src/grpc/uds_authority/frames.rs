//! The HTTP/2 frames and HPACK blocks the shim reads and writes: a frame's
//! header, a header block joined from HEADERS and CONTINUATION frames and
//! split into them again, and one connection's HPACK contexts, which decode
//! a client's block and encode it again with its `:authority` replaced
//! when h2 would refuse it.

use loona_hpack::{Decoder, Encoder};

use super::{RewriteError, HEADER_TABLE_SIZE, MAX_FRAME, MAX_HEADER_LIST, REPLACEMENT};

/// Frame types (RFC 9113 §6).
pub(super) const HEADERS: u8 = 0x1;
pub(super) const PUSH_PROMISE: u8 = 0x5;
pub(super) const CONTINUATION: u8 = 0x9;
/// Flags of HEADERS and CONTINUATION frames (RFC 9113 §6.2, §6.10).
pub(super) const END_STREAM: u8 = 0x1;
pub(super) const END_HEADERS: u8 = 0x4;
pub(super) const PADDED: u8 = 0x8;
pub(super) const PRIORITY: u8 = 0x20;

/// A frame's 9-byte header (RFC 9113 §4.1).
#[derive(Debug, Clone, Copy)]
pub(super) struct FrameHead {
    pub(super) len: usize,
    pub(super) kind: u8,
    pub(super) flags: u8,
    pub(super) stream: u32,
}

impl FrameHead {
    pub(super) fn parse(b: &[u8; 9]) -> Self {
        Self {
            len: usize::from(b[0]) << 16 | usize::from(b[1]) << 8 | usize::from(b[2]),
            kind: b[3],
            flags: b[4],
            // The reserved bit is not part of the identifier.
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        }
    }

    /// Appends the header of a frame of `len` bytes (at most [`MAX_FRAME`]).
    pub(super) fn push(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
        let len = u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes();
        out.extend_from_slice(&len[1..]);
        out.push(kind);
        out.push(flags);
        out.extend_from_slice(&stream.to_be_bytes());
    }
}

/// A header block being joined.
#[derive(Debug)]
pub(super) struct Block {
    pub(super) stream: u32,
    pub(super) end_stream: bool,
    pub(super) priority: Option<[u8; 5]>,
    pub(super) fragments: Vec<u8>,
}

impl Block {
    /// The block a HEADERS frame opens: its fragment without padding, its
    /// PRIORITY fields kept aside (RFC 9113 §6.2).
    pub(super) fn open(head: FrameHead, payload: &[u8]) -> Result<Self, RewriteError> {
        let malformed = |why| RewriteError::Malformed {
            stream: head.stream,
            why,
        };
        let mut p = payload;
        if head.flags & PADDED != 0 {
            let (&pad, rest) = p
                .split_first()
                .ok_or_else(|| malformed("PADDED without a pad length"))?;
            let keep = rest
                .len()
                .checked_sub(usize::from(pad))
                .ok_or_else(|| malformed("padding longer than the payload"))?;
            p = &rest[..keep];
        }
        let priority = if head.flags & PRIORITY != 0 {
            let (fields, rest) = p
                .split_first_chunk::<5>()
                .ok_or_else(|| malformed("PRIORITY without its 5 bytes"))?;
            p = rest;
            Some(*fields)
        } else {
            None
        };
        Ok(Self {
            stream: head.stream,
            end_stream: head.flags & END_STREAM != 0,
            priority,
            fragments: p.to_vec(),
        })
    }

    /// The block as frames: HEADERS, then CONTINUATION frames when it is
    /// longer than [`MAX_FRAME`], the last with END_HEADERS; no padding.
    pub(super) fn frames(&self, block: &[u8]) -> Vec<u8> {
        let prio = self.priority.map_or(0, |p| p.len());
        let mut out = Vec::with_capacity(block.len() + prio + 9 * (block.len() / MAX_FRAME + 2));
        let (first, mut rest) = block.split_at(block.len().min(MAX_FRAME - prio));
        let mut flags = if self.end_stream { END_STREAM } else { 0 };
        if self.priority.is_some() {
            flags |= PRIORITY;
        }
        if rest.is_empty() {
            flags |= END_HEADERS;
        }
        FrameHead::push(&mut out, prio + first.len(), HEADERS, flags, self.stream);
        if let Some(p) = self.priority {
            out.extend_from_slice(&p);
        }
        out.extend_from_slice(first);
        while !rest.is_empty() {
            let (chunk, after) = rest.split_at(rest.len().min(MAX_FRAME));
            rest = after;
            let flags = if rest.is_empty() { END_HEADERS } else { 0 };
            FrameHead::push(&mut out, chunk.len(), CONTINUATION, flags, self.stream);
            out.extend_from_slice(chunk);
        }
        out
    }
}

/// Whether `value` is an authority h2's server accepts (its check:
/// `http::uri::Authority::from_maybe_shared`).
pub fn is_valid_authority(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

/// One connection's HPACK contexts: the client's (decoded) and the one the
/// server's decoder follows (encoded).
pub(super) struct Contexts {
    decoder: Decoder<'static>,
    encoder: Encoder<'static>,
}

impl Contexts {
    pub(super) fn new() -> Self {
        let mut decoder = Decoder::new();
        decoder.set_max_allowed_table_size(HEADER_TABLE_SIZE);
        Self {
            decoder,
            encoder: Encoder::new(),
        }
    }

    /// `block` of `stream` decoded, its invalid `:authority` replaced, and
    /// encoded again.
    pub(super) fn rewrite(&mut self, stream: u32, block: &[u8]) -> Result<Vec<u8>, RewriteError> {
        let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut size = 0usize;
        self.decoder
            .decode_with_cb(block, |name, value| {
                size = size.saturating_add(name.len() + value.len() + 32);
                if size > MAX_HEADER_LIST {
                    return;
                }
                let value = if &name[..] == b":authority" && !is_valid_authority(&value) {
                    REPLACEMENT.as_bytes().to_vec()
                } else {
                    value.into_owned()
                };
                fields.push((name.into_owned(), value));
            })
            .map_err(|source| RewriteError::Hpack { stream, source })?;
        if size > MAX_HEADER_LIST {
            return Err(RewriteError::ListTooLarge { stream });
        }
        Ok(self
            .encoder
            .encode(fields.iter().map(|(n, v)| (&n[..], &v[..]))))
    }
}
