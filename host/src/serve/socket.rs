//! A served GPU's socket on the file system: created with mode 0600 or the
//! [`SocketMode`] asked for, bound in a private 0700 staging directory and
//! then linked into place (never reachable with looser permissions); a stale
//! socket removed first, a live one or a non-socket refused; a path longer
//! than a unix socket address holds refused; private directories reached
//! through their descriptor when their path would be too long.

use std::fs::{self, DirBuilder, File};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::error::ServeError;
use super::limits::SOCKET_PATH_MAX;

static UNIQUE: AtomicU32 = AtomicU32::new(0);

pub(super) fn socket_err(path: &Path) -> impl FnOnce(io::Error) -> ServeError + '_ {
    move |source| ServeError::Socket {
        path: path.to_path_buf(),
        source,
    }
}

/// A fresh 0700 directory `<parent>/<prefix><pid>-<n>`.
fn private_dir(parent: &Path, prefix: &str) -> io::Result<PathBuf> {
    loop {
        let n = UNIQUE.fetch_add(1, Ordering::Relaxed);
        let dir = parent.join(format!("{prefix}{}-{n}", std::process::id()));
        match DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Who may connect to a served socket: its permission bits, read and write
/// only (a socket needs nothing else), the owner's always included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketMode(u32);

impl SocketMode {
    /// 0600: the server's own user only (the default).
    pub const OWNER_ONLY: SocketMode = SocketMode(0o600);

    /// `mode` when it holds only read/write bits and the owner's both.
    ///
    /// ```
    /// use p2p_host::serve::SocketMode;
    /// assert_eq!(SocketMode::new(0o660).unwrap().bits(), 0o660);
    /// assert!(SocketMode::new(0o700).is_err()); // execute means nothing here
    /// assert!(SocketMode::new(0o060).is_err()); // the owner could not connect
    /// ```
    pub fn new(mode: u32) -> Result<Self, ServeError> {
        if mode & !0o666 != 0 || mode & 0o600 != 0o600 {
            return Err(ServeError::SocketMode(format!("{mode:04o}")));
        }
        Ok(SocketMode(mode))
    }

    /// The permission bits.
    pub fn bits(self) -> u32 {
        self.0
    }
}

impl std::str::FromStr for SocketMode {
    type Err = ServeError;

    /// Octal, as chmod takes it: `660`, `0660`.
    fn from_str(s: &str) -> Result<Self, ServeError> {
        let mode = u32::from_str_radix(s.trim_start_matches("0o"), 8)
            .map_err(|_| ServeError::SocketMode(s.to_string()))?;
        Self::new(mode).map_err(|_| ServeError::SocketMode(s.to_string()))
    }
}

/// Binds `path` with `mode`; see the module docs.
pub fn bind_socket(
    path: &Path,
    mode: SocketMode,
) -> Result<(UnixListener, (u64, u64)), ServeError> {
    let len = path.as_os_str().len();
    if len > SOCKET_PATH_MAX {
        return Err(ServeError::SocketTooLong {
            path: path.into(),
            len,
        });
    }
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => match UnixStream::connect(path) {
            Ok(_) => return Err(ServeError::SocketInUse { path: path.into() }),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                fs::remove_file(path).map_err(socket_err(path))?;
            }
            Err(e) => return Err(socket_err(path)(e)),
        },
        Ok(_) => return Err(ServeError::NotASocket { path: path.into() }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(socket_err(path)(e)),
    }
    let parent = socket_parent(path);
    let staging = private_dir(&parent, ".vp2p").map_err(socket_err(path))?;
    let staged = staging.join("s");
    let result = (|| {
        let listener = bind_at(&staging, "s")?;
        fs::set_permissions(&staged, fs::Permissions::from_mode(mode.bits()))?;
        // A hard link fails if the path appeared meanwhile: nothing is replaced.
        fs::hard_link(&staged, path)?;
        let m = fs::symlink_metadata(path)?;
        Ok((listener, (m.dev(), m.ino())))
    })();
    let _ = fs::remove_file(&staged);
    let _ = fs::remove_dir(&staging);
    result.map_err(socket_err(path))
}

pub(super) fn socket_parent(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// `dir/name` as a socket address: the path itself when it fits, else the
/// same file reached through `dir`'s descriptor (`/proc/self/fd/N/name`),
/// whose length does not depend on `dir`'s. The returned file keeps the
/// descriptor open for as long as the address is used.
fn address_in(dir: &Path, name: &str) -> io::Result<(PathBuf, Option<File>)> {
    let path = dir.join(name);
    if path.as_os_str().len() <= SOCKET_PATH_MAX {
        return Ok((path, None));
    }
    let d = File::open(dir)?;
    let short = PathBuf::from(format!("/proc/self/fd/{}/{name}", d.as_raw_fd()));
    Ok((short, Some(d)))
}

/// Binds a listening socket at `dir/name`, however long `dir` is.
fn bind_at(dir: &Path, name: &str) -> io::Result<UnixListener> {
    let (addr, _dir) = address_in(dir, name)?;
    UnixListener::bind(addr)
}

/// Connects to the socket at `dir/name`, however long `dir` is.
fn connect_at(dir: &Path, name: &str) -> io::Result<UnixStream> {
    let (addr, _dir) = address_in(dir, name)?;
    UnixStream::connect(addr)
}

/// Removes the socket at `path` if it is still the one bound (`inode`):
/// another server's socket put there meanwhile stays.
pub(super) fn remove_if_ours(path: &Path, inode: (u64, u64)) {
    if let Ok(m) = fs::symlink_metadata(path) {
        if (m.dev(), m.ino()) == inode {
            let _ = fs::remove_file(path);
        }
    }
}

/// A listening socket only this process can reach, and a connection to it.
pub(super) fn private_pair(parent: &Path) -> io::Result<(UnixListener, UnixStream)> {
    let dir = private_dir(parent, ".vp2p")?;
    let path = dir.join("p");
    let pair = bind_at(&dir, "p").and_then(|l| Ok((l, connect_at(&dir, "p")?)));
    let _ = fs::remove_file(&path);
    let _ = fs::remove_dir(&dir);
    pair
}
