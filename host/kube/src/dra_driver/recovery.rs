//! What the driver finds again, and what it lets go, after the node or the
//! driver went away: a checkpoint that does not read (refused at start,
//! naming the file and the way out) and `--recover`, which gives back what
//! it still records and starts clean; entries whose claims the API server
//! no longer has, released at start; and a prepared claim whose files or
//! binding a reboot took (the CDI spec and the metadata live on tmpfs, the
//! binding in the kernel), found not intact so that prepare does it again.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::checkpoint::{self, CheckpointFile, Entry};
use super::prepare::Driver;
use super::vfio::VFIO_PCI;
use super::Settings;
use crate::kubelet_plugin::checkpoint::{Checkpoint, CheckpointError};
use crate::kubelet_plugin::ClaimRef;

/// What `--recover` starts from: the records salvaged from the file, and
/// where the file went.
#[derive(Debug)]
pub struct Recovering {
    /// Where the file was moved (None: there was none).
    pub aside: Option<PathBuf>,
    /// What could not be read of it.
    pub lost: Vec<String>,
}

/// The checkpoint the driver starts from. Without `recover`, the file as
/// it is, or an error naming it and what to do. With it, the records that
/// still read (the file moved aside for a post-mortem), which the caller
/// then releases ([`Driver::release_recovered`]).
pub fn open(settings: &Settings) -> Result<(CheckpointFile, Option<Recovering>), String> {
    let path = &settings.plugin.checkpoint;
    if !settings.recover {
        return CheckpointFile::open(path, checkpoint::VERSION)
            .map(|f| (f, None))
            .map_err(|e| advice(&e));
    }
    let salvaged = Checkpoint::<Entry>::salvage(path, checkpoint::VERSION);
    let aside = if path.exists() {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".recovered-{secs}"));
        let aside = PathBuf::from(name);
        std::fs::rename(path, &aside).map_err(|e| {
            format!(
                "--recover: moving the checkpoint {} aside to {}: {e}",
                path.display(),
                aside.display()
            )
        })?;
        Some(aside)
    } else {
        None
    };
    let file = CheckpointFile::holding(path, salvaged.checkpoint);
    Ok((
        file,
        Some(Recovering {
            aside,
            lost: salvaged.lost,
        }),
    ))
}

/// `e` with what the operator can do about it.
fn advice(e: &CheckpointError) -> String {
    let recover = format!(
        "run the driver once with --recover: it gives back what the file still records \
         (functions to their drivers, CDI specs, device metadata), moves it aside as {}.recovered-<time> \
         and starts with an empty checkpoint; drain the node first, a running VM keeps its functions \
         (docs/kubevirt.md, \"Recovering the checkpoint\")",
        e.path().display()
    );
    match e {
        CheckpointError::Version { found, reads, .. } if found > reads => {
            format!(
                "{e}: run that driver again (a downgrade cannot read its records), or {recover}"
            )
        }
        _ => format!("{e}: {recover}"),
    }
}

impl Driver {
    /// Releases every claim `--recover` salvaged and removes the driver's
    /// CDI specs and metadata directories that no record names (a record
    /// the file lost); what cannot be released stays recorded and is told.
    pub(super) fn release_recovered(&self, r: &Recovering) -> Result<(), String> {
        let log = self.settings().plugin.log;
        if let Some(a) = &r.aside {
            log(&format!(
                "--recover: the checkpoint was moved to {}",
                a.display()
            ));
        }
        for l in &r.lost {
            log(&format!("--recover: could not read {l}"));
        }
        let recorded = self.recorded();
        log(&format!(
            "--recover: releasing the {} claim(s) it still records",
            recorded.claims.len()
        ));
        let mut failed = 0;
        for (uid, e) in &recorded.claims {
            let claim = ClaimRef {
                namespace: e.namespace.clone(),
                name: e.name.clone(),
                uid: uid.clone(),
            };
            match self.undo_and_forget(&claim) {
                Ok(()) => log(&format!("--recover: released {claim}")),
                Err(err) => {
                    failed += 1;
                    log(&format!("--recover: {err} (kept in the checkpoint)"));
                }
            }
        }
        self.remove_unrecorded_files();
        self.write_checkpoint()
            .map_err(|e| format!("--recover: writing the checkpoint: {e}"))?;
        if failed > 0 {
            log(&format!(
                "--recover: {failed} claim(s) could not be released; the kubelet's unprepare retries them"
            ));
        }
        Ok(())
    }

    /// Removes the driver's CDI specs (`<driver>-<uid>.json`) and metadata
    /// directories (`<uid>`) of claims the checkpoint does not record.
    /// Functions a lost record had bound stay on vfio-pci: their driver
    /// before is not known.
    fn remove_unrecorded_files(&self) {
        let s = self.settings();
        let recorded: BTreeSet<String> = self.recorded().claims.into_keys().collect();
        let prefix = format!("{}-", s.plugin.driver_name);
        for (dir, spec) in [(&s.cdi_dir, true), (&s.metadata_dir, false)] {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let uid = if spec {
                    match name
                        .strip_prefix(&prefix)
                        .and_then(|n| n.strip_suffix(".json"))
                    {
                        Some(u) => u.to_string(),
                        None => continue,
                    }
                } else {
                    name.clone()
                };
                if recorded.contains(&uid) {
                    continue;
                }
                let path = e.path();
                let removed = if spec {
                    std::fs::remove_file(&path)
                } else {
                    std::fs::remove_dir_all(&path)
                };
                match removed {
                    Ok(()) => (s.plugin.log)(&format!(
                        "--recover: removed {} (no claim records it)",
                        path.display()
                    )),
                    Err(err) => {
                        (s.plugin.log)(&format!("--recover: removing {}: {err}", path.display()))
                    }
                }
            }
        }
    }

    /// Releases the recorded claims the API server no longer has (deleted
    /// while the driver was down, or replaced by another of the same name):
    /// their functions given back, their files removed. A claim whose state
    /// cannot be read now is kept. Returns how many were released.
    pub fn reconcile(&self) -> usize {
        let s = self.settings();
        let log = s.plugin.log;
        let mut released = 0;
        for (uid, e) in self.recorded().claims {
            let claim = ClaimRef {
                namespace: e.namespace.clone(),
                name: e.name.clone(),
                uid,
            };
            match self.claims().exists(&claim, s.plugin.api_timeout) {
                Ok(true) => {}
                Ok(false) => {
                    log(&format!(
                        "{claim}: gone from the API server while the driver was away: releasing it"
                    ));
                    match self.unprepare(&claim, crate::kubelet_plugin::Deadline::NONE) {
                        Ok(()) => released += 1,
                        Err(err) => log(&format!("{err} (kept; retried at the next start)")),
                    }
                }
                Err(err) => log(&format!("{claim}: kept, its state unknown: {err}")),
            }
        }
        released
    }

    /// What a reboot (or a hand) took from a prepared claim: its files
    /// absent, or a device's function not on vfio-pci. None: intact.
    pub(super) fn missing(&self, entry: &Entry) -> Option<String> {
        if let Some(f) = entry.files.iter().find(|f| !Path::new(f).exists()) {
            return Some(format!("{} is gone", f.display()));
        }
        for d in entry.devices.iter().filter(|d| !d.admin_access) {
            let Ok(bdf) = d.bdf.parse() else {
                return Some(format!("device {} has no address {:?}", d.device, d.bdf));
            };
            let driver = self.bus().driver(bdf);
            if driver.as_deref() != Some(VFIO_PCI) {
                return Some(format!(
                    "device {} ({bdf}) is bound to {}, not vfio-pci",
                    d.device,
                    driver.as_deref().unwrap_or("no driver")
                ));
            }
        }
        None
    }
}
