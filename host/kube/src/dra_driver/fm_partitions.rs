//! Fabric Manager's partition list as the driver publishes it: the file
//! (`fmpm -l` output, `--fm-partitions`) read again whenever it changed
//! (its modification time or length) when the driver looks at its devices,
//! so a partition created or removed on the host reaches the slices
//! (`fmPartition<N>` attributes) without a restart. A file that no longer
//! reads keeps the last list that did, and says so once.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use p2p_allocation::chooser::{parse_fmpm_list, FmPartition};

/// The most a partition list may hold (a full list of an 8-GPU board is a
/// few kB).
pub const FILE_MAX: u64 = 1 << 20;

/// What identifies one version of the file.
type Stamp = (Option<SystemTime>, u64);

/// The partition list of one file, read again when it changes.
#[derive(Debug)]
pub struct FmPartitionsFile {
    path: PathBuf,
    /// The stamp last read, and the list that file held (or the last good
    /// one when it did not read).
    state: Mutex<(Option<Stamp>, Arc<Vec<FmPartition>>)>,
    log: fn(&str),
}

/// The partitions in `path`, or why they cannot be read.
pub fn read(path: &Path) -> Result<Vec<FmPartition>, String> {
    let bytes = p2p_host_io::read_limited(path, FILE_MAX)
        .map_err(|e| format!("reading {}: {e}", path.display()))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        format!(
            "{}: not UTF-8 text (byte {})",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })?;
    parse_fmpm_list(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn stamp(path: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok(), m.len()))
}

impl FmPartitionsFile {
    /// The list in `path`, read now; an error names the file.
    pub fn open(path: &Path, log: fn(&str)) -> Result<Self, String> {
        let st = stamp(path);
        let list = read(path)?;
        Ok(Self {
            path: path.to_path_buf(),
            state: Mutex::new((st, Arc::new(list))),
            log,
        })
    }

    /// The list now: the file read again when it changed since.
    pub fn current(&self) -> Arc<Vec<FmPartition>> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = stamp(&self.path);
        if now != state.0 {
            state.0 = now;
            match read(&self.path) {
                Ok(list) => {
                    (self.log)(&format!(
                        "{} changed: {} partition(s) now",
                        self.path.display(),
                        list.len()
                    ));
                    state.1 = Arc::new(list);
                }
                Err(e) => (self.log)(&format!(
                    "{e}: the {} partition(s) read before are kept",
                    state.1.len()
                )),
            }
        }
        state.1.clone()
    }
}
