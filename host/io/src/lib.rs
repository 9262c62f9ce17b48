//! Reading a file that someone else names (a capture, a conf, a kernel
//! command line, a ResourceClaim file) without letting it decide how much is
//! read: only a regular file, opened without blocking (a FIFO is refused
//! rather than waited on), at most a given number of bytes. `/dev/zero`
//! would otherwise be read until memory runs out. `p2p-host` and its
//! Kubernetes edge both read through [`read_limited`].

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Why a file was not read (the message does not repeat the path: callers
/// name it).
#[derive(Debug, thiserror::Error)]
pub enum ReadRefused {
    /// Opening or reading it failed.
    #[error("{0}")]
    Io(io::Error),
    /// It is not a regular file: what it is instead.
    #[error("not a regular file ({0})")]
    NotAFile(&'static str),
    /// It holds more than the limit.
    #[error("larger than {max} bytes")]
    TooBig {
        /// The limit in bytes.
        max: u64,
    },
}

/// Reads `path` whole if it is a regular file of at most `max` bytes. Opened
/// without blocking, so a FIFO is refused rather than waited on; the size is
/// checked before the read and the read stops one byte past `max`, so a file
/// that grows (or lies about its size) cannot make it read more.
pub fn read_limited(path: &Path, max: u64) -> Result<Vec<u8>, ReadRefused> {
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(ReadRefused::Io)?;
    let meta = file.metadata().map_err(ReadRefused::Io)?;
    let t = meta.file_type();
    if !t.is_file() {
        return Err(ReadRefused::NotAFile(if t.is_dir() {
            "a directory"
        } else if t.is_char_device() {
            "a character device"
        } else if t.is_block_device() {
            "a block device"
        } else if t.is_fifo() {
            "a FIFO"
        } else if t.is_socket() {
            "a socket"
        } else {
            "not a file"
        }));
    }
    if meta.len() > max {
        return Err(ReadRefused::TooBig { max });
    }
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(ReadRefused::Io)?;
    if bytes.len() as u64 > max {
        return Err(ReadRefused::TooBig { max });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_directories_and_big_files_are_refused() {
        let e = read_limited(Path::new("/dev/zero"), 4096).unwrap_err();
        assert_eq!(e.to_string(), "not a regular file (a character device)");
        let e = read_limited(Path::new("/"), 4096).unwrap_err();
        assert_eq!(e.to_string(), "not a regular file (a directory)");
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("config");
        std::fs::write(&big, vec![0u8; 4097]).unwrap();
        let e = read_limited(&big, 4096).unwrap_err();
        assert_eq!(e.to_string(), "larger than 4096 bytes");
        std::fs::write(&big, vec![7u8; 4096]).unwrap();
        assert_eq!(read_limited(&big, 4096).unwrap(), vec![7u8; 4096]);
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_limited(&fifo, 4096).unwrap_err();
        assert_eq!(e.to_string(), "not a regular file (a FIFO)");
    }
}
