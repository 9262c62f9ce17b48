//! An HTTP/2 shim in front of a gRPC server on a unix socket that replaces a
//! client's malformed `:authority` with `localhost`.
//!
//! Why: the kubelet's plugin watcher dials a registration socket by its bare
//! path (k8s.io/kubernetes v1.37.2,
//! pkg/kubelet/pluginmanager/operationexecutor/operation_generator.go `dial`:
//! `grpc.DialContext(ctx, unixSocketPath, ...)` with a unix context dialer),
//! and grpc-go (v1.82.1, clientconn.go `cc.authority =
//! encodeAuthority(endpoint)`) sends the percent-encoded path as
//! `:authority`, say `%2Fvar%2Flib%2Fkubelet%2Fplugins_registry%2Fgpu.vp2p.io-reg.sock`.
//! h2 (0.4.20), under tonic, refuses such a request as malformed
//! (`uri::Authority` rejects `%`) with RST_STREAM(PROTOCOL_ERROR), so
//! GetInfo fails and no kubelet can register the driver. It is known and
//! open upstream (hyperium/h2#442 and #487, grpc/grpc-rust#243), and h2 has
//! no option to accept it. The DRA socket and the device plugin's socket are
//! dialed with `localhost` as the authority and need nothing.
//!
//! How: [`incoming`] accepts connections and puts a relay between each and
//! the server. Bytes from the server go to the client unchanged. From the
//! client ([`rewrite`]): the connection preface and every frame pass
//! unchanged (RFC 9113 §4.1), except header blocks: a HEADERS frame and its
//! CONTINUATION frames are joined (padding dropped, PRIORITY fields kept),
//! the block is decoded with the client's HPACK context (RFC 7541, one
//! decoder a connection), an `:authority` that is not a valid authority (the
//! check h2 makes) becomes `localhost`, and the list is encoded again with
//! one encoder a connection (every block is, so that the server's decoder
//! follows the encoder's table) and sent as HEADERS plus CONTINUATION
//! frames of at most 16384 bytes (the frame size every peer accepts). A
//! frame the shim cannot follow (an oversized or malformed header block, a
//! header block split by another frame, a PUSH_PROMISE from a client) closes
//! the connection with a log line naming the socket; a header block over
//! [`MAX_BLOCK`] bytes, or one that decodes to over [`MAX_HEADER_LIST`]
//! bytes, is refused, so a connection holds at most about that much.

use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};

use loona_hpack::{Decoder, Encoder};
use tokio::io::{
    AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream, ReadBuf,
};
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::wrappers::UnixListenerStream;
use tokio_stream::{Stream, StreamExt};

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// What an invalid `:authority` becomes.
pub const REPLACEMENT: &str = "localhost";
/// The most bytes of one header block, its frames joined.
pub const MAX_BLOCK: usize = 1 << 20;
/// The most bytes of one decoded header list, counted as RFC 9113 §6.5.2
/// counts SETTINGS_MAX_HEADER_LIST_SIZE (name, value and 32 a field).
pub const MAX_HEADER_LIST: usize = 1 << 20;
/// The largest frame payload the shim sends (RFC 9113 §4.2: the smallest
/// SETTINGS_MAX_FRAME_SIZE, which every peer accepts).
pub const MAX_FRAME: usize = 16_384;
/// The HPACK dynamic table size the client may use: the server's
/// SETTINGS_HEADER_TABLE_SIZE, which tonic leaves at its default (RFC 9113
/// §6.5.2; h2's decoder refuses more too).
pub const HEADER_TABLE_SIZE: usize = 4096;
/// The bytes buffered between the relay and the server, each way.
const DUPLEX_BUFFER: usize = 64 * 1024;

/// Frame types (RFC 9113 §6).
const HEADERS: u8 = 0x1;
const PUSH_PROMISE: u8 = 0x5;
const CONTINUATION: u8 = 0x9;
/// Flags of HEADERS and CONTINUATION frames (RFC 9113 §6.2, §6.10).
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// Why a client's connection was closed.
#[derive(Debug, thiserror::Error)]
pub enum RewriteError {
    /// The first bytes are not HTTP/2's.
    #[error("the client's first 24 bytes are not the HTTP/2 connection preface")]
    Preface,
    /// A header block too large to hold.
    #[error("the header block of stream {stream} is over {MAX_BLOCK} bytes")]
    BlockTooLarge {
        /// The stream.
        stream: u32,
    },
    /// A header block that decodes to too many bytes.
    #[error("the header list of stream {stream} decodes to over {MAX_HEADER_LIST} bytes")]
    ListTooLarge {
        /// The stream.
        stream: u32,
    },
    /// A HEADERS frame whose padding or PRIORITY fields do not fit it.
    #[error("a malformed HEADERS frame on stream {stream}: {why}")]
    Malformed {
        /// The stream.
        stream: u32,
        /// What does not fit.
        why: &'static str,
    },
    /// Another frame inside a header block (RFC 9113 §6.10).
    #[error(
        "a frame of type {kind:#x} on stream {stream} inside the header block of stream {open}"
    )]
    Interleaved {
        /// The frame's type.
        kind: u8,
        /// The frame's stream.
        stream: u32,
        /// The stream whose block is open.
        open: u32,
    },
    /// A CONTINUATION frame with no header block open.
    #[error("a CONTINUATION frame on stream {stream} outside a header block")]
    StrayContinuation {
        /// The stream.
        stream: u32,
    },
    /// A client sent PUSH_PROMISE (RFC 9113 §8.4: only servers push), whose
    /// header block the shim does not follow.
    #[error("a PUSH_PROMISE frame from the client")]
    PushPromise,
    /// The block does not decode (RFC 7541).
    #[error("the header block of stream {stream} does not decode: {source}")]
    Hpack {
        /// The stream.
        stream: u32,
        /// The decoder's error.
        source: loona_hpack::decoder::DecoderError,
    },
    /// The client closed the connection inside a frame.
    #[error("the connection ended inside a frame")]
    Truncated,
    /// Reading or writing failed.
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// A frame's 9-byte header (RFC 9113 §4.1).
#[derive(Debug, Clone, Copy)]
struct FrameHead {
    len: usize,
    kind: u8,
    flags: u8,
    stream: u32,
}

impl FrameHead {
    fn parse(b: &[u8; 9]) -> Self {
        Self {
            len: usize::from(b[0]) << 16 | usize::from(b[1]) << 8 | usize::from(b[2]),
            kind: b[3],
            flags: b[4],
            // The reserved bit is not part of the identifier.
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        }
    }

    /// Appends the header of a frame of `len` bytes (at most [`MAX_FRAME`]).
    fn push(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
        let len = u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes();
        out.extend_from_slice(&len[1..]);
        out.push(kind);
        out.push(flags);
        out.extend_from_slice(&stream.to_be_bytes());
    }
}

/// A header block being joined.
#[derive(Debug)]
struct Block {
    stream: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    fragments: Vec<u8>,
}

impl Block {
    /// The block a HEADERS frame opens: its fragment without padding, its
    /// PRIORITY fields kept aside (RFC 9113 §6.2).
    fn open(head: FrameHead, payload: &[u8]) -> Result<Self, RewriteError> {
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
    fn frames(&self, block: &[u8]) -> Vec<u8> {
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
struct Contexts {
    decoder: Decoder<'static>,
    encoder: Encoder<'static>,
}

impl Contexts {
    fn new() -> Self {
        let mut decoder = Decoder::new();
        decoder.set_max_allowed_table_size(HEADER_TABLE_SIZE);
        Self {
            decoder,
            encoder: Encoder::new(),
        }
    }

    /// `block` of `stream` decoded, its invalid `:authority` replaced, and
    /// encoded again.
    fn rewrite(&mut self, stream: u32, block: &[u8]) -> Result<Vec<u8>, RewriteError> {
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

/// Reads a frame header; `None` at the end of the connection between frames.
async fn read_head<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<[u8; 9]>, RewriteError> {
    let mut b = [0u8; 9];
    let mut n = 0;
    while n < b.len() {
        match r.read(&mut b[n..]).await? {
            0 if n == 0 => return Ok(None),
            0 => return Err(RewriteError::Truncated),
            m => n += m,
        }
    }
    Ok(Some(b))
}

/// Reads exactly `buf.len()` bytes.
async fn read_all<R: AsyncRead + Unpin>(r: &mut R, buf: &mut [u8]) -> Result<(), RewriteError> {
    match r.read_exact(buf).await {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(RewriteError::Truncated),
        Err(e) => Err(e.into()),
    }
}

/// Copies what `client` sends to `server`, header blocks rewritten as the
/// module's doc says, until the client ends the connection (`Ok`) or sends
/// what the shim cannot follow.
pub async fn rewrite<R, W>(client: R, server: &mut W) -> Result<(), RewriteError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut client = BufReader::new(client);
    let mut preface = [0u8; 24];
    match read_preface(&mut client, &mut preface).await? {
        false => return Ok(()),
        true if &preface != PREFACE => return Err(RewriteError::Preface),
        true => server.write_all(PREFACE).await?,
    }
    let mut contexts = Contexts::new();
    let mut open: Option<Block> = None;
    while let Some(raw) = read_head(&mut client).await? {
        let head = FrameHead::parse(&raw);
        if let Some(b) = &open {
            if head.kind != CONTINUATION || head.stream != b.stream {
                return Err(RewriteError::Interleaved {
                    kind: head.kind,
                    stream: head.stream,
                    open: b.stream,
                });
            }
        }
        let block = match head.kind {
            HEADERS => {
                if head.len > MAX_BLOCK {
                    return Err(RewriteError::BlockTooLarge {
                        stream: head.stream,
                    });
                }
                let mut payload = vec![0; head.len];
                read_all(&mut client, &mut payload).await?;
                Block::open(head, &payload)?
            }
            CONTINUATION => {
                let mut b = open.take().ok_or(RewriteError::StrayContinuation {
                    stream: head.stream,
                })?;
                let start = b.fragments.len();
                if start + head.len > MAX_BLOCK {
                    return Err(RewriteError::BlockTooLarge { stream: b.stream });
                }
                b.fragments.resize(start + head.len, 0);
                read_all(&mut client, &mut b.fragments[start..]).await?;
                b
            }
            PUSH_PROMISE => return Err(RewriteError::PushPromise),
            _ => {
                server.write_all(&raw).await?;
                let len = head.len as u64;
                let copied = tokio::io::copy(&mut (&mut client).take(len), server).await?;
                if copied != len {
                    return Err(RewriteError::Truncated);
                }
                continue;
            }
        };
        if head.flags & END_HEADERS == 0 {
            open = Some(block);
            continue;
        }
        let encoded = contexts.rewrite(block.stream, &block.fragments)?;
        server.write_all(&block.frames(&encoded)).await?;
    }
    if open.is_some() {
        return Err(RewriteError::Truncated);
    }
    server.flush().await?;
    Ok(())
}

/// Fills `buf`; `false` when the connection ended before its first byte.
async fn read_preface<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut [u8],
) -> Result<bool, RewriteError> {
    match r.read(buf).await? {
        0 => Ok(false),
        n => read_all(r, &mut buf[n..]).await.map(|()| true),
    }
}

/// The server's end of a relayed connection: what tonic serves.
#[derive(Debug)]
pub struct ServerEnd(DuplexStream);

impl AsyncRead for ServerEnd {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for ServerEnd {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for ServerEnd {
    /// Nothing: the services behind the shim read no peer credentials.
    type ConnectInfo = ();

    fn connect_info(&self) -> Self::ConnectInfo {}
}

/// Relays one client's connection to `server` (its rewriter one way, a copy
/// the other) until either side ends it.
async fn relay(client: UnixStream, server: DuplexStream) -> Result<(), RewriteError> {
    let (client_read, mut client_write) = client.into_split();
    let (mut from_server, mut to_server) = tokio::io::split(server);
    let up = async move {
        rewrite(client_read, &mut to_server).await?;
        // The client is done sending: the server reads the end and closes.
        to_server.shutdown().await?;
        Ok::<(), RewriteError>(())
    };
    let down = async move {
        tokio::io::copy(&mut from_server, &mut client_write).await?;
        client_write.shutdown().await
    };
    tokio::pin!(up, down);
    tokio::select! {
        r = &mut up => {
            r?;
            let _ = down.await;
        }
        // The server closed the connection (or the client stopped reading):
        // what the client still sends has nowhere to go.
        _ = &mut down => {}
    }
    Ok(())
}

/// The connections `listener` accepts, each relayed through the shim to the
/// server that takes them (tonic's `serve_with_incoming_shutdown`); a
/// connection closed for what its client sent is logged with `socket`.
/// Polled inside a tokio runtime (each relay is a task).
pub fn incoming(
    listener: UnixListener,
    socket: PathBuf,
    log: fn(&str),
) -> impl Stream<Item = io::Result<ServerEnd>> {
    UnixListenerStream::new(listener).map(move |accepted| {
        accepted.map(|client| {
            let (server_end, relay_end) = tokio::io::duplex(DUPLEX_BUFFER);
            let socket = socket.clone();
            tokio::spawn(async move {
                match relay(client, relay_end).await {
                    Ok(()) | Err(RewriteError::Io(_)) => {}
                    Err(e) => log(&format!(
                        "{}: closed a client's connection: {e}",
                        socket.display()
                    )),
                }
            });
            ServerEnd(server_end)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame, by hand (RFC 9113 §4.1).
    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let n = payload.len();
        let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// A frame of the output: (type, flags, stream, payload).
    type Frame = (u8, u8, u32, Vec<u8>);

    /// The frames of `bytes`, after the preface.
    fn frames(bytes: &[u8]) -> Vec<Frame> {
        assert_eq!(&bytes[..24], PREFACE);
        let mut rest = &bytes[24..];
        let mut out = Vec::new();
        while !rest.is_empty() {
            let n = usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
            let stream = u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]);
            out.push((rest[3], rest[4], stream, rest[9..9 + n].to_vec()));
            rest = &rest[9 + n..];
        }
        out
    }

    fn run(input: &[u8]) -> Result<Vec<u8>, RewriteError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut out = Vec::new();
        rt.block_on(rewrite(input, &mut out))?;
        Ok(out)
    }

    fn owned(list: &[(&str, &str)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        list.iter()
            .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    fn request(authority: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
        owned(&[
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/pluginregistration.Registration/GetInfo"),
            (":authority", authority),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ])
    }

    fn with_authority(list: &[(Vec<u8>, Vec<u8>)], authority: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
        list.iter()
            .map(|(n, v)| {
                let v = if n == b":authority" {
                    authority.as_bytes().to_vec()
                } else {
                    v.clone()
                };
                (n.clone(), v)
            })
            .collect()
    }

    fn encode(e: &mut Encoder<'static>, list: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
        e.encode(list.iter().map(|(n, v)| (&n[..], &v[..])))
    }

    /// The preface and `list` in stream 1's HEADERS frame, encoded by a
    /// fresh encoder.
    fn opening(list: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
        let mut input = PREFACE.to_vec();
        input.extend(frame(
            HEADERS,
            END_HEADERS,
            1,
            &encode(&mut Encoder::new(), list),
        ));
        input
    }

    const SETTINGS: u8 = 0x4;
    const DATA: u8 = 0x0;

    /// A client's SETTINGS (ENABLE_PUSH 0, INITIAL_WINDOW_SIZE 65535).
    fn settings() -> Vec<u8> {
        frame(SETTINGS, 0, 0, &[0, 2, 0, 0, 0, 0, 0, 4, 0, 0, 0xff, 0xff])
    }

    /// A gRPC message of no bytes, uncompressed.
    fn empty_message() -> Vec<u8> {
        frame(DATA, END_STREAM, 1, &[0, 0, 0, 0, 0])
    }

    /// Decodes the header blocks of `out`'s frames in order with one
    /// decoder (as the server does), checking the framing; returns the
    /// non-header frames and the header lists with their HEADERS flags.
    #[allow(clippy::type_complexity)]
    fn split(out: &[u8]) -> (Vec<Frame>, Vec<(u32, u8, Vec<(Vec<u8>, Vec<u8>)>)>) {
        let mut decoder = Decoder::new();
        let mut other = Vec::new();
        let mut lists = Vec::new();
        let mut open: Option<(u32, u8, Vec<u8>)> = None;
        for (kind, flags, stream, payload) in frames(out) {
            assert!(payload.len() <= MAX_FRAME);
            match kind {
                HEADERS => {
                    assert!(open.is_none());
                    assert_eq!(flags & PADDED, 0, "no padding is sent");
                    let skip = if flags & PRIORITY != 0 { 5 } else { 0 };
                    open = Some((stream, flags, payload[skip..].to_vec()));
                }
                CONTINUATION => {
                    let (s, _, block) = open.as_mut().expect("a block is open");
                    assert_eq!(*s, stream);
                    block.extend_from_slice(&payload);
                }
                _ => {
                    assert!(open.is_none(), "a frame inside a header block");
                    other.push((kind, flags, stream, payload));
                    continue;
                }
            }
            if flags & END_HEADERS != 0 {
                let (s, f, block) = open.take().unwrap();
                lists.push((s, f, decoder.decode(&block).unwrap()));
            }
        }
        assert!(open.is_none());
        (other, lists)
    }

    #[test]
    fn a_percent_encoded_authority_becomes_localhost_and_the_rest_passes_unchanged() {
        let mut e = Encoder::new();
        let sent = request("%2Ftmp%2Fx.sock");
        let block = encode(&mut e, &sent);
        let mut input = PREFACE.to_vec();
        input.extend(settings());
        input.extend(frame(HEADERS, END_HEADERS, 1, &block));
        input.extend(empty_message());
        input.extend(frame(SETTINGS, 0x1, 0, &[])); // an ACK
        let out = run(&input).unwrap();
        let (other, lists) = split(&out);
        assert_eq!(
            other,
            [
                (SETTINGS, 0, 0, settings()[9..].to_vec()),
                (DATA, END_STREAM, 1, vec![0; 5]),
                (SETTINGS, 0x1, 0, vec![]),
            ]
        );
        assert_eq!(
            lists,
            [(1, END_HEADERS, with_authority(&sent, "localhost"))]
        );
        // Byte for byte around the header block.
        let settings_len = settings().len();
        assert_eq!(out[..24 + settings_len], input[..24 + settings_len]);
        let tail = empty_message().len() + 9;
        assert_eq!(out[out.len() - tail..], input[input.len() - tail..]);
    }

    #[test]
    fn valid_authorities_are_left_alone() {
        for authority in ["localhost", "example:80", "[::1]:50051", "gpu.vp2p.io"] {
            let sent = request(authority);
            let input = opening(&sent);
            let (_, lists) = split(&run(&input).unwrap());
            assert_eq!(lists, [(1, END_HEADERS, sent)], "{authority}");
        }
    }

    /// RFC 7541 §5.2: a string literal without Huffman coding of `s`
    /// (shorter than 127 bytes).
    fn literal(s: &str) -> Vec<u8> {
        assert!(s.len() < 127);
        let mut v = vec![s.len() as u8];
        v.extend_from_slice(s.as_bytes());
        v
    }

    /// A request's header block written by hand (RFC 7541 §6.1, §6.2 and
    /// Appendix A's static table), `:authority` literal with incremental
    /// indexing (§6.2.1) so the next block can refer to it.
    fn by_hand(authority: &str) -> Vec<u8> {
        let mut b = vec![0x83, 0x86]; // :method POST (3), :scheme http (6)
        b.push(0x04); // §6.2.2: without indexing, name :path (4)
        b.extend(literal("/pluginregistration.Registration/GetInfo"));
        b.push(0x41); // §6.2.1: with incremental indexing, name :authority (1)
        b.extend(literal(authority));
        b.push(0x0f); // §6.2.2, name content-type (31 = 15 + 16)
        b.push(0x10);
        b.extend(literal("application/grpc"));
        b.push(0x10); // §6.2.3: never indexed, new name
        b.extend(literal("te"));
        b.extend(literal("trailers"));
        b
    }

    #[test]
    fn a_block_written_by_hand_decodes_with_the_clients_dynamic_table() {
        let authority = "%2Fvar%2Flib%2Fkubelet%2Fplugins_registry%2Fgpu.vp2p.io-reg.sock";
        let mut input = PREFACE.to_vec();
        input.extend(frame(HEADERS, END_HEADERS, 1, &by_hand(authority)));
        // The second request refers to the first's :authority by its
        // dynamic table index (62: §2.3.3, the first after the static 61).
        let second = [0x83, 0x86, 0x84, 0xbe];
        input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 3, &second));
        let (other, lists) = split(&run(&input).unwrap());
        assert!(other.is_empty());
        let first = owned(&[
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/pluginregistration.Registration/GetInfo"),
            (":authority", "localhost"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]);
        let second = owned(&[
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/"),
            (":authority", "localhost"),
        ]);
        assert_eq!(
            lists,
            [
                (1, END_HEADERS, first),
                (3, END_HEADERS | END_STREAM, second)
            ]
        );
    }

    #[test]
    fn continuation_frames_padding_and_priority_are_joined_and_sent_as_one_block() {
        let mut e = Encoder::new();
        let mut sent = request("%2Ftmp%2Fx.sock");
        sent.push((b"x-big".to_vec(), vec![b'a'; 40_000]));
        let block = encode(&mut e, &sent);
        assert!(block.len() > 2 * MAX_FRAME);
        // HEADERS padded and with PRIORITY, then two CONTINUATION frames.
        let (a, rest) = block.split_at(100);
        let (b, c) = rest.split_at(30_000);
        let mut payload = vec![7u8]; // pad length
        payload.extend([0x80, 0, 0, 3, 15]); // exclusive, depends on 3, weight 15
        payload.extend_from_slice(a);
        payload.extend([0; 7]);
        let mut input = PREFACE.to_vec();
        input.extend(frame(HEADERS, PADDED | PRIORITY | END_STREAM, 5, &payload));
        input.extend(frame(CONTINUATION, 0, 5, b));
        input.extend(frame(CONTINUATION, END_HEADERS, 5, c));
        let out = run(&input).unwrap();
        let raw = frames(&out);
        assert_eq!(raw[0].0, HEADERS);
        assert_eq!(raw[0].1, PRIORITY | END_STREAM);
        assert_eq!(raw[0].3[..5], [0x80, 0, 0, 3, 15]);
        assert_eq!(raw[0].3.len(), MAX_FRAME);
        assert!(raw[1..].iter().all(|f| f.0 == CONTINUATION && f.2 == 5));
        assert_eq!(raw.last().unwrap().1, END_HEADERS);
        let (other, lists) = split(&out);
        assert!(other.is_empty());
        assert_eq!(
            lists,
            [(5, PRIORITY | END_STREAM, with_authority(&sent, "localhost"))]
        );
    }

    #[test]
    fn a_small_padded_block_is_one_headers_frame_without_padding() {
        let sent = request("%2Ftmp%2Fx.sock");
        let block = encode(&mut Encoder::new(), &sent);
        let mut payload = vec![3u8];
        payload.extend(&block);
        payload.extend([0; 3]);
        let mut input = PREFACE.to_vec();
        input.extend(frame(HEADERS, PADDED | END_HEADERS, 1, &payload));
        let (_, lists) = split(&run(&input).unwrap());
        assert_eq!(
            lists,
            [(1, END_HEADERS, with_authority(&sent, "localhost"))]
        );
    }

    #[test]
    fn what_the_shim_cannot_follow_closes_the_connection() {
        let with = |frames: &[Vec<u8>]| {
            let mut input = PREFACE.to_vec();
            for f in frames {
                input.extend(f);
            }
            run(&input).unwrap_err().to_string()
        };
        let block = encode(&mut Encoder::new(), &request("x"));
        // Padding longer than the payload.
        assert!(with(&[frame(HEADERS, PADDED | END_HEADERS, 1, &[9, 1, 2])]).contains("padding"));
        // PRIORITY without its fields.
        assert!(with(&[frame(HEADERS, PRIORITY | END_HEADERS, 1, &[1, 2])]).contains("PRIORITY"));
        // Another frame inside a header block.
        let e = with(&[frame(HEADERS, 0, 1, &block), settings()]);
        assert!(e.contains("inside the header block of stream 1"), "{e}");
        let e = with(&[
            frame(HEADERS, 0, 1, &block),
            frame(CONTINUATION, END_HEADERS, 3, &[]),
        ]);
        assert!(e.contains("inside the header block"), "{e}");
        assert!(with(&[frame(CONTINUATION, END_HEADERS, 1, &block)]).contains("outside"));
        assert!(with(&[frame(PUSH_PROMISE, END_HEADERS, 1, &block)]).contains("PUSH_PROMISE"));
        // An index past the tables (RFC 7541 §2.3.3).
        let e = with(&[frame(HEADERS, END_HEADERS, 1, &[0xff, 0x7f])]);
        assert!(e.contains("does not decode"), "{e}");
        // A table size over the server's (§4.2, §6.3): 4097.
        let e = with(&[frame(HEADERS, END_HEADERS, 1, &[0x3f, 0xe2, 0x1f, 0x82])]);
        assert!(e.contains("does not decode"), "{e}");
        // A block over the bound, in one frame or joined.
        let big = vec![0; MAX_BLOCK + 1];
        assert!(with(&[frame(HEADERS, END_HEADERS, 1, &big)]).contains("over"));
        let half = vec![0; MAX_BLOCK / 2 + 1];
        let e = with(&[
            frame(HEADERS, 0, 1, &half),
            frame(CONTINUATION, 0, 1, &half),
        ]);
        assert!(e.contains("over 1048576 bytes"), "{e}");
        // A small block that refers to a big entry again and again.
        let mut b = vec![0x40];
        b.extend(literal("x"));
        b.extend([0x7f, 0xa1, 0x1e]); // a 4000-byte value (127 + 33 + 30 * 128)
        b.extend(vec![b'v'; 4000]);
        b.extend(vec![0xbe; 300]);
        let e = with(&[frame(HEADERS, END_HEADERS, 1, &b)]);
        assert!(e.contains("decodes to over"), "{e}");
        // Not HTTP/2.
        let e = run(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap_err();
        assert!(matches!(e, RewriteError::Preface), "{e}");
        // Cut inside a frame.
        let mut cut = PREFACE.to_vec();
        cut.extend(&empty_message()[..11]);
        assert!(matches!(run(&cut).unwrap_err(), RewriteError::Truncated));
        let mut cut = PREFACE.to_vec();
        cut.extend(frame(HEADERS, 0, 1, &block));
        assert!(matches!(run(&cut).unwrap_err(), RewriteError::Truncated));
    }

    #[test]
    fn an_empty_connection_ends_quietly() {
        assert_eq!(run(b"").unwrap(), b"");
        assert_eq!(run(PREFACE).unwrap(), PREFACE);
    }

    #[test]
    fn the_validity_check_is_h2s() {
        assert!(is_valid_authority(b"localhost"));
        assert!(is_valid_authority(b"example:80"));
        assert!(!is_valid_authority(b"%2Ftmp%2Fx.sock"));
        assert!(!is_valid_authority(b"/tmp/x.sock"));
        assert!(!is_valid_authority(b""));
    }

    static LOGGED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

    #[test]
    fn connections_are_relayed_both_ways_and_a_refusal_is_logged_with_the_socket() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("reg.sock");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        rt.block_on(async {
            let listener = UnixListener::bind(&path).unwrap();
            let mut accepted = Box::pin(incoming(listener, path.clone(), |m| {
                LOGGED.lock().unwrap().push(m.to_string())
            }));
            // The server's side: reads to the end, answers, closes.
            let server = async {
                let mut end = accepted.next().await.unwrap().unwrap();
                let mut got = Vec::new();
                end.read_to_end(&mut got).await.unwrap();
                end.write_all(b"the server's bytes").await.unwrap();
                end.shutdown().await.unwrap();
                drop(end);
                (got, accepted)
            };
            let sent = request("%2Ftmp%2Fx.sock");
            let mut input = opening(&sent);
            input.extend(empty_message());
            let client = async {
                let mut c = UnixStream::connect(&path).await.unwrap();
                c.write_all(&input).await.unwrap();
                c.shutdown().await.unwrap();
                let mut back = Vec::new();
                c.read_to_end(&mut back).await.unwrap();
                back
            };
            let ((got, mut accepted), back) = tokio::join!(server, client);
            assert_eq!(back, b"the server's bytes");
            let (other, lists) = split(&got);
            assert_eq!(
                lists,
                [(1, END_HEADERS, with_authority(&sent, "localhost"))]
            );
            assert_eq!(other, [(DATA, END_STREAM, 1, vec![0; 5])]);

            // A PUSH_PROMISE: the connection is closed, and logged.
            let server = async { accepted.next().await.unwrap().unwrap() };
            let client = async {
                let mut c = UnixStream::connect(&path).await.unwrap();
                let mut bad = PREFACE.to_vec();
                bad.extend(frame(PUSH_PROMISE, END_HEADERS, 1, &[0, 0, 0, 2, 0x82]));
                c.write_all(&bad).await.unwrap();
                let mut back = Vec::new();
                let _ = c.read_to_end(&mut back).await;
                back
            };
            let (_end, back) = tokio::join!(server, client);
            assert!(back.is_empty());
        });
        let logged = LOGGED.lock().unwrap().clone();
        assert_eq!(
            logged,
            [format!(
                "{}: closed a client's connection: a PUSH_PROMISE frame from the client",
                path.display()
            )]
        );
    }

    #[test]
    fn many_blocks_keep_both_contexts_in_step() {
        let mut e = Encoder::new();
        let mut input = PREFACE.to_vec();
        let mut want = Vec::new();
        for i in 0..200u32 {
            let mut list = request(if i % 2 == 0 { "%2Fa" } else { "localhost" });
            list.push((
                format!("x-n{}", i % 7).into_bytes(),
                i.to_string().into_bytes(),
            ));
            let stream = 2 * i + 1;
            input.extend(frame(HEADERS, END_HEADERS, stream, &encode(&mut e, &list)));
            want.push((stream, END_HEADERS, with_authority(&list, "localhost")));
        }
        let (_, lists) = split(&run(&input).unwrap());
        assert_eq!(lists, want);
    }
}
