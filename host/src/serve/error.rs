//! Why a GPU cannot be served. Every message names the file or socket involved.

use std::io;
use std::path::PathBuf;

use crate::overlay::OverlayError;

/// Why `--gpu KEY=VALUE,...` does not parse. Every text taken from the spec is
/// quoted short ([`quote`](super::quote)): a 20 MB line yields a message of
/// a few hundred bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// An item is not `KEY=VALUE`: no `=`, an empty value, or a flag with a value
    /// other than true/on/yes/1 or false/off/no/0.
    #[error(
        "'{0}': want KEY=VALUE (keys: socket, config, vfio, clique, resource, max-bar, allow-non-nvidia, any-offset)"
    )]
    NotKeyValue(String),
    /// A key `--gpu` does not take.
    #[error(
        "unknown key '{0}' (keys: socket, config, vfio, clique, resource, max-bar, allow-non-nvidia, any-offset)"
    )]
    UnknownKey(String),
    /// A key appears twice in one `--gpu`.
    #[error("'{0}' is given twice")]
    Duplicate(String),
    /// A required key (socket, config or clique) is absent.
    #[error("'{0}' is required")]
    Missing(&'static str),
    /// Two keys that exclude each other (config and vfio; resource or
    /// max-bar with vfio).
    #[error("'{0}' and '{1}' cannot be given together")]
    Conflict(&'static str, &'static str),
    /// The vfio value is not a PCI address.
    #[error("vfio '{0}': want a PCI address like 0000:01:00.0")]
    BadBdf(String),
    /// The clique value is not a number in 0..=15.
    #[error("clique '{0}': want a number 0..=15")]
    BadClique(String),
    /// The max-bar value does not parse as a size, or is not a power of two of at least 4 KiB.
    #[error("max-bar '{0}': want a power of two of at least 4K, like 256M, 1G or 0x10000000")]
    BadSize(String),
    /// The socket path does not fit a unix socket address (`sun_path`: 108
    /// bytes with the terminating NUL), so no client could connect to it.
    #[error(
        "socket '{path}' is {len} bytes; a unix socket address holds at most {max} (108 with the terminating NUL): choose a shorter path",
        max = super::limits::SOCKET_PATH_MAX
    )]
    SocketTooLong {
        /// The path, quoted short.
        path: String,
        /// Its length in bytes.
        len: usize,
    },
    /// A file path longer than a path may be (`PATH_MAX`, 4096 with the NUL).
    #[error("{key} '{path}' is {len} bytes; a path holds at most 4095")]
    PathTooLong {
        /// The key (config or resource).
        key: &'static str,
        /// The path, quoted short.
        path: String,
        /// Its length in bytes.
        len: usize,
    },
}

/// Why a file of GPU specs (`serve --gpus-from FILE`, the unit's
/// `/etc/vp2p/serve/NAME.conf`) gives nothing to serve.
#[derive(Debug, thiserror::Error)]
pub enum SpecFileError {
    /// The file could not be read (missing, unreadable, not a regular file,
    /// larger than [`CONF_MAX`](super::limits::CONF_MAX), not UTF-8).
    #[error("{path}: {why}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        why: String,
    },
    /// A line is not a valid spec. (`error` is said in the message and is
    /// not also the error's source, so a report of the chain says it once.)
    #[error("{path}:{line}: {error}")]
    Line {
        /// The file.
        path: PathBuf,
        /// The line, counting from 1.
        line: usize,
        /// What is wrong with it.
        error: SpecError,
    },
    /// Only comments and blank lines.
    #[error("{0}: no GPU spec in it (one `socket=PATH,config=FILE,clique=N` a line)")]
    Empty(PathBuf),
}

/// Why a served GPU could not be set up or started.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A socket mode that is not read/write bits including the owner's.
    #[error(
        "socket mode '{0}': want octal read/write bits including the owner's, like 0600 or 0660"
    )]
    SocketMode(String),
    /// A capture file (config space or `resource`) could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: PathBuf,
        #[source]
        /// The I/O error.
        source: io::Error,
    },

    /// The config space is neither 256 nor 4096 bytes (a non-root sysfs read gives 64).
    #[error("{path}: {len} bytes; a config space has 256 (conventional) or 4096 (PCI Express) bytes (read sysfs `config` as root)")]
    ConfigLength {
        /// The config file (`<config>` for bytes given directly).
        path: PathBuf,
        /// Bytes it holds.
        len: usize,
    },

    /// No `resource` file was given and none lies next to the config file: the BAR
    /// sizes are unknown.
    #[error(
        "{config}: no BAR sizes: the config space holds BAR addresses, not sizes; put the \
         sysfs `resource` file next to it or pass resource=FILE"
    )]
    NoResource {
        /// The config file next to which `resource` was looked for.
        config: PathBuf,
    },

    /// A line of the sysfs `resource` file is not `start end flags` in hex, or the file
    /// lists fewer than the 6 BARs.
    #[error("{path} line {line}: {why}")]
    Resource {
        /// The `resource` file.
        path: PathBuf,
        /// Line number, from 1 (for too few lines, the number of lines).
        line: usize,
        /// What is wrong with it.
        why: String,
    },

    /// A BAR register disagrees with its size: reserved type, 64-bit in the last register,
    /// size not a power of two, or `max-bar` below its MSI-X table or PBA.
    #[error("BAR{index}: {why}")]
    Bar {
        /// The BAR's (first) register, 0..=5.
        index: u8,
        /// What is inconsistent.
        why: String,
    },

    /// [`ServeError::Bar`] with the config file the register was read from.
    #[error("{path}: BAR{index}: {why}")]
    BarIn {
        /// The config file.
        path: PathBuf,
        /// The BAR's (first) register, 0..=5.
        index: u8,
        /// What is inconsistent.
        why: String,
    },

    /// The P2P capability cannot be placed in the config space (not an NVIDIA GPU,
    /// no free slot, another clique already there, ...).
    #[error("cannot place the P2P capability: {0}")]
    Overlay(#[from] OverlayError),

    /// The memfd behind a BAR could not be created or sized.
    #[error("BAR memory of {size} bytes")]
    Memory {
        /// Bytes of the BAR as served.
        size: u64,
        #[source]
        /// The `memfd_create` or `ftruncate` error.
        source: io::Error,
    },

    /// The socket path exists and is not a socket; it is left alone.
    #[error("{path} exists and is not a socket; refusing to replace it")]
    NotASocket {
        /// The socket path given.
        path: PathBuf,
    },

    /// A server is already listening on the socket path.
    #[error("{path}: another server is listening there")]
    SocketInUse {
        /// The socket path given.
        path: PathBuf,
    },

    /// Creating, binding or linking the socket, or starting its threads, failed.
    #[error("socket {path}")]
    Socket {
        /// The socket path given.
        path: PathBuf,
        #[source]
        /// The I/O error.
        source: io::Error,
    },

    /// Two `--gpu` specs name the same socket.
    #[error("socket {path}: given to two GPUs ({first} and {second})")]
    DuplicateSocket {
        /// The socket path given twice.
        path: PathBuf,
        /// Where the first GPU was given (`FILE:LINE` or `--gpu #N`).
        first: String,
        /// Where the second was.
        second: String,
    },

    /// The socket path does not fit a unix socket address (108 bytes with the NUL).
    #[error("socket {path}: {len} bytes; a unix socket address holds at most {max} (108 with the terminating NUL)", max = super::limits::SOCKET_PATH_MAX)]
    SocketTooLong {
        /// The socket path given.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
    },

    /// A capture file that is not what it should be: not a regular file (a
    /// directory, a device such as /dev/zero), or larger than such a file is.
    #[error("{path}: {why}")]
    BadFile {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        why: String,
    },
}

impl ServeError {
    /// Whether the error is in what serve was given (a conf line, a capture
    /// file, a socket path, the overlay's placement) rather than in the
    /// moment: serving it again unchanged would fail the same way, so the
    /// unit must not restart (exit status 78, EX_CONFIG). Not so: a memfd that
    /// could not be created, a socket another server holds or that could not
    /// be bound (a directory missing at boot may appear).
    pub fn is_config(&self) -> bool {
        match self {
            ServeError::SocketMode(_)
            | ServeError::Read { .. }
            | ServeError::ConfigLength { .. }
            | ServeError::NoResource { .. }
            | ServeError::Resource { .. }
            | ServeError::Bar { .. }
            | ServeError::BarIn { .. }
            | ServeError::Overlay(_)
            | ServeError::NotASocket { .. }
            | ServeError::DuplicateSocket { .. }
            | ServeError::SocketTooLong { .. }
            | ServeError::BadFile { .. } => true,
            ServeError::Memory { .. }
            | ServeError::SocketInUse { .. }
            | ServeError::Socket { .. } => false,
        }
    }
}
