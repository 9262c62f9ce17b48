//! Booting real Linux guests under QEMU (TCG) from Rust tests, through the
//! scripts in `scripts/qemu/`: `setup.sh` fills the cache, `mkinitramfs.sh`
//! packs the workspace's binaries (with their libraries), `boot.sh` runs the VM,
//! `extract.sh` unpacks what the guest emitted. Also the checks shared by the
//! captured-tree and live tests (scan a captured tree, compare it with the
//! report the guest printed).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use std::time::{Duration, Instant};

use p2p_host::nvlink::{self, NvLinkOptions};
use p2p_host::sysfs::{scan, SysfsRoot};
use p2p_report::TopoReport;
use p2p_topology::{GpuSelector, Topology};

use crate::repo_root;

/// What the end-to-end tests print when the QEMU cache is missing.
pub const SETUP_HINT: &str = "run `bash scripts/qemu/setup.sh` (installs QEMU 7.2, the QEMU 11.1 \
    build, a Debian kernel, busybox and pciutils into ${VP2P_CACHE:-~/.cache/vp2p})";

/// `scripts/qemu/<name>`.
pub fn script(name: &str) -> PathBuf {
    repo_root().join("scripts/qemu").join(name)
}

/// The cache directory the scripts use (`$VP2P_CACHE`, else `~/.cache/vp2p`).
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("VP2P_CACHE") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".cache/vp2p")
}

/// The variables `setup.sh` wrote to `paths.env`.
#[derive(Debug, Clone)]
pub struct QemuSetup {
    /// `paths.env`'s variables (`VP2P_QEMU72`, `VP2P_KERNEL`, ...), unquoted.
    pub vars: BTreeMap<String, String>,
}

impl QemuSetup {
    /// A variable's value; panics with [`SETUP_HINT`] when `paths.env` lacks it.
    pub fn get(&self, key: &str) -> &str {
        self.vars
            .get(key)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("paths.env has no {key}; {SETUP_HINT}"))
    }

    /// QEMU binary for boot.sh's `--qemu` selector ("7.2" or "10").
    pub fn qemu(&self, sel: &str) -> PathBuf {
        PathBuf::from(match sel {
            "7.2" => self.get("VP2P_QEMU72"),
            "10" => self.get("VP2P_QEMU10"),
            other => panic!("unknown QEMU selector {other}"),
        })
    }

    /// Version recorded by setup.sh ("7.2.22", "11.1.3").
    pub fn qemu_version(&self, sel: &str) -> &str {
        match sel {
            "7.2" => self.get("VP2P_QEMU72_VERSION"),
            "10" => self.get("VP2P_QEMU10_VERSION"),
            other => panic!("unknown QEMU selector {other}"),
        }
    }

    /// The guest kernel's version recorded by setup.sh.
    pub fn kernel_version(&self) -> &str {
        self.get("VP2P_KERNEL_VERSION")
    }
}

/// Reads `paths.env` and checks that both QEMUs, the kernel and busybox are
/// there. Panics (the test FAILS, it is never skipped) with [`SETUP_HINT`] when not.
pub fn require_setup() -> QemuSetup {
    let env = cache_dir().join("paths.env");
    let text = std::fs::read_to_string(&env).unwrap_or_else(|e| {
        panic!(
            "the QEMU test cache is missing ({}: {e}); {SETUP_HINT}",
            env.display()
        )
    });
    let mut vars = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            vars.insert(k.to_string(), v.trim_matches('\'').to_string());
        }
    }
    let setup = QemuSetup { vars };
    for key in ["VP2P_QEMU72", "VP2P_QEMU10", "VP2P_KERNEL", "VP2P_BUSYBOX"] {
        let p = PathBuf::from(setup.get(key));
        assert!(
            p.is_file(),
            "{key}={} (from {}) does not exist; {SETUP_HINT}",
            p.display(),
            env.display()
        );
    }
    setup
}

/// The directory of the workspace binaries the guests run (`p2p-host`,
/// `p2p-guest`, and below `examples/` the vfio-user client): the suite's own
/// build ([`crate::binary`]), dynamically linked; `mkinitramfs.sh` strips
/// them and adds the shared libraries they link. No second build.
pub fn guest_bin_dir() -> PathBuf {
    crate::binary("p2p-host")
        .parent()
        .expect("the binaries' directory")
        .to_path_buf()
}

/// Runs a script, panicking with its output on failure.
fn run_script(name: &str, args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(script(name))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {name}: {e}"));
    assert!(
        out.status.success(),
        "{name} {args:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `mkinitramfs.sh OUT --init INIT [--add SRC:DEST]...`.
pub fn mkinitramfs(out: &Path, init: &Path, adds: &[(&Path, &str)]) {
    let mut args: Vec<String> = vec![
        out.display().to_string(),
        "--init".into(),
        init.display().to_string(),
    ];
    for (src, dest) in adds {
        args.push("--add".into());
        args.push(format!("{}:{dest}", src.display()));
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    run_script("mkinitramfs.sh", &refs);
}

/// One boot.sh run.
#[derive(Debug, Clone)]
pub struct Boot<'a> {
    /// "7.2" or "10" (the 11.1 build).
    pub qemu: &'a str,
    /// boot.sh `--topology` name (`two-socket`, `nested-switch`, ...).
    pub topology: &'a str,
    /// Boot with a virtual Intel IOMMU (`--iommu on`).
    pub iommu: bool,
    /// The initramfs to boot (see [`mkinitramfs`]).
    pub initrd: &'a Path,
    /// Seconds before boot.sh kills QEMU (exit status 124).
    pub timeout_s: u32,
    /// Serial log file to write.
    pub log: &'a Path,
}

/// What a boot produced.
#[derive(Debug)]
pub struct Booted {
    /// boot.sh's exit status (0: the guest's init script returned 0).
    pub status: Option<i32>,
    /// Wall-clock time of the boot.sh run.
    pub wall: Duration,
    /// boot.sh's stderr (lossy UTF-8).
    pub stderr: String,
}

impl Boot<'_> {
    /// Runs boot.sh and waits for the VM to power off or time out.
    pub fn run(&self) -> Booted {
        let t0 = Instant::now();
        let out = Command::new("bash")
            .arg(script("boot.sh"))
            .args(["--qemu", self.qemu, "--topology", self.topology])
            .args(["--iommu", if self.iommu { "on" } else { "off" }])
            .arg("--initrd")
            .arg(self.initrd)
            .args(["--timeout", &self.timeout_s.to_string()])
            .arg("--log")
            .arg(self.log)
            .output()
            .expect("bash runs boot.sh");
        Booted {
            status: out.status.code(),
            wall: t0.elapsed(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs the boot and panics with the log's tail unless the guest succeeded.
    pub fn run_ok(&self) -> Booted {
        let b = self.run();
        if b.status != Some(0) {
            let log = std::fs::read(self.log).unwrap_or_default();
            let log = String::from_utf8_lossy(&log);
            let tail: String = log
                .lines()
                .filter(|l| !is_base64_line(l))
                .collect::<Vec<_>>()
                .join("\n");
            let tail = &tail[tail.len().saturating_sub(4000)..];
            panic!(
                "boot.sh --qemu {} --topology {} failed with status {:?} after {:.1?}:\n{}\n--- serial log (tail) ---\n{tail}",
                self.qemu, self.topology, b.status, b.wall, b.stderr
            );
        }
        b
    }
}

fn is_base64_line(l: &str) -> bool {
    l.len() > 40
        && l.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'=' | b'\r'))
}

/// `extract.sh LOG NAME OUTDIR`: unpacks what the guest sent with `vp2p-emit NAME`.
pub fn extract(log: &Path, name: &str, out: &Path) {
    run_script(
        "extract.sh",
        &[&log.display().to_string(), name, &out.display().to_string()],
    );
}

/// The guest script of `capture-fixtures.sh` (snapshot, topo --json, NVMe
/// serials; emitted as `capture`), written to `dest`.
pub fn capture_guest_script(dest: &Path) {
    run_script(
        "capture-fixtures.sh",
        &["--guest-script", &dest.display().to_string()],
    );
}

/// The selector the fixtures use: NVMe controllers stand in for GPUs.
pub fn nvme_selector() -> GpuSelector {
    GpuSelector::Class {
        prefix: "0108".parse().expect("class prefix"),
    }
}

/// Scans a captured tree (`DIR/sysfs/...`) with the library, as `p2p-host topo
/// --sysfs-root DIR --gpu-class 0108 --all-nics` does (the trees' e1000e has
/// no RDMA device, so it is a NIC row only when every network function is).
pub fn scan_capture(dir: &Path) -> (Topology, TopoReport) {
    let root =
        SysfsRoot::new(dir).unwrap_or_else(|e| panic!("{}: not a sysfs tree: {e}", dir.display()));
    let mut topo = scan(&root).unwrap_or_else(|e| panic!("scanning {}: {e}", dir.display()));
    let selector = nvme_selector();
    let opts = NvLinkOptions {
        map: None,
        use_nvml: false,
    };
    nvlink::discover(&mut topo, &selector, &opts).expect("NVLink discovery on a tree");
    let report = TopoReport::build_with(
        &topo,
        &selector,
        &root.path().display().to_string(),
        p2p_report::NicRows::AllNetwork,
    );
    (topo, report)
}

/// The report `p2p-host topo --json` printed inside the guest (`DIR/topo.json`).
pub fn guest_report(dir: &Path) -> TopoReport {
    let path = dir.join("topo.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{}: not a topo report: {e}", path.display()))
}

/// Differences between the guest's own report (live /sys) and our scan of the
/// snapshot it took: same program, two environments, so the `links` matrix,
/// the devices and the per-pair routes must agree.
pub fn compare_guest_and_host(guest: &TopoReport, host: &TopoReport) -> Vec<String> {
    let mut errs = Vec::new();
    if guest.links != host.links {
        errs.push(format!(
            "links differ:\n  guest {:?}\n  host  {:?}",
            guest.links, host.links
        ));
    }
    let bdfs = |r: &TopoReport| r.gpus.iter().map(|g| g.bdf).collect::<Vec<_>>();
    if bdfs(guest) != bdfs(host) {
        errs.push(format!(
            "GPUs differ: guest {:?}, host {:?}",
            bdfs(guest),
            bdfs(host)
        ));
    }
    let nics = |r: &TopoReport| r.nics.iter().map(|g| g.bdf).collect::<Vec<_>>();
    if nics(guest) != nics(host) {
        errs.push(format!(
            "NICs differ: guest {:?}, host {:?}",
            nics(guest),
            nics(host)
        ));
    }
    if guest.matrix != host.matrix {
        errs.push("matrix (GPUs + NICs) differs".into());
    }
    if guest.pairs != host.pairs {
        for (g, h) in guest.pairs.iter().zip(&host.pairs) {
            if g != h {
                errs.push(format!(
                    "pair {}-{} differs:\n  guest {g:?}\n  host  {h:?}",
                    g.a, g.b
                ));
            }
        }
        if guest.pairs.len() != host.pairs.len() {
            errs.push(format!(
                "{} pairs in the guest, {} on the host",
                guest.pairs.len(),
                host.pairs.len()
            ));
        }
    }
    if guest.bridges != host.bridges {
        errs.push(format!(
            "bridges differ:\n  guest {:?}\n  host  {:?}",
            guest.bridges, host.bridges
        ));
    }
    for (g, h) in guest.gpus.iter().zip(&host.gpus) {
        if (g.numa_node, g.iommu_group, &g.path, &g.host_bridge)
            != (h.numa_node, h.iommu_group, &h.path, &h.host_bridge)
        {
            errs.push(format!(
                "GPU {} differs:\n  guest {g:?}\n  host  {h:?}",
                g.bdf
            ));
        }
    }
    errs
}

/// Panics listing every difference, with a heading.
pub fn assert_no_errors(what: &str, errs: &[String]) {
    assert!(
        errs.is_empty(),
        "{what}: {} difference(s):\n  - {}",
        errs.len(),
        errs.join("\n  - ")
    );
}
