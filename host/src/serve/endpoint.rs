//! A served GPU's socket and threads.
//!
//! - The socket is created with mode 0600, or the [`SocketMode`] asked for
//!   (0660 lets the VMM's group connect; the host unit does that), bound in a
//!   private 0700 staging directory and then linked into place, so it is never
//!   reachable with looser permissions. A stale socket (nobody listening) is removed first; a live
//!   one, or a path that is not a socket, is refused.
//! - One client at a time: while one is served, another is refused. Its first
//!   message (waited for up to a second) is answered with EBUSY and the
//!   connection is closed, so a VMM fails at once with a clear error instead
//!   of hanging.
//! - A socket path longer than a unix socket address holds (107 bytes and
//!   the NUL) is refused: no client could connect to it. The private
//!   directories below are bound through the directory's descriptor when the
//!   served socket's directory leaves too little room for their names.
//! - Shutdown never goes through the socket's path: the listener thread waits
//!   on the listening socket and an eventfd together, and [`ServeHandle`]
//!   wakes it through the eventfd; the client is disconnected with
//!   `shutdown(2)` on its connection. The socket is removed however the
//!   handle ends (shutdown, drop, a start that failed half way).
//! - Threads: the listener thread accepts; a session thread per client frames
//!   and checks messages ([`super::session`]); the protocol thread runs
//!   `vfio_user::Server`. For each client the listener creates a private
//!   listening socket (bound in a fresh 0700 directory, connected to at once,
//!   then unlinked: nothing else can reach it and no file outlives the setup),
//!   keeps the connection for the session and hands the listener to the
//!   protocol thread. Between clients the device is reset.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use vmm_sys_util::eventfd::EventFd;

use super::backend::GpuBackend;
use super::device::ServedGpu;
use super::error::ServeError;
use super::events::{EventSink, ServeEvent};
use super::session;
pub use super::socket::{bind_socket, SocketMode};
use super::socket::{private_pair, remove_if_ours, socket_parent};
use super::wire::{Header, HEADER_LEN};

/// How long a refused client gets to send its first message.
const REFUSE_WAIT: Duration = Duration::from_secs(1);

/// How long the listener pauses after `accept` fails (no descriptors left,
/// say), so a failure that persists does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// A GPU being served; dropping it stops the server and removes the socket.
#[derive(Debug)]
pub struct ServeHandle {
    socket: PathBuf,
    inode: (u64, u64),
    stop: Arc<AtomicBool>,
    wake: EventFd,
    session: Arc<Mutex<Option<UnixStream>>>,
    threads: Vec<JoinHandle<()>>,
}

/// Starts serving `gpu` on `socket` (mode 0600); events go to `events`.
pub fn start<B: GpuBackend + 'static>(
    gpu: ServedGpu<B>,
    socket: &Path,
    events: EventSink,
) -> Result<ServeHandle, ServeError> {
    start_with_mode(gpu, socket, SocketMode::OWNER_ONLY, events)
}

/// [`start`] with the socket's permission bits chosen.
pub fn start_with_mode<B: GpuBackend + 'static>(
    mut gpu: ServedGpu<B>,
    socket: &Path,
    mode: SocketMode,
    events: EventSink,
) -> Result<ServeHandle, ServeError> {
    gpu.set_events(events.clone());
    let (listener, inode) = bind_socket(socket, mode)?;
    // From here on a failure removes the socket again.
    let failed = |source: io::Error| {
        remove_if_ours(socket, inode);
        ServeError::Socket {
            path: socket.to_path_buf(),
            source,
        }
    };
    listener.set_nonblocking(true).map_err(failed)?;
    let wake = EventFd::new(libc::EFD_CLOEXEC).map_err(failed)?;
    let listener_wake = wake.try_clone().map_err(failed)?;
    let shape = gpu.shape();
    let stop = Arc::new(AtomicBool::new(false));
    let session_slot: Arc<Mutex<Option<UnixStream>>> = Arc::new(Mutex::new(None));
    let (to_protocol, listeners) = mpsc::channel::<UnixListener>();
    let parent = socket_parent(socket);

    let protocol = {
        let events = events.clone();
        std::thread::Builder::new()
            .name("vp2p-protocol".into())
            .spawn(move || protocol_loop(listeners, gpu, &events))
            .map_err(failed)?
    };
    let accept = {
        let stop = stop.clone();
        let slot = session_slot.clone();
        std::thread::Builder::new()
            .name("vp2p-listener".into())
            .spawn(move || {
                let sessions = Sessions {
                    parent,
                    shape,
                    to_protocol,
                    slot,
                    events,
                };
                accept_loop(listener, &listener_wake, &sessions, &stop)
            })
            .map_err(failed)?
    };
    Ok(ServeHandle {
        socket: socket.to_path_buf(),
        inode,
        stop,
        wake,
        session: session_slot,
        threads: vec![accept, protocol],
    })
}

/// Serves one client per listener it is handed, resetting the device after each.
fn protocol_loop<B: GpuBackend>(
    listeners: mpsc::Receiver<UnixListener>,
    mut gpu: ServedGpu<B>,
    events: &EventSink,
) {
    let (irqs, regions) = (gpu.server_irqs(), gpu.server_regions());
    for listener in listeners {
        let server = vfio_user::Server::from_owned_fd(
            OwnedFd::from(listener),
            true,
            irqs.clone(),
            regions.clone(),
        );
        let run = catch_unwind(AssertUnwindSafe(|| server.run(&mut gpu)));
        match run {
            Ok(Ok(())) => {}
            Ok(Err(e)) => events(ServeEvent::Internal {
                why: format!("vfio-user server: {e}"),
            }),
            Err(_) => events(ServeEvent::Internal {
                why: "vfio-user server panicked; the device is reset".into(),
            }),
        }
        if let Err(e) = gpu.release() {
            events(ServeEvent::Internal {
                why: format!("reset between clients: {e}"),
            });
        }
    }
}

/// What the listener thread needs to start a session.
struct Sessions {
    parent: PathBuf,
    shape: super::device::DeviceShape,
    to_protocol: mpsc::Sender<UnixListener>,
    slot: Arc<Mutex<Option<UnixStream>>>,
    events: EventSink,
}

/// What woke the listener.
enum Woken {
    /// A client is waiting to be accepted (or `accept` failed).
    Client(io::Result<UnixStream>),
    /// The eventfd was written: stop.
    Stop,
}

/// Waits for a client on the (non-blocking) `listener` or a word on `wake`.
fn next_client(listener: &UnixListener, wake: &EventFd, stop: &AtomicBool) -> Woken {
    loop {
        if stop.load(Ordering::SeqCst) {
            return Woken::Stop;
        }
        let mut fds = [
            libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `fds` is an array of two initialised pollfd structs that
        // outlives the call; both descriptors are open (owned by the callers).
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Woken::Client(Err(e));
        }
        if fds[1].revents != 0 || stop.load(Ordering::SeqCst) {
            return Woken::Stop;
        }
        if fds[0].revents == 0 {
            continue;
        }
        match listener.accept() {
            // The accepted connection does not inherit O_NONBLOCK (accept4
            // without SOCK_NONBLOCK): sessions read it blocking.
            Ok((client, _)) => return Woken::Client(Ok(client)),
            // The client left before it was accepted.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Woken::Client(Err(e)),
        }
    }
}

fn accept_loop(listener: UnixListener, wake: &EventFd, sessions: &Sessions, stop: &AtomicBool) {
    let events = &sessions.events;
    let busy = Arc::new(AtomicBool::new(false));
    let mut session: Option<JoinHandle<()>> = None;
    loop {
        let client = match next_client(&listener, wake, stop) {
            Woken::Stop => break,
            Woken::Client(Ok(c)) => c,
            Woken::Client(Err(e)) => {
                events(ServeEvent::Internal {
                    why: format!("accept: {e}"),
                });
                std::thread::sleep(ACCEPT_RETRY);
                continue;
            }
        };
        if busy.load(Ordering::SeqCst) {
            refuse(client);
            events(ServeEvent::Refused);
            continue;
        }
        if let Some(previous) = session.take() {
            let _ = previous.join();
        }
        let server = match private_pair(&sessions.parent) {
            Ok((listener, stream)) => {
                if sessions.to_protocol.send(listener).is_err() {
                    events(ServeEvent::Internal {
                        why: "the protocol thread is gone".into(),
                    });
                    break;
                }
                stream
            }
            Err(e) => {
                events(ServeEvent::Internal {
                    why: format!("creating the protocol connection: {e}"),
                });
                let busy_reply = Header {
                    command: super::wire::cmd::VERSION,
                    ..Header::default()
                }
                .error_reply(libc::EIO);
                let _ = (&client).write_all(&busy_reply.encode());
                continue;
            }
        };
        busy.store(true, Ordering::SeqCst);
        if let (Ok(mut s), Ok(clone)) = (sessions.slot.lock(), client.try_clone()) {
            *s = Some(clone);
        }
        let free = SessionEnd {
            busy: busy.clone(),
            slot: sessions.slot.clone(),
        };
        let (shape, s_events) = (sessions.shape, events.clone());
        let spawned = std::thread::Builder::new()
            .name("vp2p-session".into())
            .spawn(move || {
                // `free` marks the socket free for the next client even if the session panics.
                s_events(ServeEvent::Connected);
                let messages = session::run(&client, server, &shape, &s_events);
                drop(free);
                s_events(ServeEvent::Disconnected { messages });
            });
        match spawned {
            Ok(h) => session = Some(h),
            Err(e) => events(ServeEvent::Internal {
                why: format!("starting a session thread: {e}"),
            }),
        }
    }
    // A client accepted while the handle was stopping: disconnect it too.
    if let Ok(mut s) = sessions.slot.lock() {
        if let Some(c) = s.take() {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }
    if let Some(s) = session {
        let _ = s.join();
    }
}

/// Marks the socket free again when a session thread ends, however it ends.
struct SessionEnd {
    busy: Arc<AtomicBool>,
    slot: Arc<Mutex<Option<UnixStream>>>,
}

impl Drop for SessionEnd {
    fn drop(&mut self) {
        if let Ok(mut s) = self.slot.lock() {
            *s = None;
        }
        self.busy.store(false, Ordering::SeqCst);
    }
}

/// Answers the first message of a client that came while another is served
/// with EBUSY, then closes. The message is read whole first (up to the size
/// limit), so closing does not reset the connection under the reply.
fn refuse(mut client: UnixStream) {
    let _ = client.set_read_timeout(Some(REFUSE_WAIT));
    let mut raw = [0u8; HEADER_LEN];
    let header = match client.read_exact(&mut raw) {
        Ok(()) => {
            let h = Header::parse(&raw);
            let body =
                u64::from(h.size.min(super::wire::MAX_MESSAGE)).saturating_sub(HEADER_LEN as u64);
            let _ = io::copy(&mut (&client).take(body), &mut io::sink());
            h
        }
        Err(_) => Header {
            command: super::wire::cmd::VERSION,
            ..Header::default()
        },
    };
    let _ = client.write_all(&header.error_reply(libc::EBUSY).encode());
    let _ = client.shutdown(std::net::Shutdown::Write);
}

impl ServeHandle {
    /// The socket path served; removed when the server stops.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Blocks until the server stops (it runs until [`ServeHandle::shutdown`]).
    pub fn wait(mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }

    /// Stops the server: disconnects the client, ends the threads, removes the socket.
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    /// Asks the server to stop without waiting for it: the client is
    /// disconnected, the listener woken, the socket removed. Many servers
    /// stop together when each is asked first and then [`ServeHandle::shutdown`]
    /// waits for each.
    pub fn stop(&mut self) {
        if self.threads.is_empty() || self.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Ok(mut s) = self.session.lock() {
            if let Some(c) = s.take() {
                let _ = c.shutdown(std::net::Shutdown::Both);
            }
        }
        // Wake the listener through its eventfd (never through the socket's
        // path); when it ends, the protocol thread's channel closes and it
        // ends too.
        let _ = self.wake.write(1);
        // Gone before the threads are waited for: no new client finds it.
        remove_if_ours(&self.socket, self.inode);
    }

    fn stop_now(&mut self) {
        self.stop();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for ServeHandle {
    fn drop(&mut self) {
        self.stop_now();
    }
}
