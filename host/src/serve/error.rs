//! Why a GPU cannot be served. Every message names the file or socket involved.

use std::io;
use std::path::PathBuf;

use crate::overlay::OverlayError;

/// Why `--gpu KEY=VALUE,...` does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error(
        "'{0}': want KEY=VALUE (keys: socket, config, clique, resource, max-bar, allow-non-nvidia, any-offset)"
    )]
    NotKeyValue(String),
    #[error(
        "unknown key '{0}' (keys: socket, config, clique, resource, max-bar, allow-non-nvidia, any-offset)"
    )]
    UnknownKey(String),
    #[error("'{0}' is given twice")]
    Duplicate(String),
    #[error("'{0}' is required")]
    Missing(&'static str),
    #[error("clique '{0}': want a number 0..=15")]
    BadClique(String),
    #[error("max-bar '{0}': want a power of two of at least 4K, like 256M, 1G or 0x10000000")]
    BadSize(String),
}

/// Why a served GPU could not be set up or started.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("reading {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("{path}: {len} bytes; a config space has 256 (conventional) or 4096 (PCI Express) bytes (read sysfs `config` as root)")]
    ConfigLength { path: PathBuf, len: usize },

    #[error(
        "{config}: no BAR sizes: the config space holds BAR addresses, not sizes; put the \
         sysfs `resource` file next to it or pass resource=FILE"
    )]
    NoResource { config: PathBuf },

    #[error("{path} line {line}: {why}")]
    Resource {
        path: PathBuf,
        line: usize,
        why: String,
    },

    #[error("BAR{index}: {why}")]
    Bar { index: u8, why: String },

    #[error("{path}: BAR{index}: {why}")]
    BarIn {
        path: PathBuf,
        index: u8,
        why: String,
    },

    #[error("cannot place the P2P capability: {0}")]
    Overlay(#[from] OverlayError),

    #[error("BAR memory of {size} bytes")]
    Memory {
        size: u64,
        #[source]
        source: io::Error,
    },

    #[error("{path} exists and is not a socket; refusing to replace it")]
    NotASocket { path: PathBuf },

    #[error("{path}: another server is listening there")]
    SocketInUse { path: PathBuf },

    #[error("socket {path}")]
    Socket {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("starting the vfio-user server on {path}")]
    Protocol {
        path: PathBuf,
        #[source]
        source: vfio_user::Error,
    },

    #[error("{path}: given to two GPUs")]
    DuplicateSocket { path: PathBuf },
}
