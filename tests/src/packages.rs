//! The Debian packages as an operator meets them: built by
//! `scripts/package.sh`, installed with `dpkg -i` into a copy of the Debian 12
//! root with systemd that `scripts/qemu/setup.sh` caches, and booted (that root
//! packed into an initramfs whose init is systemd) under QEMU 11.1.
//! `tests/tests/packages.rs` has the checks.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use crate::qemu::{require_setup, SETUP_HINT};
use crate::repo_root;

/// The two .debs `scripts/package.sh` made.
#[derive(Debug, Clone)]
pub struct Debs {
    /// p2p-host_VERSION-1_amd64.deb
    pub host: PathBuf,
    /// p2p-guest_VERSION-1_amd64.deb
    pub guest: PathBuf,
}

/// Runs `bash scripts/package.sh` once per test process, in its own target
/// folder (`target/package`, so the outer `cargo test` keeps its own), and
/// returns the two packages it printed.
pub fn debs() -> Debs {
    static DEBS: OnceLock<Debs> = OnceLock::new();
    DEBS.get_or_init(|| {
        let out = Command::new("bash")
            .arg(repo_root().join("scripts/package.sh"))
            .env("CARGO_TARGET_DIR", repo_root().join("target/package"))
            .env_remove("RUSTFLAGS")
            .output()
            .expect("bash runs scripts/package.sh");
        assert!(
            out.status.success(),
            "scripts/package.sh failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let find = |name: &str| {
            stdout
                .lines()
                .map(PathBuf::from)
                .find(|p| {
                    p.file_name()
                        .and_then(|f| f.to_str())
                        .is_some_and(|f| f.starts_with(&format!("{name}_")) && f.ends_with(".deb"))
                })
                .unwrap_or_else(|| panic!("scripts/package.sh printed no {name} .deb:\n{stdout}"))
        };
        Debs {
            host: find("p2p-host"),
            guest: find("p2p-guest"),
        }
    })
    .clone()
}

/// A private copy of the cached Debian 12 root (systemd, man-db,
/// bash-completion), entered with chroot(8). Removed when dropped.
pub struct DebianRoot {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl DebianRoot {
    /// Copies `VP2P_SYSTEMD_ROOT` of `paths.env`; panics with the setup hint
    /// when the cache lacks it (the test fails, it never skips).
    pub fn copy() -> Self {
        let setup = require_setup();
        let cached = PathBuf::from(setup.get("VP2P_SYSTEMD_ROOT"));
        assert!(
            cached.join("lib/systemd/systemd").exists(),
            "{} holds no systemd root; {SETUP_HINT}",
            cached.display()
        );
        let dir = tempfile::Builder::new()
            .prefix("vp2p-debroot.")
            .tempdir_in(repo_root().join("target"))
            .expect("a temporary folder under target/");
        let root = dir.path().join("root");
        let status = Command::new("cp")
            .arg("-a")
            .arg(&cached)
            .arg(&root)
            .status()
            .expect("cp runs");
        assert!(status.success(), "cp -a {} failed", cached.display());
        DebianRoot { _dir: dir, root }
    }

    /// The root folder on this machine.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// Runs `argv` inside the root (chroot, a clean environment).
    pub fn run(&self, argv: &[&str]) -> Output {
        Command::new("chroot")
            .arg(&self.root)
            .args(argv)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("LANG", "C.UTF-8")
            .env("HOME", "/root")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
            .unwrap_or_else(|e| panic!("chroot {}: {e}", self.root.display()))
    }

    /// Runs `argv` inside the root and returns its stdout; panics with its
    /// stderr when it fails.
    pub fn run_ok(&self, argv: &[&str]) -> String {
        let out = self.run(argv);
        assert!(
            out.status.success(),
            "{} in the Debian root: exit {:?}\n{}{}",
            argv.join(" "),
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Copies the packages into the root's /tmp and installs them with
    /// `dpkg -i`; returns dpkg's output.
    pub fn install(&self, debs: &[&Path]) -> String {
        let mut argv = vec!["dpkg".to_string(), "-i".to_string()];
        for deb in debs {
            let name = deb.file_name().expect("a .deb file name");
            std::fs::copy(deb, self.root.join("tmp").join(name)).expect("copy the .deb");
            argv.push(format!("/tmp/{}", name.to_string_lossy()));
        }
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let out = self.run_ok(&argv);
        for deb in debs {
            let _ = std::fs::remove_file(self.root.join("tmp").join(deb.file_name().unwrap()));
        }
        out
    }

    /// Every path below the root (relative, without the leading `/`), except
    /// the records dpkg, man-db and apt keep of what they did and /run (what
    /// tools left at run time, a tmpfs on a real system).
    pub fn paths(&self) -> BTreeSet<String> {
        const BOOKKEEPING: [&str; 6] = [
            "run/",
            "var/lib/dpkg/",
            "var/log/",
            "var/cache/man/",
            "var/cache/debconf/",
            "var/lib/systemd/deb-systemd-helper-enabled/",
        ];
        let mut out = BTreeSet::new();
        let mut stack = vec![self.root.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let path = e.path();
                let rel = path
                    .strip_prefix(&self.root)
                    .expect("below the root")
                    .to_string_lossy()
                    .into_owned();
                if BOOKKEEPING.iter().any(|b| format!("{rel}/").starts_with(b)) {
                    continue;
                }
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(path);
                }
                out.insert(rel);
            }
        }
        out
    }
}

/// The subcommands a binary's own `--help` lists (clap's "Commands:"
/// section), without `help`: what a man page must exist for.
pub fn help_commands(help: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in help.lines() {
        if line.starts_with("Commands:") {
            inside = true;
            continue;
        }
        if inside {
            if !line.starts_with("  ") {
                break;
            }
            // A command's line starts at column 2; its wrapped description
            // lines are indented further.
            if line.as_bytes().get(2).is_some_and(|b| *b != b' ') {
                let name = line.split_whitespace().next().unwrap_or("");
                if name != "help" {
                    out.push(name.to_string());
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::help_commands;

    #[test]
    fn the_commands_section_of_clap_help_is_read_as_written() {
        // The layout clap 4 prints (wrapped description lines indented).
        let help = "Tool.\n\nUsage: t <COMMAND>\n\nCommands:\n  topo      Print the\n            topology\n  nccl-topo  The file\n  help      Print this message\n\nOptions:\n  -h, --help  Print help\n";
        assert_eq!(help_commands(help), ["topo", "nccl-topo"]);
    }
}
