//! Kernel uevents as the publisher's wake-up: a PCI function bound,
//! unbound, added or removed makes the kernel broadcast a uevent on the
//! `NETLINK_KOBJECT_UEVENT` socket family (multicast group 1), so the driver
//! reads sysfs again at once instead of at the next `--resync-ms` tick.
//!
//! A message only wakes the check: what is published is always what sysfs
//! says then, and nothing is published unless the devices differ. So the
//! sender is not checked (a process with CAP_NET_ADMIN could send to the
//! group; it would cost one scan), and the timer stays as the fallback. The
//! kernel sends a device's uevents to every network namespace owned by the
//! initial user namespace (lib/kobject_uevent.c, `uevent_net_init` and
//! `kobject_uevent_net_broadcast`), so a pod's socket receives them unless
//! the pod runs in a user namespace of its own; there, and where the socket
//! cannot be opened, the timer alone finds changes.
//!
//! The message format is the kernel's (lib/kobject_uevent.c,
//! `kobject_uevent_env`): `ACTION@DEVPATH`, then `KEY=VALUE` strings, each
//! NUL-terminated, among them `ACTION`, `DEVPATH`, `SUBSYSTEM` and
//! `SEQNUM`; bind and unbind exist since Linux 4.14.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The uevent actions that can change which PCI functions the driver
/// publishes.
const PCI_ACTIONS: [&str; 4] = ["add", "remove", "bind", "unbind"];

/// One uevent: its action, the device's path under /sys, its subsystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uevent<'a> {
    /// `add`, `remove`, `bind`, `unbind`, `change`, ...
    pub action: &'a str,
    /// The device's path below /sys (`/devices/pci0000:00/0000:00:01.0`).
    pub devpath: &'a str,
    /// The `SUBSYSTEM` value, when the message has one.
    pub subsystem: Option<&'a str>,
}

impl Uevent<'_> {
    /// Whether the event can change the published devices: a PCI function
    /// added, removed, bound or unbound.
    pub fn changes_pci_functions(&self) -> bool {
        self.subsystem == Some("pci") && PCI_ACTIONS.contains(&self.action)
    }
}

/// Reads a kernel uevent message; `None` for anything else (libudev's
/// re-broadcasts start with `libudev`, not `ACTION@`).
///
/// ```
/// use p2p_host_kube::dra_driver::uevents::parse;
///
/// let msg = b"unbind@/devices/pci0000:80/0000:80:00.0/0000:81:00.0\0\
///             ACTION=unbind\0DEVPATH=/devices/pci0000:80/0000:80:00.0/0000:81:00.0\0\
///             SUBSYSTEM=pci\0SEQNUM=4711\0";
/// let e = parse(msg).unwrap();
/// assert_eq!(e.action, "unbind");
/// assert!(e.changes_pci_functions());
/// ```
pub fn parse(msg: &[u8]) -> Option<Uevent<'_>> {
    let mut parts = msg.split(|b| *b == 0).filter(|p| !p.is_empty());
    let head = std::str::from_utf8(parts.next()?).ok()?;
    let (action, devpath) = head.split_once('@')?;
    if action.is_empty() || !devpath.starts_with('/') {
        return None;
    }
    let mut subsystem = None;
    for p in parts {
        let Ok(kv) = std::str::from_utf8(p) else {
            continue;
        };
        if let Some(v) = kv.strip_prefix("SUBSYSTEM=") {
            subsystem = Some(v);
        }
    }
    Some(Uevent {
        action,
        devpath,
        subsystem,
    })
}

/// A socket bound to the kernel's uevent multicast group.
#[derive(Debug)]
pub struct UeventSocket {
    fd: OwnedFd,
}

/// The kernel's uevent multicast group (lib/kobject_uevent.c broadcasts to 1).
const KERNEL_GROUP: u32 = 1;

impl UeventSocket {
    /// Opens and binds the socket; receive calls give up after `timeout`
    /// so the reading thread can see that it was asked to stop.
    pub fn open(timeout: Duration) -> io::Result<Self> {
        // SAFETY: socket(2) with constant arguments; the result is checked
        // before use.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                libc::NETLINK_KOBJECT_UEVENT,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` was just returned by socket(2); nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sockaddr_nl is plain data; all zeroes is a valid value.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        addr.nl_groups = KERNEL_GROUP;
        // SAFETY: bind(2) on our socket with a sockaddr_nl and its exact size.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let tv = libc::timeval {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_usec: timeout.subsec_micros() as libc::suseconds_t,
        };
        // SAFETY: setsockopt(2) on our socket with a timeval and its size.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { fd })
    }

    /// The next message into `buf` (its length), or `None` when the receive
    /// timeout passed first.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // SAFETY: recv(2) on our socket into `buf`, at most its length.
        let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n >= 0 {
            return Ok(Some(n as usize));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted => {
                Ok(None)
            }
            _ => Err(e),
        }
    }
}

/// Calls `wake` on every uevent that changes PCI functions, from a thread of
/// its own, until `stop` is set (seen within `poll`). Returns the thread, or
/// why the socket could not be opened.
pub fn watch(
    poll: Duration,
    stop: Arc<AtomicBool>,
    wake: impl Fn() + Send + 'static,
) -> io::Result<std::thread::JoinHandle<()>> {
    let socket = UeventSocket::open(poll)?;
    std::thread::Builder::new()
        .name("uevents".into())
        .spawn(move || {
            // The kernel's messages are at most UEVENT_BUFFER_SIZE (2048)
            // bytes; a longer one is cut, which parse tolerates.
            let mut buf = [0u8; 8192];
            while !stop.load(Ordering::Relaxed) {
                match socket.recv(&mut buf) {
                    Ok(Some(n)) => {
                        if parse(&buf[..n]).is_some_and(|e| e.changes_pci_functions()) {
                            wake();
                        }
                    }
                    Ok(None) => {}
                    Err(_) => std::thread::sleep(poll),
                }
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_messages_are_read_and_others_are_not() {
        // As lib/kobject_uevent.c writes them: "add@" + devpath, then the
        // environment, each string NUL-terminated.
        let add = b"add@/devices/pci0000:00/0000:00:02.0\0ACTION=add\0DEVPATH=/devices/pci0000:00/0000:00:02.0\0SUBSYSTEM=pci\0PCI_CLASS=30200\0SEQNUM=12\0";
        let e = parse(add).unwrap();
        assert_eq!(
            e,
            Uevent {
                action: "add",
                devpath: "/devices/pci0000:00/0000:00:02.0",
                subsystem: Some("pci")
            }
        );
        assert!(e.changes_pci_functions());
        // A change of a PCI function, and a bind of a USB device: not ours.
        let change = b"change@/devices/pci0000:00/0000:00:02.0\0ACTION=change\0SUBSYSTEM=pci\0";
        assert!(!parse(change).unwrap().changes_pci_functions());
        let usb = b"bind@/devices/usb1/1-1\0ACTION=bind\0SUBSYSTEM=usb\0";
        assert!(!parse(usb).unwrap().changes_pci_functions());
        // libudev's re-broadcast, a message without '@', empty, not UTF-8.
        assert_eq!(parse(b"libudev\0\xfe\xed\xca\xfe"), None);
        assert_eq!(parse(b"ACTION=add\0SUBSYSTEM=pci\0"), None);
        assert_eq!(parse(b""), None);
        assert_eq!(parse(b"\xff@/devices\0SUBSYSTEM=pci\0"), None);
        assert_eq!(parse(b"@/devices/x\0"), None);
    }
}
