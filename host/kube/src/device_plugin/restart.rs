//! Telling that the kubelet restarted. The kubelet's contract: a new kubelet
//! removes every socket in its device-plugins directory and creates
//! kubelet.sock again, and a plugin must then register again. Watched with
//! inotify on the directory (a socket removed or kubelet.sock created or
//! removed), and, where inotify is not to be had, by comparing kubelet.sock's
//! inode and change time and checking that our socket is still there.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use inotify::{Inotify, WatchMask};

use super::api::KUBELET_SOCKET;

/// Which kubelet.sock we registered with.
type Identity = (u64, u64, i64, i64);

fn identity(path: &Path) -> Option<Identity> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.ctime(), m.ctime_nsec()))
}

/// Watches the device-plugins directory for a kubelet restart.
pub(crate) struct RestartWatch {
    kubelet: PathBuf,
    ours: PathBuf,
    ours_name: OsString,
    inotify: Option<Inotify>,
    registered: Option<Identity>,
}

impl RestartWatch {
    /// Starts watching `dir`, where our socket `endpoint` already is. Without
    /// inotify (the error is returned for the log) the fallback checks alone.
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
        let watch = Self {
            kubelet: dir.join(KUBELET_SOCKET),
            ours: dir.join(endpoint),
            ours_name: endpoint.into(),
            inotify,
            registered: None,
        };
        (watch, error)
    }

    /// Forgets what happened so far: called before each registration attempt.
    pub(crate) fn clear(&mut self) {
        let _ = self.restarted_by_events();
    }

    /// Notes the kubelet.sock registered with.
    pub(crate) fn registered(&mut self) {
        self.registered = identity(&self.kubelet);
    }

    /// Whether the kubelet restarted since [`Self::registered`].
    pub(crate) fn restarted(&mut self) -> bool {
        let by_events = self.restarted_by_events();
        by_events || identity(&self.kubelet) != self.registered || !self.ours.exists()
    }

    /// Whether an event since the last call names kubelet.sock or our socket.
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
