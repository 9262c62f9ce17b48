//! Where the overlay reads and writes the bytes it does not own.

use std::io;

/// The device's own config space, read and written on demand.
///
/// A VFIO device implements it with `pread`/`pwrite` on its config region; a
/// captured config is a `Vec<u8>`. Offsets are config-space offsets; reads and
/// writes may have any width and alignment (the overlay splits guest accesses
/// around the bytes it owns, so a 4-byte guest access can arrive here as a
/// 1-, 2- or 3-byte one).
pub trait PhysicalConfig {
    /// Fills `buf` with the bytes at `offset..offset + buf.len()`.
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes `data` at `offset..offset + data.len()`.
    fn write(&mut self, offset: u64, data: &[u8]) -> io::Result<()>;
}

/// A captured config space: reads and writes land in memory.
impl PhysicalConfig for Vec<u8> {
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let range = range(self.len(), offset, buf.len())?;
        buf.copy_from_slice(&self[range]);
        Ok(())
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        let range = range(self.len(), offset, data.len())?;
        self[range].copy_from_slice(data);
        Ok(())
    }
}

/// Lets a caller keep ownership of its device and lend it to an overlay.
impl<T: PhysicalConfig + ?Sized> PhysicalConfig for &mut T {
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read(offset, buf)
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        (**self).write(offset, data)
    }
}

/// `offset..offset + n` inside a config of `len` bytes, or an error naming it.
fn range(len: usize, offset: u64, n: usize) -> io::Result<std::ops::Range<usize>> {
    usize::try_from(offset)
        .ok()
        .and_then(|start| Some(start..start.checked_add(n)?))
        .filter(|r| r.end <= len)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("config access of {n} bytes at {offset:#x} is past the end of the {len}-byte config"),
            )
        })
}
