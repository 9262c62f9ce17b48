//! Build script of p2p-host and p2p-guest: records the commit they are built
//! from as `VP2P_COMMIT`, which `--version` prints. `VP2P_COMMIT` in the
//! environment wins (builds from a source tarball); outside a git checkout
//! it is `unknown`. Uncommitted changes are not marked: the commit is the one
//! HEAD named when the binary was built.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Prints the commit stamp for cargo (called by the crates' build scripts).
pub fn main() {
    println!("cargo:rerun-if-env-changed=VP2P_COMMIT");
    let commit = match std::env::var("VP2P_COMMIT") {
        Ok(c) if !c.is_empty() => c,
        _ => from_checkout().unwrap_or_else(|| "unknown".to_string()),
    };
    println!("cargo:rustc-env=VP2P_COMMIT={commit}");
}

fn from_checkout() -> Option<String> {
    let head = git(&["rev-parse", "--short=12", "HEAD"])?;
    // Rebuild when HEAD moves: a checkout changes HEAD, a commit the branch
    // (a loose ref, or packed-refs once git packed it).
    for path in ["HEAD", "packed-refs"] {
        if let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", path]) {
            if std::path::Path::new(&p).exists() {
                println!("cargo:rerun-if-changed={p}");
            }
        }
    }
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", &r]) {
            if std::path::Path::new(&p).exists() {
                println!("cargo:rerun-if-changed={p}");
            }
        }
    }
    Some(head)
}
