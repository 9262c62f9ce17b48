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

use tokio::io::{
    AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream, ReadBuf,
};
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::wrappers::UnixListenerStream;
use tokio_stream::{Stream, StreamExt};

mod frames;
#[cfg(test)]
mod tests;

pub use frames::is_valid_authority;
use frames::{Block, Contexts, FrameHead, CONTINUATION, END_HEADERS, HEADERS, PUSH_PROMISE};

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
