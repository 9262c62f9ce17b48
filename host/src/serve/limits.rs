//! How much of what it is given `serve` reads and repeats: a capture file is
//! read only if it is a regular file no larger than such a file is (a config
//! space is at most 4096 bytes, a sysfs `resource` file a few hundred), a conf
//! file only up to [`CONF_MAX`]; a socket path must fit a unix socket address;
//! and an error quotes at most a short prefix of any text it was given.

/// Longest socket path a client can connect to: `sun_path` holds 108 bytes,
/// the terminating NUL included (`UNIX_PATH_MAX`, linux/un.h; unix(7)).
pub const SOCKET_PATH_MAX: usize = 107;

/// Largest conf file read (`--gpus-from`): one line per GPU is a few KiB.
pub const CONF_MAX: u64 = 1 << 20;

/// Largest captured config space: PCI Express extended config space.
pub const CONFIG_MAX: u64 = 4096;

/// Largest sysfs `resource` file read: 17 lines of 57 bytes on current
/// kernels, and sysfs reports any attribute as one page (4096 bytes).
pub const RESOURCE_MAX: u64 = 4096;

/// How serve quotes a text it was given: the project's one rule for untrusted
/// text in messages (at most [`QUOTE_MAX`] characters, then `...` and the length).
pub use p2p_topology::excerpt::{short as quote, QUOTE_MAX};

/// The first [`QUOTE_MAX`] characters of `s` and `...`, for a message that
/// says the length itself (`s` is longer than that).
pub fn prefix(s: &str) -> String {
    let cut = s.char_indices().nth(QUOTE_MAX).map_or(s.len(), |(i, _)| i);
    format!("{}...", &s[..cut])
}

/// Why a file was not read (the reader is shared with `check --cmdline-from`).
pub use p2p_host_io::{read_limited, ReadRefused};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_texts_are_quoted_short() {
        let long = "é".repeat(100);
        let q = quote(&long);
        assert_eq!(q, format!("{}... (200 bytes)", "é".repeat(64)));
        assert_eq!(quote("short"), "short");
    }
}
