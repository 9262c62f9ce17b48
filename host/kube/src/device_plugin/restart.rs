//! Telling that the kubelet (re)started. The kubelet's contract: a starting
//! kubelet removes every socket in its device-plugins directory
//! (`CleanupPluginDirectory`, k8s.io/kubernetes v1.37.2
//! pkg/kubelet/cm/devicemanager/manager.go:191, called from
//! plugin/v1beta1/server.go:103) and creates kubelet.sock again, and a plugin
//! must then serve on its socket again and register. That holds whether or
//! not the plugin had registered yet: a plugin started before the kubelet
//! loses its socket the same way. Watched with inotify on the directory (our
//! socket or kubelet.sock created or removed; a lost event queue counts as a
//! restart), and, where inotify is not to be had, by comparing kubelet.sock's
//! inode and change time with those it had when the watch began or the plugin
//! registered, and checking that our socket is still there.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use inotify::{EventMask, Inotify, WatchMask};

use super::api::KUBELET_SOCKET;

/// Which kubelet.sock was there.
type Identity = (u64, u64, i64, i64);

fn identity(path: &Path) -> Option<Identity> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.ctime(), m.ctime_nsec()))
}

/// Watches the device-plugins directory for a kubelet (re)start, from the
/// moment our socket is bound: one watch per server generation.
pub(crate) struct RestartWatch {
    kubelet: PathBuf,
    ours: PathBuf,
    ours_name: OsString,
    inotify: Option<Inotify>,
    /// kubelet.sock when the watch began, then when we registered (None:
    /// there was none).
    seen: Option<Identity>,
}

impl RestartWatch {
    /// Starts watching `dir`, where our socket `endpoint` already is. Without
    /// inotify (the error is returned for the log) the fallback checks alone.
    /// The watch starts before kubelet.sock is looked at, so a kubelet that
    /// starts in between is seen by one or the other.
    pub(crate) fn new(dir: &Path, endpoint: &str) -> (Self, Option<std::io::Error>) {
        let inotify = Inotify::init().and_then(|i| {
            i.watches().add(
                dir,
                WatchMask::CREATE | WatchMask::DELETE | WatchMask::MOVED_FROM | WatchMask::MOVED_TO,
            )?;
            Ok(i)
        });
        let (inotify, error) = match inotify {
            Ok(i) => (Some(i), None),
            Err(e) => (None, Some(e)),
        };
        let kubelet = dir.join(KUBELET_SOCKET);
        let watch = Self {
            seen: identity(&kubelet),
            kubelet,
            ours: dir.join(endpoint),
            ours_name: endpoint.into(),
            inotify,
        };
        (watch, error)
    }

    /// Notes the kubelet.sock registered with. Events already queued still
    /// count: a kubelet that restarted while we registered is registered
    /// with again.
    pub(crate) fn registered(&mut self) {
        self.seen = identity(&self.kubelet);
    }

    /// Whether the kubelet started or restarted since the watch began (before
    /// a registration: the plugin's socket must be served again, as a
    /// starting kubelet removes it) or since [`Self::registered`]. Events are
    /// consumed; the other checks are not.
    pub(crate) fn restarted(&mut self) -> bool {
        let by_events = self.restarted_by_events();
        by_events || identity(&self.kubelet) != self.seen || !self.ours.exists()
    }

    /// Whether an event since the last call names kubelet.sock or our socket,
    /// or events were lost.
    fn restarted_by_events(&mut self) -> bool {
        let Some(inotify) = self.inotify.as_mut() else {
            return false;
        };
        let mut buf = [0u8; 4096];
        let mut seen = false;
        // Non-blocking: WouldBlock (or any error) ends the drain.
        while let Ok(events) = inotify.read_events(&mut buf) {
            let mut any = false;
            for e in events {
                any = true;
                seen |= e.mask.contains(EventMask::Q_OVERFLOW);
                if let Some(name) = e.name {
                    seen |= name == KUBELET_SOCKET || name == self.ours_name.as_os_str();
                }
            }
            if !any {
                break;
            }
        }
        seen
    }
}
