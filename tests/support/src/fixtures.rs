//! The repository's committed fixtures and the build's target directory.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root (the workspace directory).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("tests/support sits two levels below the workspace root")
        .to_path_buf()
}

/// `tests/fixtures/<name>`.
pub fn fixture_dir(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures").join(name)
}

/// Unpacks `tests/fixtures/<name>/sysfs.tgz` into a fresh temporary directory;
/// the tree is at `<dir>/sysfs`.
pub fn unpack_fixture(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temporary directory");
    let tgz = fixture_dir(name).join("sysfs.tgz");
    let status = Command::new("tar")
        .arg("xzf")
        .arg(&tgz)
        .arg("-C")
        .arg(dir.path())
        .status()
        .expect("tar runs");
    assert!(status.success(), "tar xzf {} failed", tgz.display());
    dir
}

/// Cargo's target directory for this workspace.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
}
