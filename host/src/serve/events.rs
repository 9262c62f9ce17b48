//! What a running server reports: connections, refusals, malformed messages,
//! guest writes the overlay dropped. The library never prints; the caller
//! gives each server an [`EventSink`] and decides what to do with them.

use std::fmt;
use std::sync::Arc;

/// Receives a server's events, from its threads.
pub type EventSink = Arc<dyn Fn(ServeEvent) + Send + Sync>;

/// A sink that drops everything.
pub fn discard() -> EventSink {
    Arc::new(|_| {})
}

/// One thing that happened on a GPU's socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServeEvent {
    /// A client connected and is being served.
    Connected,
    /// The client went away after `messages` messages.
    Disconnected {
        /// Whole messages read from the client, rejected ones included.
        messages: u64,
    },
    /// A second client was turned away (EBUSY) while one is served.
    Refused,
    /// A message was answered with an error (the connection stays up).
    Rejected {
        /// Command number of the message ([`crate::serve::wire::cmd`]).
        command: u16,
        /// The errno of the error reply.
        errno: i32,
        /// What was wrong with the message.
        why: String,
    },
    /// The connection was closed: its byte stream can no longer be framed
    /// (truncated header or body, impossible size), or it failed.
    Closed {
        /// Why the stream broke: truncated header or body, impossible size, or a read error.
        why: String,
    },
    /// A guest config write touched bytes the overlay owns; those bits were
    /// dropped (never reached the device, read back unchanged).
    DroppedWrite {
        /// Config offset the write started at.
        offset: u64,
        /// Bytes the guest wrote (the whole write, not only the dropped ones).
        len: usize,
    },
    /// The client mapped guest memory for DMA; `shared` when a descriptor came
    /// with it (the guest RAM is shareable, e.g. memory-backend-memfd,share=on).
    DmaMap {
        /// Start of the range in the device's (I/O virtual) address space.
        iova: u64,
        /// Bytes mapped.
        size: u64,
        /// A descriptor came with the request: the guest RAM is shareable.
        shared: bool,
    },
    /// The client unmapped guest memory.
    DmaUnmap {
        /// Start of the range unmapped.
        iova: u64,
        /// Bytes unmapped.
        size: u64,
        /// `VFIO_DMA_UNMAP_FLAG_ALL`: every mapping goes, whatever `iova` and `size` say.
        all: bool,
    },
    /// The device was reset (between clients, or at the client's request).
    Reset,
    /// The protocol thread hit an error of its own.
    Internal {
        /// What failed: relaying to the protocol thread, the vfio-user server, a reset
        /// between clients, accepting a client.
        why: String,
    },
}

impl ServeEvent {
    /// Events every boot produces in numbers (DMA maps of guest RAM and of
    /// other devices' BARs, resets): worth showing only when asked for.
    pub fn is_routine(&self) -> bool {
        matches!(
            self,
            ServeEvent::DmaMap { .. } | ServeEvent::DmaUnmap { .. } | ServeEvent::Reset
        )
    }
}

impl fmt::Display for ServeEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeEvent::Connected => write!(f, "client connected"),
            ServeEvent::Disconnected { messages } => {
                write!(f, "client disconnected after {messages} message(s)")
            }
            ServeEvent::Refused => {
                write!(f, "refused a second client (EBUSY): one client at a time")
            }
            ServeEvent::Rejected {
                command,
                errno,
                why,
            } => write!(
                f,
                "rejected command {command} with {}: {why}",
                errno_name(*errno)
            ),
            ServeEvent::Closed { why } => write!(f, "closed the connection: {why}"),
            ServeEvent::DroppedWrite { offset, len } => write!(
                f,
                "dropped a guest write of {len} byte(s) at config {offset:#x}: the P2P \
                 capability and its next pointer are read-only"
            ),
            ServeEvent::DmaMap { iova, size, shared } => write!(
                f,
                "DMA map {iova:#x}..{:#x} ({})",
                iova.saturating_add(*size),
                if *shared {
                    "with a descriptor: shared guest RAM"
                } else {
                    "without a descriptor: guest RAM not shared"
                }
            ),
            ServeEvent::DmaUnmap { iova, size, all } => {
                if *all {
                    write!(f, "DMA unmap all")
                } else {
                    write!(f, "DMA unmap {iova:#x}..{:#x}", iova.saturating_add(*size))
                }
            }
            ServeEvent::Reset => write!(f, "device reset"),
            ServeEvent::Internal { why } => write!(f, "internal error: {why}"),
        }
    }
}

/// "EINVAL (22)" and the like, for the errnos the server answers with.
pub fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::EINVAL => "EINVAL",
        libc::ENOSYS => "ENOSYS",
        libc::ENOTSUP => "ENOTSUP",
        libc::EBUSY => "EBUSY",
        libc::EMSGSIZE => "EMSGSIZE",
        libc::E2BIG => "E2BIG",
        libc::EIO => "EIO",
        libc::EPERM => "EPERM",
        libc::EFAULT => "EFAULT",
        libc::ETIMEDOUT => "ETIMEDOUT",
        _ => "errno",
    };
    format!("{name} ({errno})")
}
