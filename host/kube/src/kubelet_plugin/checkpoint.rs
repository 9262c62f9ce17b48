//! A DRA driver's record of what it prepared, on disk, so that a restart
//! neither loses a preparation (unprepare still undoes it) nor doubles one
//! (prepare again answers the same ids): the file's mechanics, generic over
//! the driver's record of one claim. The file is JSON, `{"version": N,
//! "claims": {<uid>: <entry>}}`, the version the driver's own; it is
//! written whole and atomically after every change, and temporary files a
//! killed writer left beside it are removed when it is read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Every claim a driver prepared or is preparing, by uid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint<E> {
    /// The format's version (the driver's).
    pub version: u32,
    /// Claim uid to its record.
    pub claims: BTreeMap<String, E>,
}

/// Writes `bytes` to `path` atomically: a temporary file in the same
/// directory, synced, then renamed over `path`, so a reader (the container
/// runtime, a restarted driver) sees the old file or the new one, never half.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!("{}{}", temporary_prefix(path), std::process::id()));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)
}

/// The name [`write_atomic`]'s temporary files for `path` start with; the
/// writer's process id follows.
fn temporary_prefix(path: &Path) -> String {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    format!(".{}.tmp-", name.unwrap_or_default())
}

/// Removes the temporary files [`write_atomic`] left for `path` when its
/// process was killed between writing and renaming (a process no longer
/// alive: a live one may be about to rename its own). Best effort: what
/// cannot be read or removed stays.
pub fn remove_stale_temporaries(path: &Path) {
    let Some(dir) = path.parent() else {
        return;
    };
    let prefix = temporary_prefix(path);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(&prefix)
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let alive = pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists();
        if !alive {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

impl<E: Serialize + DeserializeOwned> Checkpoint<E> {
    /// No claim, at `version`.
    pub fn empty(version: u32) -> Self {
        Self {
            version,
            claims: BTreeMap::new(),
        }
    }

    /// The checkpoint at `path`, which must be at `version`; an absent file
    /// is an empty checkpoint. Temporary files of a killed writer beside it
    /// are removed.
    pub fn load(path: &Path, version: u32) -> Result<Self, String> {
        remove_stale_temporaries(path);
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let c: Self =
                    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
                if c.version != version {
                    return Err(format!(
                        "{}: version {} (this driver reads {version})",
                        path.display(),
                        c.version
                    ));
                }
                Ok(c)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::empty(version)),
            Err(e) => Err(format!("reading {}: {e}", path.display())),
        }
    }

    /// Writes the checkpoint to `path` atomically.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let text = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        write_atomic(path, &text)
    }
}

/// The checkpoint as a driver keeps it: in memory, and on disk after
/// every change. A change is on disk when [`CheckpointFile::change`]
/// returns; changes made at once share a write (the first writer to get the
/// file writes everything changed so far, and those whose change it carried
/// return without writing), so claims prepared at once do not queue one
/// full write each.
#[derive(Debug)]
pub struct CheckpointFile<E> {
    path: PathBuf,
    /// The checkpoint and the number of changes made to it.
    state: std::sync::Mutex<(Checkpoint<E>, u64)>,
    /// The number of changes the file holds; held while writing it.
    saved: std::sync::Mutex<u64>,
}

impl<E: Clone + Serialize + DeserializeOwned> CheckpointFile<E> {
    /// The checkpoint at `path`, at `version` ([`Checkpoint::load`]).
    pub fn open(path: &Path, version: u32) -> Result<Self, String> {
        Ok(Self {
            path: path.to_path_buf(),
            state: std::sync::Mutex::new((Checkpoint::load(path, version)?, 0)),
            saved: std::sync::Mutex::new(0),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, (Checkpoint<E>, u64)> {
        // A panic while holding the lock leaves the checkpoint as last changed.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The checkpoint now.
    pub fn snapshot(&self) -> Checkpoint<E> {
        self.state().0.clone()
    }

    /// The record of claim `uid` now.
    pub fn entry(&self, uid: &str) -> Option<E> {
        self.state().0.claims.get(uid).cloned()
    }

    /// Changes the checkpoint with `f` and returns once the file holds the
    /// change.
    pub fn change<R>(&self, f: impl FnOnce(&mut Checkpoint<E>) -> R) -> std::io::Result<R> {
        let (r, mine) = {
            let mut st = self.state();
            let r = f(&mut st.0);
            st.1 += 1;
            (r, st.1)
        };
        let mut saved = self.saved.lock().unwrap_or_else(|e| e.into_inner());
        if *saved >= mine {
            return Ok(r);
        }
        let (text, now) = {
            let st = self.state();
            (
                serde_json::to_vec_pretty(&st.0).map_err(std::io::Error::other)?,
                st.1,
            )
        };
        write_atomic(&self.path, &text)?;
        *saved = now;
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver's record of a claim, as small as it gets: its name.
    type Names = Checkpoint<String>;

    #[test]
    fn changes_made_at_once_are_each_on_disk_when_their_call_returns() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint.json");
        let file = std::sync::Arc::new(CheckpointFile::<String>::open(&path, 1).unwrap());
        let threads: Vec<_> = (0..16)
            .map(|i| {
                let file = file.clone();
                let path = path.clone();
                std::thread::spawn(move || {
                    for j in 0..20 {
                        let uid = format!("u{i}-{j}");
                        file.change(|cp| {
                            cp.claims.insert(uid.clone(), uid.clone());
                        })
                        .unwrap();
                        // Returned: the file read now holds it.
                        assert!(Names::load(&path, 1).unwrap().claims.contains_key(&uid));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(Names::load(&path, 1).unwrap().claims.len(), 16 * 20);
        assert_eq!(Names::load(&path, 1).unwrap(), file.snapshot());
    }

    #[test]
    fn a_killed_writers_temporary_file_is_removed_a_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint.json");
        // pid_max is at most 2^22 (Documentation/admin-guide/sysctl/kernel.rst):
        // no process has a larger id.
        let dead = dir.path().join(".checkpoint.json.tmp-4294967295");
        let live = dir
            .path()
            .join(format!(".checkpoint.json.tmp-{}", std::process::id()));
        let other = dir.path().join(".other.json.tmp-4294967295");
        for f in [&dead, &live, &other] {
            std::fs::write(f, "{").unwrap();
        }
        assert!(Names::load(&path, 1).unwrap().claims.is_empty());
        assert!(!dead.exists());
        assert!(live.exists() && other.exists());
    }

    #[test]
    fn a_damaged_or_newer_checkpoint_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint.json");
        std::fs::write(&path, "{\"version\": 1, \"claims\": {\"u1\": ").unwrap();
        let e = Names::load(&path, 1).unwrap_err();
        assert!(e.starts_with(&path.display().to_string()), "{e}");
        std::fs::write(&path, "{\"version\": 2, \"claims\": {}}").unwrap();
        let e = Names::load(&path, 1).unwrap_err();
        assert!(e.contains("version 2 (this driver reads 1)"), "{e}");
    }
}
