//! The Debian packages as an operator meets them: built by
//! `scripts/package.sh`, installed with `dpkg -i` into a copy of the Debian 12
//! root with systemd that `scripts/qemu/setup.sh` caches, and booted (that root
//! packed into an initramfs whose init is systemd) under QEMU 11.1.
//! `tests/tests/guests/packages.rs` has the checks.

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
/// folder (`target/package`, so the outer `cargo test` keeps its own), with
/// a lighter release profile, and returns the two packages it printed.
pub fn debs() -> Debs {
    static DEBS: OnceLock<Debs> = OnceLock::new();
    DEBS.get_or_init(|| {
        let out = Command::new("bash")
            .arg(repo_root().join("scripts/package.sh"))
            .env("CARGO_TARGET_DIR", repo_root().join("target/package"))
            // What a package holds does not depend on how hard its binaries
            // were optimised: the suite's release build skips LTO and keeps
            // to opt-level 1, a quarter less of CI's time on two cores.
            .env("CARGO_PROFILE_RELEASE_LTO", "false")
            .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "1")
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

/// What the systemd guest runs once `multi-user.target` is reached: reports
/// the units, the NCCL file and the journal on the serial console (lines
/// `VP2P-R KEY VALUE`), with `vp2p.host_units=1` on the kernel command line
/// also starts the host units, then powers off.
pub const BOOT_REPORT: &str = r#"#!/bin/sh
# vp2p boot test (tests/tests/guests/packages.rs): report what systemd did, then power off.
exec >/dev/ttyS0 2>&1
r() { sed "s/^/VP2P-R $1 /"; }
for u in vp2p-nccl-topo.service vp2p-nccl-topo-cliques.service sysinit.target multi-user.target; do
    systemctl show -p ActiveState -p Result -p ConditionResult -p ExecMainStatus \
        -p ActiveEnterTimestampMonotonic "$u" | r "$u"
done
f=/var/run/nvidia-topologyd/virtualTopology.xml
if [ -e "$f" ]; then echo present | r file; r xml <"$f"; else echo absent | r file; fi
journalctl -b -o cat --no-pager -u vp2p-nccl-topo.service -u vp2p-nccl-topo-cliques.service | r journal
if grep -q 'vp2p.host_units=1' /proc/cmdline; then
    systemctl start p2p-host-serve@missing.service p2p-host-serve@vm1.service
    sleep 8
    for u in p2p-host-serve@missing.service p2p-host-serve@vm1.service; do
        systemctl show -p ActiveState -p Result -p NRestarts -p ExecMainStatus "$u" | r "$u"
        journalctl -b -o cat --no-pager -u "$u" | r "journal-$u"
    done
    stat -c '%n %a %G %F' /run/vp2p/vm1 /run/vp2p/vm1/gpu0.sock 2>&1 | r stat
fi
echo "==VP2P-EXIT 0=="
systemctl poweroff -ff
"#;

/// `VP2P-R KEY VALUE` lines of a console log: (KEY, VALUE) in order.
pub fn report_lines(console: &str) -> Vec<(String, String)> {
    console
        .lines()
        .filter_map(|l| {
            let l = l.trim_end_matches('\r');
            let at = l.find("VP2P-R ")?;
            let rest = &l[at + "VP2P-R ".len()..];
            let (k, v) = rest.split_once(' ').unwrap_or((rest, ""));
            Some((k.to_string(), v.to_string()))
        })
        .collect()
}

/// `systemctl show` property `prop` of `unit` in a report.
pub fn unit_property(report: &[(String, String)], unit: &str, prop: &str) -> Option<String> {
    report
        .iter()
        .filter(|(k, _)| k == unit)
        .find_map(|(_, v)| v.strip_prefix(&format!("{prop}=")).map(str::to_string))
}

impl DebianRoot {
    /// Turns the root into a bootable initramfs at `out` (gzip'd cpio, init
    /// = systemd): the kernel's `qemu_fw_cfg` module, a fixed machine id (no
    /// first-boot prompts), [`BOOT_REPORT`] as a unit after
    /// `multi-user.target`, getty off; docs, man pages and locales left out.
    pub fn pack_initramfs(&self, out: &Path) {
        let setup = require_setup();
        let kver = setup.kernel_version().to_string();
        let modules = PathBuf::from(setup.get("VP2P_KERNEL_MODULES"));
        let r = &self.root;
        let rel = "kernel/drivers/firmware/qemu_fw_cfg.ko";
        let dest = r.join("lib/modules").join(&kver).join(rel);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(modules.join(rel), &dest)
            .unwrap_or_else(|e| panic!("{}: {e}; {SETUP_HINT}", modules.join(rel).display()));
        let status = Command::new("depmod")
            .arg("-b")
            .arg(r)
            .arg(&kver)
            .status()
            .expect("depmod runs");
        assert!(status.success(), "depmod -b {} failed", r.display());
        std::fs::write(
            r.join("etc/machine-id"),
            "5f1c0de0c0ffee00a11ce0b0b0000001\n",
        )
        .unwrap();
        let units = r.join("etc/systemd/system");
        for masked in [
            "systemd-firstboot.service",
            "serial-getty@ttyS0.service",
            "getty@tty1.service",
        ] {
            let _ = std::fs::remove_file(units.join(masked));
            std::os::unix::fs::symlink("/dev/null", units.join(masked)).unwrap();
        }
        let script = r.join("usr/local/sbin/vp2p-boot-report");
        std::fs::create_dir_all(script.parent().unwrap()).unwrap();
        std::fs::write(&script, BOOT_REPORT).unwrap();
        std::fs::set_permissions(
            &script,
            <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755),
        )
        .unwrap();
        std::fs::write(
            units.join("vp2p-boot-report.service"),
            "[Unit]\nDescription=vp2p boot test: report and power off\nAfter=multi-user.target\n\n\
             [Service]\nType=oneshot\nExecStart=/usr/local/sbin/vp2p-boot-report\n\n\
             [Install]\nWantedBy=multi-user.target\n",
        )
        .unwrap();
        let wants = units.join("multi-user.target.wants");
        std::fs::create_dir_all(&wants).unwrap();
        let _ = std::fs::remove_file(wants.join("vp2p-boot-report.service"));
        std::os::unix::fs::symlink(
            "/etc/systemd/system/vp2p-boot-report.service",
            wants.join("vp2p-boot-report.service"),
        )
        .unwrap();
        let _ = std::fs::remove_file(r.join("init"));
        std::os::unix::fs::symlink("/lib/systemd/systemd", r.join("init")).unwrap();
        let pack = format!(
            "set -o pipefail; cd '{}' && find . \\( -path ./usr/share/doc -o -path ./usr/share/man \
             -o -path ./usr/share/locale -o -path ./usr/share/info -o -path ./var/cache/apt \\) \
             -prune -o -print | cpio -o -H newc --quiet | gzip -1 >'{}'",
            r.display(),
            out.display()
        );
        let status = Command::new("bash")
            .args(["-c", &pack])
            .status()
            .expect("bash runs find | cpio | gzip");
        assert!(status.success(), "packing {} failed", r.display());
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
