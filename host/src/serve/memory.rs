//! RAM behind an emulated BAR: a sparse, zero-filled memfd. The server reads
//! and writes it for `REGION_READ`/`REGION_WRITE`, and hands the descriptor to
//! the client so it can map the BAR straight into the guest; both see the same
//! bytes. Pages cost memory only once written.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd};
use std::os::unix::fs::FileExt;

/// A memfd of a fixed size.
#[derive(Debug)]
pub struct BarMemory {
    file: File,
    size: u64,
}

impl BarMemory {
    /// A zero-filled memfd of `size` bytes named `name` (shown in
    /// `/proc/PID/fd` as `/memfd:NAME`).
    pub fn new(name: &str, size: u64) -> io::Result<Self> {
        let name =
            CString::new(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: `name` is a valid NUL-terminated string that outlives the
        // call; memfd_create does not keep the pointer.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: memfd_create just returned this descriptor; nothing else owns it.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(size)?;
        Ok(Self { file, size })
    }

    /// Bytes of the memfd: the BAR's served size.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Reads `buf.len()` bytes at `offset`; the range must lie inside.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.check(offset, buf.len())?;
        self.file.read_exact_at(buf, offset)
    }

    /// Writes `data` at `offset`; the range must lie inside.
    pub fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.check(offset, data.len())?;
        self.file.write_all_at(data, offset)
    }

    fn check(&self, offset: u64, len: usize) -> io::Result<()> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{len} bytes at {offset:#x} are outside the {:#x}-byte BAR",
                    self.size
                ),
            )),
        }
    }
}

impl AsFd for BarMemory {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_and_bounded() {
        let m = BarMemory::new("test-bar", 1 << 40).unwrap();
        let mut b = [0xaa; 8];
        m.read((1 << 40) - 8, &mut b).unwrap();
        assert_eq!(b, [0; 8]);
        m.write(0x1000, &[1, 2, 3]).unwrap();
        m.read(0x1000, &mut b[..3]).unwrap();
        assert_eq!(b[..3], [1, 2, 3]);
        assert!(m.read(1 << 40, &mut b).is_err());
        assert!(m.write(u64::MAX, &[1]).is_err());
    }
}
