//! A test peer built from a Go module of this repository (tests/kube,
//! tests/kubevirt) by its script under scripts/: found in the target
//! directory, built again when missing or older than a `.go`, `go.mod` or
//! `go.sum` of its module, or taken as it is from an environment variable.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use crate::{repo_root, target_dir};

/// A Go test peer: where it is built and by what.
#[derive(Debug, Clone, Copy)]
pub struct GoPeer {
    /// Its directory under the target directory, holding `bins`.
    pub dir: &'static str,
    /// The binaries the script builds there (the first is the peer itself).
    pub bins: &'static [&'static str],
    /// The Go module, relative to the repository's root.
    pub module: &'static str,
    /// The script that builds it, relative to the repository's root.
    pub script: &'static str,
    /// The variable naming another build to use as it is.
    pub env: &'static str,
}

impl GoPeer {
    /// The peer's binary, built first when missing or stale.
    pub fn binary(&self) -> PathBuf {
        if let Some(p) = std::env::var_os(self.env) {
            return PathBuf::from(p);
        }
        let dir = target_dir().join(self.dir);
        let newest = newest_source(&repo_root().join(self.module));
        let built = self
            .bins
            .iter()
            .map(|b| {
                std::fs::metadata(dir.join(b))
                    .and_then(|m| m.modified())
                    .ok()
            })
            .min()
            .flatten();
        if built.is_none_or(|b| b < newest) {
            let status = Command::new("bash")
                .arg(repo_root().join(self.script))
                .status()
                .unwrap_or_else(|e| panic!("bash runs {}: {e}", self.script));
            assert!(
                status.success(),
                "{} ({}, Go) failed: Go 1.26 and the Go module proxy are needed \
                 (scripts/setup.sh says how to get them)",
                self.script,
                self.module
            );
        }
        let bin = dir.join(self.bins[0]);
        assert!(bin.exists(), "{} was not built", bin.display());
        bin
    }
}

/// The newest modification time of the module's Go sources and go.mod/go.sum.
fn newest_source(dir: &Path) -> SystemTime {
    let mut newest = SystemTime::UNIX_EPOCH;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return newest;
    };
    for e in entries.flatten() {
        let p = e.path();
        let t = if p.is_dir() {
            newest_source(&p)
        } else if p
            .extension()
            .is_some_and(|x| x == "go" || x == "mod" || x == "sum")
        {
            e.metadata()
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH)
        } else {
            continue;
        };
        newest = newest.max(t);
    }
    newest
}
