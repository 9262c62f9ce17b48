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
    pub fn load(path: &Path, version: u32) -> Result<Self, CheckpointError> {
        remove_stale_temporaries(path);
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::empty(version)),
            Err(source) => {
                return Err(CheckpointError::Read {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        // The version first: a newer driver's file is told as such even
        // when its entries would not read.
        #[derive(Deserialize)]
        struct Versioned {
            version: u32,
        }
        let found = serde_json::from_str::<Versioned>(&text)
            .map_err(|e| CheckpointError::damaged(path, &e))?
            .version;
        if found != version {
            return Err(CheckpointError::Version {
                path: path.to_path_buf(),
                found,
                reads: version,
            });
        }
        serde_json::from_str(&text).map_err(|e| CheckpointError::damaged(path, &e))
    }

    /// What can be read of the checkpoint at `path`, whatever its state:
    /// each claim whose record reads (a damaged file may keep some, a file
    /// that is not JSON none), and what could not be read. The file itself
    /// is left as it is.
    pub fn salvage(path: &Path, version: u32) -> Salvaged<E> {
        let mut checkpoint = Self::empty(version);
        let mut lost = Vec::new();
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Salvaged { checkpoint, lost };
            }
            Err(e) => {
                lost.push(format!("the whole file: {e}"));
                return Salvaged { checkpoint, lost };
            }
        };
        let value: serde_json::Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                lost.push(format!("the whole file: {e}"));
                return Salvaged { checkpoint, lost };
            }
        };
        match value.get("claims").and_then(|c| c.as_object()) {
            Some(claims) => {
                for (uid, record) in claims {
                    match serde_json::from_value::<E>(record.clone()) {
                        Ok(e) => {
                            checkpoint.claims.insert(uid.clone(), e);
                        }
                        Err(e) => lost.push(format!("claim {uid}: {e}")),
                    }
                }
            }
            None => lost.push("its claims: no \"claims\" object".into()),
        }
        Salvaged { checkpoint, lost }
    }

    /// Writes the checkpoint to `path` atomically.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let text = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        write_atomic(path, &text)
    }
}

/// Why a checkpoint could not be read. Each names the file; what to do
/// about it is the driver's to say (it knows its recovery).
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The file is there but could not be read.
    #[error("reading the checkpoint {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a checkpoint: truncated, overwritten, not JSON.
    #[error("the checkpoint {} is damaged at byte {offset} (line {line}, column {column}): {cause}", path.display())]
    Damaged {
        /// The file.
        path: PathBuf,
        /// The byte offset where reading stopped.
        offset: usize,
        /// Its line (1-based).
        line: usize,
        /// Its column (1-based; 0 at the very start of a line).
        column: usize,
        /// What was wrong there.
        cause: String,
    },
    /// The file is of another format version.
    #[error(
        "the checkpoint {} is of version {found}, {} (this driver reads version {reads})",
        path.display(),
        if found > reads { "written by a newer driver" } else { "written by an older driver" }
    )]
    Version {
        /// The file.
        path: PathBuf,
        /// The version it holds.
        found: u32,
        /// The version this driver reads.
        reads: u32,
    },
}

impl CheckpointError {
    fn damaged(path: &Path, e: &serde_json::Error) -> Self {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        // serde_json counts lines and columns; the byte offset follows from them.
        let offset = text
            .split_inclusive('\n')
            .take(e.line().saturating_sub(1))
            .map(str::len)
            .sum::<usize>()
            + e.column();
        let cause = e.to_string();
        let cause = cause
            .rsplit_once(" at line ")
            .map_or(cause.as_str(), |(c, _)| c)
            .to_string();
        CheckpointError::Damaged {
            path: path.to_path_buf(),
            offset: offset.min(text.len()),
            line: e.line(),
            column: e.column(),
            cause,
        }
    }

    /// The file at fault.
    pub fn path(&self) -> &Path {
        match self {
            CheckpointError::Read { path, .. }
            | CheckpointError::Damaged { path, .. }
            | CheckpointError::Version { path, .. } => path,
        }
    }
}

/// What [`Checkpoint::salvage`] could read of a checkpoint.
#[derive(Debug)]
pub struct Salvaged<E> {
    /// The claims whose records read, at the driver's version.
    pub checkpoint: Checkpoint<E>,
    /// What could not be read, each naming the claim or the file.
    pub lost: Vec<String>,
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
    pub fn open(path: &Path, version: u32) -> Result<Self, CheckpointError> {
        Ok(Self::holding(path, Checkpoint::load(path, version)?))
    }

    /// The file at `path` holding `checkpoint` (written at the next change).
    pub fn holding(path: &Path, checkpoint: Checkpoint<E>) -> Self {
        Self {
            path: path.to_path_buf(),
            state: std::sync::Mutex::new((checkpoint, 0)),
            saved: std::sync::Mutex::new(0),
        }
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
        let e = Names::load(&path, 1).unwrap_err().to_string();
        // 32 bytes, the last a space: reading stopped at the end (byte 32,
        // counted from 1).
        assert_eq!(
            e,
            format!(
                "the checkpoint {} is damaged at byte 32 (line 1, column 32): EOF while parsing a value",
                path.display()
            )
        );
        std::fs::write(&path, "{\"version\": 1,\n \"claims\": [}").unwrap();
        let e = Names::load(&path, 1).unwrap_err().to_string();
        // Line 1 is 15 bytes with its newline; the '}' is line 2's 13th
        // byte: byte 28.
        assert!(e.contains("damaged at byte 28 (line 2, column 13)"), "{e}");
        std::fs::write(&path, "").unwrap();
        let e = Names::load(&path, 1).unwrap_err().to_string();
        assert!(e.contains("damaged at byte 0 (line 1, column 0)"), "{e}");
        std::fs::write(&path, "{\"version\": 2, \"claims\": {\"u\": 7}}").unwrap();
        let e = Names::load(&path, 1).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "the checkpoint {} is of version 2, written by a newer driver (this driver reads version 1)",
                path.display()
            )
        );
    }

    #[test]
    fn salvage_keeps_each_record_that_reads_and_names_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint.json");
        std::fs::write(
            &path,
            r#"{"version": 9, "claims": {"u1": "vm-a", "u2": 7, "u3": "vm-c"}}"#,
        )
        .unwrap();
        let s = Names::salvage(&path, 1);
        assert_eq!(s.checkpoint.version, 1);
        assert_eq!(
            s.checkpoint.claims.into_iter().collect::<Vec<_>>(),
            [
                ("u1".to_string(), "vm-a".to_string()),
                ("u3".into(), "vm-c".into())
            ]
        );
        assert_eq!(s.lost.len(), 1);
        assert!(
            s.lost[0].starts_with("claim u2: invalid type: integer `7`"),
            "{:?}",
            s.lost
        );
        std::fs::write(&path, "{\"version\": 1, \"claims\": {\"u1\": \"vm").unwrap();
        let s = Names::salvage(&path, 1);
        assert!(s.checkpoint.claims.is_empty());
        assert!(s.lost[0].starts_with("the whole file: EOF"), "{:?}", s.lost);
    }
}
