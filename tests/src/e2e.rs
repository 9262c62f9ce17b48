//! End-to-end injection (issue "Injection end to end"): GPUs served over
//! vfio-user by the real `p2p-host serve`, a Debian kernel booted under QEMU
//! 11.1 (TCG) with boot.sh's `vfio-user-gpus` topology, and the workspace's
//! `p2p-guest probe` / `p2p-host topo` / `lspci` / `setpci` inside. This module
//! has the plumbing; `tests/tests/guests/e2e_injection.rs` has the checks.

use crate::process::{SpawnOwned, Spawned};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use p2p_report::PlanReport;

use crate::qemu::{require_setup, script, Booted, QemuSetup, SETUP_HINT};
use crate::{fixture_dir, repo_root};

/// The committed capture of this topology's guest (planned on before the boot).
pub const FIXTURE: &str = "qemu-11.1-vfio-user-gpus";
/// BARs above this are served at this size (the H200's 256 GiB BAR2 would not
/// fit the test VM's address space).
pub const MAX_BAR: &str = "256M";

/// One GPU of boot.sh's `vfio-user-gpus`: its QEMU id (and socket name), the
/// port it sits on, and the address the guest gives it.
#[derive(Debug, Clone, Copy)]
pub struct GpuSlot {
    /// QEMU device id, also its vfio-user socket's name (`gpu0.sock`).
    pub name: &'static str,
    /// QEMU id of the PCIe port it is plugged into (`sw0dn0`: switch 0
    /// downstream port 0; `rp0b`: a root port).
    pub port: &'static str,
    /// The address the guest gives it.
    pub bdf: &'static str,
}

/// The GPUs in boot.sh order (the table in boot.sh's `topo_vfio_user_gpus`).
pub const GPUS: [GpuSlot; 6] = [
    GpuSlot {
        name: "gpu0",
        port: "sw0dn0",
        bdf: "0000:23:00.0",
    },
    GpuSlot {
        name: "gpu1",
        port: "sw0dn1",
        bdf: "0000:24:00.0",
    },
    GpuSlot {
        name: "gpu2",
        port: "rp0b",
        bdf: "0000:25:00.0",
    },
    GpuSlot {
        name: "gpu3",
        port: "rp2a",
        bdf: "0000:41:00.0",
    },
    GpuSlot {
        name: "gpu4",
        port: "sw1dn0",
        bdf: "0000:83:00.0",
    },
    GpuSlot {
        name: "gpu5",
        port: "sw1dn1",
        bdf: "0000:84:00.0",
    },
];

/// Pair classes from QEMU's command line (same switch PIX, same pxb PHB, pxb0
/// and pxb2 on node 0 NODE, node 0 and node 1 SYS), in [`GPUS`] order.
pub const CLASSES: [[&str; 6]; 6] = [
    ["X", "PIX", "PHB", "NODE", "SYS", "SYS"],
    ["PIX", "X", "PHB", "NODE", "SYS", "SYS"],
    ["PHB", "PHB", "X", "NODE", "SYS", "SYS"],
    ["NODE", "NODE", "NODE", "X", "SYS", "SYS"],
    ["SYS", "SYS", "SYS", "SYS", "X", "PIX"],
    ["SYS", "SYS", "SYS", "SYS", "PIX", "X"],
];

/// Cliques at the default level PHB, derived by hand from boot.sh's layout (not
/// from the plan under test): gpu0-gpu2 share pxb0's root complex (PIX, PIX,
/// PHB) -> clique 0; gpu3 alone on pxb2 (NODE to the others) -> 1; gpu4 and
/// gpu5 under one switch on pxb1 (PIX, node 1) -> 2. In [`GPUS`] order.
pub const HAND_CLIQUES: [u8; 6] = [0, 0, 0, 1, 2, 2];

/// [`HAND_CLIQUES`] keyed by guest address.
pub fn hand_cliques() -> BTreeMap<String, u8> {
    GPUS.iter()
        .zip(HAND_CLIQUES)
        .map(|(s, c)| (s.bdf.to_string(), c))
        .collect()
}

/// The capability's 8 bytes for `clique`: DW0 0x50080009 (next 0), DW1 clique << 19 | 0x5032.
pub fn capability_bytes(clique: u8) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&0x5008_0009_u32.to_le_bytes());
    b[4..].copy_from_slice(&((u32::from(clique) << 19) | 0x5032).to_le_bytes());
    b
}

/// The cache as [`require_setup`] checks it, plus a QEMU with `vfio-user-pci`
/// (10.1 or later). Panics, naming `bash scripts/qemu/setup.sh`, when not: the
/// test FAILS, it never skips.
pub fn require_vfio_user_qemu() -> QemuSetup {
    let setup = require_setup();
    let qemu = setup.qemu("10");
    let out = Command::new(&qemu)
        .args(["-device", "vfio-user-pci,help"])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}; {SETUP_HINT}", qemu.display()));
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("socket="),
        "{} {} has no vfio-user-pci device (QEMU 10.1 or later is needed, the cache holds \
         11.1): {}; {SETUP_HINT}",
        qemu.display(),
        setup.qemu_version("10"),
        String::from_utf8_lossy(&out.stderr)
    );
    setup
}

/// The H200 of `h200x2-passthrough-guest` (00:06.0), unpacked into `dir`;
/// returns its `config` (its `resource` sits next to it).
pub fn unpack_h200(dir: &Path) -> PathBuf {
    let rel = "sysfs/devices/pci0000:00/0000:00:06.0";
    let tgz = fixture_dir("h200x2-passthrough-guest").join("sysfs.tgz");
    let status = Command::new("tar")
        .arg("xzf")
        .arg(&tgz)
        .arg("-C")
        .arg(dir)
        .arg(rel)
        .status()
        .expect("tar runs");
    assert!(status.success(), "tar xzf {} {rel} failed", tgz.display());
    dir.join(rel).join("config")
}

/// `p2p-host plan --json` (default level PHB) on a sysfs tree: clique per GPU address.
pub fn plan_cliques(p2p_host: &Path, sysfs_root: &Path) -> Result<BTreeMap<String, u8>, String> {
    let out = Command::new(p2p_host)
        .args(["plan", "--json", "--no-nvml", "--sysfs-root"])
        .arg(sysfs_root)
        .output()
        .map_err(|e| format!("running {}: {e}", p2p_host.display()))?;
    if !out.status.success() {
        return Err(format!(
            "p2p-host plan --sysfs-root {} failed: {}",
            sysfs_root.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let report: PlanReport = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("p2p-host plan printed no plan report: {e}"))?;
    let vm = report.vms.first().ok_or("the plan has no VM")?;
    Ok(vm
        .assignments
        .iter()
        .map(|a| (a.bdf.to_string(), a.clique.id()))
        .collect())
}

/// `p2p-host serve` running in the background; killed when dropped.
pub struct Server {
    child: Spawned,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    /// Serves `config` on `dir/<name>.sock` for every GPU, with its clique,
    /// and waits for the ready line.
    pub fn start(p2p_host: &Path, dir: &Path, config: &Path, cliques: &[(GpuSlot, u8)]) -> Self {
        let sockets: Vec<(PathBuf, u8)> = cliques
            .iter()
            .map(|(slot, c)| (dir.join(format!("{}.sock", slot.name)), *c))
            .collect();
        Self::start_sockets(p2p_host, config, &sockets)
    }

    /// Serves `config` once per `(socket, clique)` and waits for the ready line.
    pub fn start_sockets(p2p_host: &Path, config: &Path, sockets: &[(PathBuf, u8)]) -> Self {
        let mut cmd = Command::new(p2p_host);
        cmd.arg("serve");
        for (socket, clique) in sockets {
            cmd.arg("--gpu").arg(format!(
                "socket={},config={},clique={clique},max-bar={MAX_BAR}",
                socket.display(),
                config.display()
            ));
        }
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn_owned()
            .expect("p2p-host serve starts");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let pipe = child.stderr.take().expect("stderr is piped");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if line.contains("p2p-host serve: ready:") {
                    let _ = tx.send(());
                }
                if let Ok(mut s) = sink.lock() {
                    s.push_str(&line);
                    s.push('\n');
                }
            }
        });
        let server = Server { child, stderr };
        if rx.recv_timeout(Duration::from_secs(30)).is_err() {
            panic!("p2p-host serve did not get ready:\n{}", server.stderr());
        }
        server
    }

    /// Everything it printed so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The guest's side: probe, topo, snapshot, lspci, then setpci writes to the
/// capability, the patched pointer, the vendor id (read-only) and the command
/// register (writable, toggling INTx disable, then restored), read back.
pub const GUEST_SCRIPT: &str = r#"#!/bin/sh
# Guest side of tests/tests/guests/e2e_injection.rs (runs as root in the initramfs).
set -u
out=/tmp/e2e
mkdir -p $out
cd $out
p2p-guest probe --json --no-driver >probe.json 2>probe.err; echo "probe $?" >rc.txt
p2p-host topo --json --no-nvml >topo.json 2>topo.err; echo "topo $?" >>rc.txt
p2p-host snapshot --out $out/snap >snapshot.txt 2>&1; echo "snapshot $?" >>rc.txt
lspci -xxx -d 10de: >lspci-before.txt 2>&1
lspci -vvv -d 10de: >lspci-vvv.txt 2>&1
for d in $(lspci -n -d 10de: | cut -d' ' -f1); do
    cmd=$(setpci -s "$d" COMMAND)
    new=$(printf '%04x' $((0x$cmd ^ 0x0400)))
    setpci -s "$d" c8.l=0xffffffff cc.l=0 b1.b=0 0.w=0x1234
    setpci -s "$d" COMMAND="$new"
    echo "$d command=$cmd wrote=$new read=$(setpci -s "$d" COMMAND) c8=$(setpci -s "$d" c8.l) cc=$(setpci -s "$d" cc.l) b1=$(setpci -s "$d" b1.b) vendor=$(setpci -s "$d" 0.w)" >>setpci.txt
    setpci -s "$d" COMMAND="$cmd"
done
lspci -xxx -d 10de: >lspci-after.txt 2>&1
cat rc.txt setpci.txt
vp2p-emit e2e rc.txt probe.json probe.err topo.json topo.err snapshot.txt lspci-before.txt lspci-vvv.txt setpci.txt lspci-after.txt snap
"#;

/// Boots `vfio-user-gpus` under QEMU 11.1 with the IOMMU on; the sockets are in `sockets`.
pub fn boot(initrd: &Path, sockets: &Path, log: &Path, timeout_s: u32) -> Booted {
    boot_with(initrd, sockets, log, timeout_s, &[], "")
}

/// [`boot`] with more QEMU arguments (boot.sh `--extra`, each split on
/// whitespace) and kernel arguments (`--append`).
pub fn boot_with(
    initrd: &Path,
    sockets: &Path,
    log: &Path,
    timeout_s: u32,
    extra: &[String],
    append: &str,
) -> Booted {
    let t0 = Instant::now();
    let mut cmd = Command::new("bash");
    cmd.arg(script("boot.sh"))
        .args([
            "--qemu",
            "10",
            "--topology",
            "vfio-user-gpus",
            "--iommu",
            "on",
        ])
        .arg("--initrd")
        .arg(initrd)
        .arg("--vfio-user-dir")
        .arg(sockets)
        .args(["--timeout", &timeout_s.to_string()])
        .arg("--log")
        .arg(log);
    for e in extra {
        cmd.arg("--extra").arg(e);
    }
    if !append.is_empty() {
        cmd.arg("--append").arg(append);
    }
    let out = cmd.output().expect("bash runs boot.sh");
    Booted {
        status: out.status.code(),
        wall: t0.elapsed(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `lspci -xxx` output: config bytes per function ("0000:23:00.0").
pub fn parse_lspci_hex(text: &str) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        let is_dump = first.len() == 3
            && first.ends_with(':')
            && first[..2].chars().all(|c| c.is_ascii_hexdigit());
        if is_dump {
            if let Some(bdf) = &current {
                let bytes = line[3..]
                    .split_whitespace()
                    .filter_map(|h| u8::from_str_radix(h, 16).ok());
                out.entry(bdf.clone()).or_default().extend(bytes);
            }
        } else if !line.trim().is_empty() && !line.starts_with(char::is_whitespace) {
            let bdf = first.to_string();
            current = Some(if bdf.matches(':').count() == 1 {
                format!("0000:{bdf}")
            } else {
                bdf
            });
        }
    }
    out
}

/// The capability chain in conventional config space: (offset, id, next).
pub fn capability_chain(config: &[u8]) -> Vec<(u8, u8, u8)> {
    let mut chain = Vec::new();
    let mut at = config.get(0x34).copied().unwrap_or(0) & 0xfc;
    while at >= 0x40 && chain.len() < 48 {
        let (Some(&id), Some(&next)) =
            (config.get(usize::from(at)), config.get(usize::from(at) + 1))
        else {
            break;
        };
        chain.push((at, id, next));
        at = next & 0xfc;
    }
    chain
}

/// Individual checks of one test, counted and listed.
#[derive(Debug, Default)]
pub struct Checks {
    /// Names of the checks that passed.
    pub passed: Vec<String>,
    /// `name: detail` of each check that failed.
    pub failed: Vec<String>,
}

impl Checks {
    /// Records check `name`; `detail` explains a failure and runs only then.
    pub fn check(&mut self, name: impl Into<String>, ok: bool, detail: impl FnOnce() -> String) {
        let name = name.into();
        if ok {
            self.passed.push(name);
        } else {
            self.failed.push(format!("{name}: {}", detail()));
        }
    }

    /// Records whether `got == want`, showing both when not.
    pub fn eq<T: PartialEq + Debug>(&mut self, name: impl Into<String>, got: T, want: T) {
        let ok = got == want;
        self.check(name, ok, || format!("got {got:?}, want {want:?}"));
    }

    /// "N passed, M failed", then the failures.
    pub fn summary(&self) -> String {
        let mut s = format!("{} passed, {} failed", self.passed.len(), self.failed.len());
        for f in &self.failed {
            s.push_str("\n  FAILED ");
            s.push_str(f);
        }
        s
    }
}

/// Replaces `tests/fixtures/<FIXTURE>` with what a boot extracted (`snap/sysfs`,
/// `topo.json`) and a `capture.txt` saying how it was made.
pub fn write_fixture(extracted: &Path, served: &[(GpuSlot, u8)], qemu_version: &str, kernel: &str) {
    let dest = fixture_dir(FIXTURE);
    let _ = std::fs::remove_dir_all(&dest);
    std::fs::create_dir_all(&dest).expect("fixture directory");
    let status = Command::new("cp")
        .arg("-a")
        .arg(extracted.join("snap/sysfs"))
        .arg(&dest)
        .status()
        .expect("cp runs");
    assert!(status.success(), "copying the snapshot failed");
    std::fs::copy(extracted.join("topo.json"), dest.join("topo.json")).expect("topo.json");
    let cliques: Vec<String> = served
        .iter()
        .map(|(s, c)| format!("{} {} ({}) clique {c}", s.name, s.bdf, s.port))
        .collect();
    let text = format!(
        "fixture: {FIXTURE}\n\
         captured by: cargo test -p p2p-tests --test guests -- --ignored e2e_injection::capture_fixture\n\
         qemu: {qemu_version} (boot.sh --qemu 10 --topology vfio-user-gpus --iommu on)\n\
         kernel: {kernel}\n\
         gpus: p2p-host serve of the H200 in h200x2-passthrough-guest (00:06.0), max-bar={MAX_BAR}\n\
         {}\n\
         sysfs/ is `p2p-host snapshot` in the guest, topo.json `p2p-host topo --json --no-nvml` there\n",
        cliques.join("\n")
    );
    std::fs::write(dest.join("capture.txt"), text).expect("capture.txt");
    eprintln!(
        "wrote {}",
        dest.strip_prefix(repo_root()).unwrap_or(&dest).display()
    );
}
