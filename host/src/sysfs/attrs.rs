//! Reading one function's sysfs attributes, with errors that name the file.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use p2p_topology::hex::{self, HexWidth};

use super::scan::ScanError;

/// Reads a small file, a sysfs attribute or its captured copy, in three system
/// calls: open, read, close. (`fs::read` also asks for the size, which sysfs
/// gives as 4096 whatever the attribute holds, and reads once more to see the
/// end.) sysfs answers a read with the whole attribute, and a regular file with
/// everything up to its end, so a read that leaves the buffer unfilled has
/// reached the end; a full buffer is grown and read on.
fn read_small(path: &Path, expect: usize) -> io::Result<Vec<u8>> {
    let mut file = fs::File::open(path)?;
    let mut buf = vec![0u8; expect + 1];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(2 * buf.len(), 0);
        }
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                if len < buf.len() {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len);
    Ok(buf)
}

/// A text attribute: [`read_small`], then UTF-8 (as `fs::read_to_string`).
fn read_text(path: &Path) -> io::Result<String> {
    String::from_utf8(read_small(path, 128)?).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        )
    })
}

/// Reads a required attribute; a missing or unreadable file is an error naming it.
pub(super) fn required(dir: &Path, name: &str) -> Result<String, ScanError> {
    let path = dir.join(name);
    read_text(&path)
        .map(|s| s.trim().to_string())
        .map_err(|e| ScanError::Attribute {
            path,
            why: e.to_string(),
        })
}

/// Reads an optional attribute: None when absent, an error when present but unreadable.
pub(super) fn optional(dir: &Path, name: &str) -> Result<Option<String>, ScanError> {
    let path = dir.join(name);
    match read_text(&path) {
        Ok(s) => Ok(Some(s.trim().to_string())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        // Link attributes of functions without a link answer EINVAL or ENODEV.
        Err(e) if matches!(e.raw_os_error(), Some(22) | Some(19)) => Ok(None),
        Err(e) => Err(ScanError::Attribute {
            path,
            why: e.to_string(),
        }),
    }
}

/// Parses a "0x10de"-style hex attribute of width `T` ([`hex::parse`]).
fn hex<T: HexWidth>(dir: &Path, name: &str, text: &str) -> Result<T, ScanError> {
    hex::parse(text).map_err(|e| ScanError::Attribute {
        path: dir.join(name),
        why: e.to_string(),
    })
}

/// Reads a hex attribute that must exist.
pub(super) fn required_hex<T: HexWidth>(dir: &Path, name: &str) -> Result<T, ScanError> {
    let t = required(dir, name)?;
    hex(dir, name, &t)
}

/// Reads a hex attribute that may be absent.
pub(super) fn optional_hex<T: HexWidth>(dir: &Path, name: &str) -> Result<Option<T>, ScanError> {
    optional(dir, name)?.map(|t| hex(dir, name, &t)).transpose()
}

/// `numa_node`: None for -1 (unknown) or absent.
pub(super) fn numa_node(dir: &Path) -> Result<Option<u32>, ScanError> {
    let Some(t) = optional(dir, "numa_node")? else {
        return Ok(None);
    };
    let v: i64 = t.parse().map_err(|_| ScanError::Attribute {
        path: dir.join("numa_node"),
        why: format!("'{t}' is not a number"),
    })?;
    Ok(u32::try_from(v).ok())
}

/// The last path component of a symlink's target (`driver`, `iommu_group`).
pub(super) fn link_name(dir: &Path, name: &str) -> Result<Option<String>, ScanError> {
    let path = dir.join(name);
    match fs::read_link(&path) {
        Ok(target) => Ok(target.file_name().map(|n| n.to_string_lossy().into_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ScanError::Attribute {
            path,
            why: e.to_string(),
        }),
    }
}

/// Names of the entries of a subdirectory (`net`, `infiniband`), empty when absent.
pub(super) fn child_names(dir: &Path, sub: &str) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir.join(sub))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Reads at most `limit` bytes of `config`, which must exist.
pub(super) fn config(dir: &Path, limit: usize) -> Result<Vec<u8>, ScanError> {
    let path: PathBuf = dir.join("config");
    read_prefix(&path, limit).map_err(|e| ScanError::Attribute {
        path,
        why: e.to_string(),
    })
}

/// Reads at most `limit` bytes from the start of a file. On a live host the
/// kernel reads config space a dword at a time for this, so asking for less
/// is faster.
fn read_prefix(path: &Path, limit: usize) -> io::Result<Vec<u8>> {
    let mut file = fs::File::open(path)?;
    let mut buf = vec![0u8; limit];
    let mut len = 0;
    while len < limit {
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len);
    Ok(buf)
}
