//! One client's connection: every message is framed and checked here
//! ([`super::wire`]) and only then relayed to the protocol thread running
//! `vfio_user::Server`; its replies (with any descriptors) go back to the
//! client. Malformed messages are answered with an error reply and the
//! connection stays usable; a stream that can no longer be framed (truncated
//! header or body, impossible size) is answered once and closed.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use vmm_sys_util::sock_ctrl_msg::ScmSocket;

use super::device::DeviceShape;
use super::events::{EventSink, ServeEvent};
use super::wire::{self, Header, HEADER_LEN, MAX_FDS, MAX_MESSAGE};

/// How long the protocol thread may take to answer one message.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// A framed message: header, body, descriptors.
struct Message {
    header: Header,
    raw_header: [u8; HEADER_LEN],
    body: Vec<u8>,
    fds: Vec<File>,
}

/// What stopped a read.
enum ReadEnd {
    /// The peer closed between messages.
    Closed,
    /// The stream cannot be framed any more; answer `header` (when known) and close.
    Broken {
        header: Option<Header>,
        errno: i32,
        why: String,
    },
    Io(io::Error),
}

/// A raw header and the descriptors that came with it.
type RawHeader = ([u8; HEADER_LEN], Vec<File>);

/// Receives a header with the descriptors that came with it; None at end of stream.
fn recv_header(stream: &UnixStream) -> io::Result<Option<RawHeader>> {
    let mut buf = [0u8; HEADER_LEN];
    let mut raw_fds = [0 as RawFd; MAX_FDS];
    let mut iov = [libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    }];
    // SAFETY: the iovec points at `buf`, which lives across the call and may
    // hold any bytes; `raw_fds` has room for MAX_FDS descriptors.
    let (n, nfds) = unsafe { stream.recv_with_fds(&mut iov, &mut raw_fds) }
        .map_err(|e| io::Error::from_raw_os_error(e.errno()))?;
    let fds = raw_fds[..nfds]
        .iter()
        // SAFETY: the kernel just installed these descriptors for this process
        // (SCM_RIGHTS); nothing else owns them, so each File takes ownership once.
        .map(|&fd| unsafe { File::from_raw_fd(fd) })
        .collect();
    if n == 0 {
        return Ok(None);
    }
    if n < HEADER_LEN {
        let mut s = stream;
        s.read_exact(&mut buf[n..])?;
    }
    Ok(Some((buf, fds)))
}

fn read_message(stream: &UnixStream) -> Result<Message, ReadEnd> {
    let (raw_header, fds) = match recv_header(stream) {
        Ok(Some(h)) => h,
        Ok(None) => return Err(ReadEnd::Closed),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            return Err(ReadEnd::Broken {
                header: None,
                errno: libc::EINVAL,
                why: "truncated header (the stream ended inside it)".into(),
            })
        }
        Err(e) => return Err(ReadEnd::Io(e)),
    };
    let header = Header::parse(&raw_header);
    if let Err(r) = wire::check_frame(&header) {
        return Err(ReadEnd::Broken {
            header: Some(header),
            errno: r.errno,
            why: r.why,
        });
    }
    let mut body = vec![0u8; header.size as usize - HEADER_LEN];
    let mut s = stream;
    if let Err(e) = s.read_exact(&mut body) {
        return Err(if e.kind() == io::ErrorKind::UnexpectedEof {
            ReadEnd::Broken {
                header: Some(header),
                errno: libc::EINVAL,
                why: format!(
                    "truncated message: command {} announced {} bytes, the stream ended before",
                    header.command, header.size
                ),
            }
        } else {
            ReadEnd::Io(e)
        });
    }
    Ok(Message {
        header,
        raw_header,
        body,
        fds,
    })
}

/// Sends `parts` with `fds` on the first byte, then the rest of the bytes.
fn send(stream: &UnixStream, parts: &[&[u8]], fds: &[File]) -> io::Result<()> {
    let all: Vec<u8> = parts.concat();
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let sent = if raw.is_empty() {
        0
    } else {
        stream
            .send_with_fds(&[&all[..]], &raw)
            .map_err(|e| io::Error::from_raw_os_error(e.errno()))?
    };
    let mut s = stream;
    s.write_all(&all[sent..])
}

/// Serves one client until it leaves, relaying to the protocol thread over
/// `server` (a connection only this session holds). Returns the number of
/// messages handled.
pub fn run(
    client: &UnixStream,
    server: UnixStream,
    shape: &DeviceShape,
    events: &EventSink,
) -> u64 {
    let _ = server.set_read_timeout(Some(REPLY_TIMEOUT));
    let mut handled = 0;
    loop {
        let msg = match read_message(client) {
            Ok(m) => m,
            Err(ReadEnd::Closed) => break,
            Err(ReadEnd::Broken { header, errno, why }) => {
                if let Some(h) = header {
                    let _ = send(client, &[&h.error_reply(errno).encode()], &[]);
                }
                events(ServeEvent::Closed { why });
                break;
            }
            Err(ReadEnd::Io(e)) => {
                events(ServeEvent::Closed {
                    why: format!("reading: {e}"),
                });
                break;
            }
        };
        handled += 1;
        let h = msg.header;
        if let Err(r) = wire::check(&h, &msg.body, msg.fds.len(), shape) {
            events(ServeEvent::Rejected {
                command: h.command,
                errno: r.errno,
                why: r.why,
            });
            // Descriptors that came with it are closed when `msg` drops.
            if send(client, &[&h.error_reply(r.errno).encode()], &[]).is_err() {
                break;
            }
            continue;
        }
        if let Err(e) = send(&server, &[&msg.raw_header, &msg.body], &msg.fds) {
            events(ServeEvent::Internal {
                why: format!("relaying command {}: {e}", h.command),
            });
            let _ = send(client, &[&h.error_reply(libc::EIO).encode()], &[]);
            break;
        }
        if h.no_reply() {
            continue;
        }
        if let Err(why) = relay_reply(&server, client, h) {
            events(ServeEvent::Internal { why });
            let _ = send(client, &[&h.error_reply(libc::EIO).encode()], &[]);
            break;
        }
    }
    handled
}

/// Passes the protocol thread's replies to the client until the one for
/// `request` has gone (earlier ones answer no-reply messages that failed).
fn relay_reply(server: &UnixStream, client: &UnixStream, request: Header) -> Result<(), String> {
    loop {
        let (raw, fds) = match recv_header(server) {
            Ok(Some(r)) => r,
            Ok(None) => return Err("the protocol thread closed the connection".into()),
            Err(e) => {
                return Err(format!(
                    "waiting for the reply to command {}: {e}",
                    request.command
                ))
            }
        };
        let mut h = Header::parse(&raw);
        if (h.size as usize) < HEADER_LEN || h.size > MAX_MESSAGE {
            return Err(format!(
                "the protocol thread sent a reply of {} bytes",
                h.size
            ));
        }
        let mut body = vec![0u8; h.size as usize - HEADER_LEN];
        let mut s = server;
        s.read_exact(&mut body)
            .map_err(|e| format!("reading the reply to command {}: {e}", request.command))?;
        if h.is_error() && h.error == 0 {
            // vfio_user::Server sends errno 0 for errors it does not classify.
            h.error = libc::EIO as u32;
        }
        send(client, &[&h.encode(), &body], &fds)
            .map_err(|e| format!("answering the client: {e}"))?;
        if h.id == request.id && h.command == request.command {
            return Ok(());
        }
    }
}
