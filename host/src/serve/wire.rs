//! The vfio-user wire format as far as the guard needs it: the 16-byte
//! header, and the checks every message passes before `vfio_user::Server`
//! sees it.
//!
//! `vfio_user::Server` (0.1.7) trusts its peer: a VERSION message shorter than
//! its fixed part underflows a size computation and panics, capabilities
//! without a terminating NUL panic in `CString::from_vec_with_nul(..).unwrap()`,
//! a rejected REGION_WRITE or SET_IRQS leaves its payload unread so the next
//! "header" is payload, and errors it does not classify go back with errno 0
//! (which QEMU reads as success). [`check`] accepts only messages whose size
//! is exactly what the command needs and whose indexes, ranges and descriptor
//! counts fit the device, so the crate only ever sees messages it handles
//! correctly; everything else is answered here with a proper errno.

use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_MASK, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_ACTION_TYPE_MASK,
    VFIO_IRQ_SET_ACTION_UNMASK, VFIO_IRQ_SET_DATA_BOOL, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE, VFIO_IRQ_SET_DATA_TYPE_MASK,
};

use super::device::DeviceShape;

/// Bytes in a message header.
pub const HEADER_LEN: usize = 16;
/// Largest REGION_READ/REGION_WRITE payload: the `max_data_xfer_size` that
/// `vfio_user::Server` announces.
pub const MAX_DATA_XFER: u32 = 1 << 20;
/// Largest message accepted: a REGION_WRITE of [`MAX_DATA_XFER`] bytes.
pub const MAX_MESSAGE: u32 = (HEADER_LEN + 16) as u32 + MAX_DATA_XFER;
/// Most descriptors one message may carry.
pub const MAX_FDS: usize = 16;

/// Header flags: the message type (bits 3:0), no-reply, error.
pub const TYPE_MASK: u32 = 0xf;
/// `flags` message type (bits 3:0) of a command: a request from the client.
pub const TYPE_COMMAND: u32 = 0;
/// `flags` message type of a reply; it repeats the command's `id` and `command`.
pub const TYPE_REPLY: u32 = 1;
/// `flags` bit 4, No_reply: the sender of the command wants no reply to it.
pub const FLAG_NO_REPLY: u32 = 1 << 4;
/// `flags` bit 5, Error: the reply carries an errno in `error` instead of a payload.
pub const FLAG_ERROR: u32 = 1 << 5;

/// Command numbers.
pub mod cmd {
    /// `VFIO_USER_VERSION`: negotiates the protocol version and the JSON capabilities.
    pub const VERSION: u16 = 1;
    /// `VFIO_USER_DMA_MAP`: guest memory the device may reach, with its fd when shared.
    pub const DMA_MAP: u16 = 2;
    /// `VFIO_USER_DMA_UNMAP`: removes a DMA mapping, or all of them.
    pub const DMA_UNMAP: u16 = 3;
    /// `VFIO_USER_DEVICE_GET_INFO`: device flags and its numbers of regions and IRQs.
    pub const DEVICE_GET_INFO: u16 = 4;
    /// `VFIO_USER_DEVICE_GET_REGION_INFO`: one region's size, flags and mmap fd.
    pub const DEVICE_GET_REGION_INFO: u16 = 5;
    /// `VFIO_USER_DEVICE_GET_REGION_IO_FDS`: ioeventfds of a region; refused by [`super::check`].
    pub const DEVICE_GET_REGION_IO_FDS: u16 = 6;
    /// `VFIO_USER_DEVICE_GET_IRQ_INFO`: vector count and flags of one interrupt index.
    pub const DEVICE_GET_IRQ_INFO: u16 = 7;
    /// `VFIO_USER_DEVICE_SET_IRQS`: wires eventfds to, masks or triggers vectors of an index.
    pub const DEVICE_SET_IRQS: u16 = 8;
    /// `VFIO_USER_REGION_READ`: reads bytes of a region (config space or a BAR).
    pub const REGION_READ: u16 = 9;
    /// `VFIO_USER_REGION_WRITE`: writes bytes to a region; the data follows the request.
    pub const REGION_WRITE: u16 = 10;
    /// `VFIO_USER_DMA_READ`: server-to-client read of guest memory; refused by [`super::check`].
    pub const DMA_READ: u16 = 11;
    /// `VFIO_USER_DMA_WRITE`: server-to-client write of guest memory; refused by [`super::check`].
    pub const DMA_WRITE: u16 = 12;
    /// `VFIO_USER_DEVICE_RESET`: resets the device to its power-on state.
    pub const DEVICE_RESET: u16 = 13;
    /// `VFIO_USER_DIRTY_PAGES`: dirty-page logging for migration; refused by [`super::check`].
    pub const DIRTY_PAGES: u16 = 14;
    /// `VFIO_USER_REGION_WRITE_MULTI`: several small region writes in one message;
    /// refused by [`super::check`].
    pub const REGION_WRITE_MULTI: u16 = 15;
}

/// A message header (host byte order, as the protocol and QEMU use it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    /// Message ID: chosen by the sender of a command, echoed in its reply.
    pub id: u16,
    /// Command number ([`cmd`]); a reply repeats the one of its command.
    pub command: u16,
    /// Whole message, header included.
    pub size: u32,
    /// Flags: message type in bits 3:0 ([`TYPE_COMMAND`], [`TYPE_REPLY`]),
    /// [`FLAG_NO_REPLY`], [`FLAG_ERROR`].
    pub flags: u32,
    /// Error: the errno of a reply with [`FLAG_ERROR`] set, 0 otherwise.
    pub error: u32,
}

impl Header {
    /// Decodes the 16 header bytes as they came off the socket; nothing is checked.
    pub fn parse(b: &[u8; HEADER_LEN]) -> Self {
        let u16_at = |o: usize| u16::from_ne_bytes([b[o], b[o + 1]]);
        let u32_at = |o: usize| u32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        Self {
            id: u16_at(0),
            command: u16_at(2),
            size: u32_at(4),
            flags: u32_at(8),
            error: u32_at(12),
        }
    }

    /// The 16 header bytes to send, in host byte order.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..2].copy_from_slice(&self.id.to_ne_bytes());
        b[2..4].copy_from_slice(&self.command.to_ne_bytes());
        b[4..8].copy_from_slice(&self.size.to_ne_bytes());
        b[8..12].copy_from_slice(&self.flags.to_ne_bytes());
        b[12..16].copy_from_slice(&self.error.to_ne_bytes());
        b
    }

    /// Whether the message type is [`TYPE_REPLY`].
    pub fn is_reply(&self) -> bool {
        self.flags & TYPE_MASK == TYPE_REPLY
    }

    /// Whether the sender asked for no reply ([`FLAG_NO_REPLY`]).
    pub fn no_reply(&self) -> bool {
        self.flags & FLAG_NO_REPLY != 0
    }

    /// Whether this is an error reply ([`FLAG_ERROR`]): `error` holds the errno.
    pub fn is_error(&self) -> bool {
        self.flags & FLAG_ERROR != 0
    }

    /// The error reply to this message.
    pub fn error_reply(&self, errno: i32) -> Header {
        Header {
            id: self.id,
            command: self.command,
            size: HEADER_LEN as u32,
            flags: TYPE_REPLY | FLAG_ERROR,
            error: errno as u32,
        }
    }
}

/// Why a message is answered with an error instead of being served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject {
    /// The errno the error reply carries in its `error` field (EINVAL, ENOTSUP, ...).
    pub errno: i32,
    /// What is wrong with the message, in words for the server's events.
    pub why: String,
}

fn reject(errno: i32, why: impl Into<String>) -> Reject {
    Reject {
        errno,
        why: why.into(),
    }
}

/// Checks a header before its body is read: the size must be one the stream
/// can be framed with. An `Err` means the connection cannot continue.
pub fn check_frame(h: &Header) -> Result<(), Reject> {
    if (h.size as usize) < HEADER_LEN {
        return Err(reject(
            libc::EINVAL,
            format!("message size {} is smaller than the 16-byte header", h.size),
        ));
    }
    if h.size > MAX_MESSAGE {
        return Err(reject(
            libc::EMSGSIZE,
            format!(
                "message size {} is above the {MAX_MESSAGE}-byte limit",
                h.size
            ),
        ));
    }
    Ok(())
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_ne_bytes(a)
}

/// Checks a whole message (`body` follows the header, `fds` descriptors came
/// with it) against the device. `Ok` means `vfio_user::Server` may have it.
pub fn check(h: &Header, body: &[u8], fds: usize, shape: &DeviceShape) -> Result<(), Reject> {
    if h.flags & TYPE_MASK != TYPE_COMMAND {
        return Err(reject(
            libc::EINVAL,
            format!("message type {} is not a command", h.flags & TYPE_MASK),
        ));
    }
    let len = body.len();
    let exact = |want: usize, what: &str| {
        if len == want {
            Ok(())
        } else {
            Err(reject(
                libc::EINVAL,
                format!(
                    "{what}: {} bytes, want {}",
                    len + HEADER_LEN,
                    want + HEADER_LEN
                ),
            ))
        }
    };
    let needs_reply = |what: &str| {
        if h.no_reply() {
            Err(reject(
                libc::EINVAL,
                format!("{what} needs a reply but has the no-reply flag"),
            ))
        } else {
            Ok(())
        }
    };
    let no_fds = |what: &str| {
        if fds == 0 {
            Ok(())
        } else {
            Err(reject(
                libc::EINVAL,
                format!("{what} carries {fds} file descriptor(s)"),
            ))
        }
    };
    match h.command {
        cmd::VERSION => {
            needs_reply("VERSION")?;
            no_fds("VERSION")?;
            if len <= 4 {
                return Err(reject(
                    libc::EINVAL,
                    "VERSION without its capabilities (JSON)",
                ));
            }
            let json = &body[4..];
            if json.last() != Some(&0) || json[..json.len() - 1].contains(&0) {
                return Err(reject(
                    libc::EINVAL,
                    "VERSION capabilities must be one NUL-terminated string",
                ));
            }
            if std::str::from_utf8(&json[..json.len() - 1]).is_err() {
                return Err(reject(libc::EINVAL, "VERSION capabilities are not UTF-8"));
            }
            Ok(())
        }
        cmd::DMA_MAP => {
            exact(32, "DMA_MAP")?;
            if fds > 1 {
                return Err(reject(
                    libc::EINVAL,
                    format!("DMA_MAP carries {fds} descriptors, at most 1"),
                ));
            }
            let (addr, size) = (u64_at(body, 16), u64_at(body, 24));
            if size == 0 || addr.checked_add(size).is_none() {
                return Err(reject(
                    libc::EINVAL,
                    format!("DMA_MAP of {size:#x} bytes at {addr:#x}"),
                ));
            }
            Ok(())
        }
        cmd::DMA_UNMAP => {
            exact(24, "DMA_UNMAP")?;
            no_fds("DMA_UNMAP")
        }
        cmd::DEVICE_GET_INFO => {
            exact(16, "DEVICE_GET_INFO")?;
            needs_reply("DEVICE_GET_INFO")?;
            no_fds("DEVICE_GET_INFO")
        }
        cmd::DEVICE_GET_REGION_INFO => {
            exact(32, "DEVICE_GET_REGION_INFO")?;
            needs_reply("DEVICE_GET_REGION_INFO")?;
            no_fds("DEVICE_GET_REGION_INFO")?;
            let (argsz, index) = (u32_at(body, 0), u32_at(body, 8));
            if shape.region(index).is_none() {
                return Err(reject(
                    libc::EINVAL,
                    format!("no region {index} (the device has 9)"),
                ));
            }
            if (argsz as usize) < 32 {
                return Err(reject(
                    libc::EINVAL,
                    format!("region info argsz {argsz} is below 32"),
                ));
            }
            Ok(())
        }
        cmd::DEVICE_GET_IRQ_INFO => {
            exact(16, "DEVICE_GET_IRQ_INFO")?;
            needs_reply("DEVICE_GET_IRQ_INFO")?;
            no_fds("DEVICE_GET_IRQ_INFO")?;
            let index = u32_at(body, 8);
            if shape.irq(index).is_none() {
                return Err(reject(
                    libc::EINVAL,
                    format!("no interrupt index {index} (the device has 5)"),
                ));
            }
            Ok(())
        }
        cmd::DEVICE_SET_IRQS => check_set_irqs(body, fds, shape),
        cmd::REGION_READ | cmd::REGION_WRITE => {
            let write = h.command == cmd::REGION_WRITE;
            let what = if write { "REGION_WRITE" } else { "REGION_READ" };
            if len < 16 {
                return Err(reject(
                    libc::EINVAL,
                    format!("{what}: {} bytes, want at least 32", len + HEADER_LEN),
                ));
            }
            let (offset, region, count) = (u64_at(body, 0), u32_at(body, 8), u32_at(body, 12));
            if write {
                exact(16 + count as usize, what)?;
            } else {
                exact(16, what)?;
                needs_reply(what)?;
            }
            no_fds(what)?;
            if count > MAX_DATA_XFER {
                return Err(reject(
                    libc::E2BIG,
                    format!("{what} of {count} bytes, at most {MAX_DATA_XFER}"),
                ));
            }
            let Some(info) = shape.region(region) else {
                return Err(reject(
                    libc::EINVAL,
                    format!("{what}: no region {region} (the device has 9)"),
                ));
            };
            let allowed = if write {
                info.access.write
            } else {
                info.access.read
            };
            if !allowed {
                return Err(reject(
                    libc::EINVAL,
                    format!(
                        "{what}: region {region} is absent or not {}",
                        if write { "writable" } else { "readable" }
                    ),
                ));
            }
            if !info.contains(offset, u64::from(count)) {
                return Err(reject(
                    libc::EINVAL,
                    format!("{what}: {count} bytes at {offset:#x} are outside region {region} ({:#x} bytes)", info.size),
                ));
            }
            Ok(())
        }
        cmd::DEVICE_RESET => {
            exact(0, "DEVICE_RESET")?;
            no_fds("DEVICE_RESET")
        }
        cmd::DEVICE_GET_REGION_IO_FDS
        | cmd::DMA_READ
        | cmd::DMA_WRITE
        | cmd::DIRTY_PAGES
        | cmd::REGION_WRITE_MULTI => Err(reject(
            libc::ENOTSUP,
            format!("command {} is not supported by this server", h.command),
        )),
        other => Err(reject(libc::ENOSYS, format!("unknown command {other}"))),
    }
}

fn check_set_irqs(body: &[u8], fds: usize, shape: &DeviceShape) -> Result<(), Reject> {
    if body.len() != 20 {
        return Err(reject(
            libc::EINVAL,
            format!(
                "DEVICE_SET_IRQS: {} bytes, want 36 (data travels as descriptors)",
                body.len() + HEADER_LEN
            ),
        ));
    }
    let (flags, index, start, count) = (
        u32_at(body, 4),
        u32_at(body, 8),
        u32_at(body, 12),
        u32_at(body, 16),
    );
    let Some(irq) = shape.irq(index) else {
        return Err(reject(
            libc::EINVAL,
            format!("DEVICE_SET_IRQS: no interrupt index {index}"),
        ));
    };
    let data = flags & VFIO_IRQ_SET_DATA_TYPE_MASK;
    let action = flags & VFIO_IRQ_SET_ACTION_TYPE_MASK;
    if flags & !(VFIO_IRQ_SET_DATA_TYPE_MASK | VFIO_IRQ_SET_ACTION_TYPE_MASK) != 0 {
        return Err(reject(
            libc::EINVAL,
            format!("DEVICE_SET_IRQS: unknown flags {flags:#x}"),
        ));
    }
    if ![
        VFIO_IRQ_SET_DATA_NONE,
        VFIO_IRQ_SET_DATA_BOOL,
        VFIO_IRQ_SET_DATA_EVENTFD,
    ]
    .contains(&data)
        || ![
            VFIO_IRQ_SET_ACTION_MASK,
            VFIO_IRQ_SET_ACTION_UNMASK,
            VFIO_IRQ_SET_ACTION_TRIGGER,
        ]
        .contains(&action)
    {
        return Err(reject(
            libc::EINVAL,
            format!("DEVICE_SET_IRQS: flags {flags:#x} need one data type and one action"),
        ));
    }
    if data == VFIO_IRQ_SET_DATA_BOOL {
        return Err(reject(
            libc::ENOTSUP,
            "DEVICE_SET_IRQS with boolean data is not supported",
        ));
    }
    let disable_all =
        count == 0 && data == VFIO_IRQ_SET_DATA_NONE && action == VFIO_IRQ_SET_ACTION_TRIGGER;
    if !disable_all && start.checked_add(count).is_none_or(|end| end > irq.count) {
        return Err(reject(
            libc::EINVAL,
            format!(
                "DEVICE_SET_IRQS: vectors {start}..{} of index {index}, which has {}",
                start.saturating_add(count),
                irq.count
            ),
        ));
    }
    let fds_ok = if data == VFIO_IRQ_SET_DATA_EVENTFD {
        fds == 0 || fds == count as usize
    } else {
        fds == 0
    };
    if !fds_ok {
        return Err(reject(
            libc::EINVAL,
            format!("DEVICE_SET_IRQS: {fds} descriptors for {count} vectors"),
        ));
    }
    Ok(())
}
