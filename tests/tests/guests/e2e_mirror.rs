//! Mirrored guest topology end to end (issue "NCCL-ready guests"): the real
//! `p2p-host plan --guest-topology mirror` on a real kernel's tree (the
//! captured guest of boot.sh's `vfio-user-gpus`: six H200s under pxb-pcie host
//! bridges on two NUMA nodes, root ports and x3130 switches) writes the QEMU
//! arguments and NCCL's topology file; QEMU 11.1 (TCG) boots exactly those
//! arguments, with each `vfio-pci` GPU swapped for a `vfio-user-pci` device
//! served by the real `p2p-host serve` at the same bus and address, and the
//! NCCL file handed over with `-fw_cfg`. Inside the guest the
//! `p2p-host topo`, `p2p-host snapshot`, `p2p-guest probe` and
//! `p2p-guest nccl-topo install` run.
//!
//! Expectations from outside the plan: the pair classes of boot.sh's table
//! (`e2e::CLASSES`, derived by hand from the QEMU command line that made the
//! host tree), the guest bus numbers a depth-first enumeration gives, and the
//! bytes of the file the host wrote. The test prints `N passed, M failed`.
//!
//! No RDMA NIC takes part: the Debian cloud kernel has neither soft-RoCE
//! (CONFIG_RDMA_RXE) nor siw (CONFIG_RDMA_SIW), and QEMU removed pvrdma in 9.1,
//! so no guest function here can carry an `infiniband/` device. NIC placement
//! is covered by `plan_mirror.rs` on a tree with an RDMA device.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use p2p_report::{PlanReport, TopoReport};
use p2p_tests::e2e::{require_vfio_user_qemu, unpack_h200, Checks, Server, CLASSES, FIXTURE, GPUS};
use p2p_tests::fixture_dir;
use p2p_tests::qemu::{extract, guest_bin_dir, script};
use p2p_topology::guest_layout::{GuestLayout, GuestTopology};
use p2p_topology::Bdf;
use serde_json::Value;

const GUEST_SCRIPT: &str = r#"#!/bin/sh
# Guest side of tests/tests/guests/e2e_mirror.rs.
set -u
out=/tmp/e2e
mkdir -p $out
cd $out
modprobe qemu_fw_cfg 2>modprobe.err; echo "modprobe $?" >rc.txt
p2p-host topo --json --no-nvml >topo.json 2>topo.err; echo "topo $?" >>rc.txt
p2p-host snapshot --out $out/snap >snapshot.txt 2>&1; echo "snapshot $?" >>rc.txt
p2p-guest probe --json --no-driver >probe.json 2>probe.err; echo "probe $?" >>rc.txt
cp /sys/firmware/qemu_fw_cfg/by_name/opt/vp2p/nccl-topo.xml/raw fwcfg.xml 2>fwcfg.err; echo "fwcfg $?" >>rc.txt
p2p-guest nccl-topo install --json >install.json 2>install.err; echo "install $?" >>rc.txt
cp /var/run/nvidia-topologyd/virtualTopology.xml installed.xml 2>/dev/null
p2p-guest nccl-topo --json >derived.json 2>derived.err; echo "derived $?" >>rc.txt
cat rc.txt
vp2p-emit e2e rc.txt modprobe.err topo.json topo.err snapshot.txt probe.json probe.err fwcfg.xml fwcfg.err install.json install.err installed.xml derived.json derived.err snap
"#;

fn host_cmd(bin: &Path, args: &[&str]) -> String {
    let out = Command::new(bin)
        .args(args)
        .output()
        .expect("p2p-host runs");
    assert!(
        out.status.success(),
        "p2p-host {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The emitted QEMU arguments as argv words, with every `vfio-pci` device
/// swapped for a `vfio-user-pci` one at the same bus and address, served on
/// `sockets/<id>.sock`; returns the words and (socket, clique) per device.
fn swap_devices(emitted: &str, sockets: &Path) -> (Vec<String>, Vec<(PathBuf, u8)>) {
    let mut words = Vec::new();
    let mut served = Vec::new();
    for line in emitted.lines().filter(|l| !l.starts_with('#')) {
        let line = line.trim_end_matches(" \\");
        let (opt, value) = line.split_once(' ').expect("-option value");
        let Some(props) = value.strip_prefix("vfio-pci,") else {
            words.push(opt.to_string());
            words.push(value.to_string());
            continue;
        };
        let kv: BTreeMap<&str, &str> = props.split(',').filter_map(|p| p.split_once('=')).collect();
        let socket = sockets.join(format!("{}.sock", kv["id"]));
        let clique: u8 = kv["x-nv-gpudirect-clique"].parse().unwrap();
        served.push((socket.clone(), clique));
        words.push("-device".into());
        words.push(format!(
            "{{\"driver\":\"vfio-user-pci\",\"id\":\"{}\",\"bus\":\"{}\",\"addr\":\"{}\",\"socket\":{{\"type\":\"unix\",\"path\":\"{}\"}}}}",
            kv["id"],
            kv["bus"],
            kv["addr"],
            socket.display()
        ));
    }
    (words, served)
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| format!("<{name}: {e}>"))
}

/// The bus numbers a depth-first enumeration gives the fixture's tree when
/// mirrored: pxb-pcie buses from 0x20 in 16-bus blocks (pci0000:20, :40, :80
/// in host order), each root port's and switch port's secondary bus the next
/// free number below its expander. Written from the fixture's layout (boot.sh
/// `vfio-user-gpus`), not from the plan.
const EXPECTED_GUEST: [(&str, &str); 6] = [
    // pxb 0x20: rp0 20:00.0 -> 0x21, sw0 21:00.0 -> 0x22, d0 22:00.0 -> 0x23, d1 22:01.0 -> 0x24;
    // rp1 20:01.0 -> 0x25
    ("0000:23:00.0", "0000:23:00.0"),
    ("0000:24:00.0", "0000:24:00.0"),
    ("0000:25:00.0", "0000:25:00.0"),
    // pxb 0x30: rp 30:00.0 -> 0x31
    ("0000:41:00.0", "0000:31:00.0"),
    // pxb 0x40: rp 40:00.0 -> 0x41, sw 41:00.0 -> 0x42, d0 -> 0x43, d1 -> 0x44
    ("0000:83:00.0", "0000:43:00.0"),
    ("0000:84:00.0", "0000:44:00.0"),
];

#[test]
fn mirrored_guest_shows_the_host_classes() {
    let t0 = Instant::now();
    let _setup = require_vfio_user_qemu();
    let bins = guest_bin_dir();
    let p2p_host = bins.join("p2p-host");
    let host_tree = fixture_dir(FIXTURE);
    let host_tree = host_tree.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let nccl_file = dir.path().join("vm0.nccl-topo.xml");
    let base = [
        "plan",
        "--sysfs-root",
        host_tree,
        "--no-nvml",
        "--guest-topology",
        "mirror",
    ];

    let plan: PlanReport =
        serde_json::from_str(&host_cmd(&p2p_host, &[&base[..], &["--json"]].concat()))
            .expect("plan --json is a plan report");
    let guest: GuestTopology = plan.guests[0].clone();
    let emitted = host_cmd(
        &p2p_host,
        &[
            &base[..],
            &[
                "--emit",
                "qemu",
                "--nccl-topo-path",
                nccl_file.to_str().unwrap(),
            ],
        ]
        .concat(),
    );
    let xml = host_cmd(&p2p_host, &[&base[..], &["--emit", "nccl-topo"]].concat());
    std::fs::write(&nccl_file, &xml).unwrap();

    let sockets = dir.path().join("sockets");
    std::fs::create_dir(&sockets).unwrap();
    let (words, served) = swap_devices(&emitted, &sockets);
    let args_file = dir.path().join("args.txt");
    std::fs::write(&args_file, words.join("\n") + "\n").unwrap();
    let config = unpack_h200(dir.path());
    let server = Server::start_sockets(&p2p_host, &config, &served);

    let init = dir.path().join("init.sh");
    std::fs::write(&init, GUEST_SCRIPT).unwrap();
    let initrd = dir.path().join("initrd.cpio.gz");
    let out = Command::new("bash")
        .arg(script("mkinitramfs.sh"))
        .arg(&initrd)
        .arg("--init")
        .arg(&init)
        .arg("--add")
        .arg(format!("{}:/usr/bin/p2p-host", p2p_host.display()))
        .arg("--add")
        .arg(format!(
            "{}:/usr/bin/p2p-guest",
            bins.join("p2p-guest").display()
        ))
        .args(["--modules", "qemu_fw_cfg"])
        .output()
        .expect("mkinitramfs.sh runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = dir.path().join("serial.log");
    let t_boot = Instant::now();
    let booted = Command::new("bash")
        .arg(script("boot.sh"))
        .args([
            "--qemu",
            "10",
            "--topology",
            "args",
            "--iommu",
            "on",
            "--timeout",
            "180",
        ])
        .arg("--topology-args")
        .arg(&args_file)
        .arg("--initrd")
        .arg(&initrd)
        .arg("--log")
        .arg(&log)
        .output()
        .expect("boot.sh runs");
    let boot_s = t_boot.elapsed().as_secs_f64();
    let server_log = server.stderr();
    drop(server);
    if !booted.status.success() {
        let text = String::from_utf8_lossy(&std::fs::read(&log).unwrap_or_default()).into_owned();
        panic!(
            "boot.sh failed ({}):\n{}\nargs:\n{}\n--- serve ---\n{server_log}\n--- serial (tail) ---\n{}",
            booted.status,
            String::from_utf8_lossy(&booted.stderr),
            words.join(" "),
            &text[text.len().saturating_sub(3000)..]
        );
    }
    let got = dir.path().join("out");
    extract(&log, "e2e", &got);
    let mut c = Checks::default();

    let rc = read(&got, "rc.txt");
    for step in [
        "modprobe", "topo", "snapshot", "probe", "fwcfg", "install", "derived",
    ] {
        c.check(
            format!("guest: {step} exits 0"),
            rc.contains(&format!("{step} 0\n")),
            || {
                format!(
                    "{rc}\ntopo.err {}\ninstall.err {}\nfwcfg.err {}",
                    read(&got, "topo.err"),
                    read(&got, "install.err"),
                    read(&got, "fwcfg.err")
                )
            },
        );
    }

    // The plan: a mirror, and the guest bus ids a depth-first walk gives.
    c.eq(
        "plan: layout mirror",
        plan.guest_topology,
        GuestLayout::Mirror,
    );
    for (host, want) in EXPECTED_GUEST {
        let h: Bdf = host.parse().unwrap();
        c.eq(
            format!("plan: {host} at guest {want}"),
            guest.guest_bdf(h).map(|b| b.to_string()),
            Some(want.to_string()),
        );
    }

    // The guest: every device where the plan put it, and the host's classes.
    let topo: TopoReport = serde_json::from_str(&read(&got, "topo.json"))
        .unwrap_or_else(|e| panic!("guest topo.json: {e}\n{}", read(&got, "topo.err")));
    let guest_gpus: Vec<String> = topo.gpus.iter().map(|g| g.bdf.to_string()).collect();
    let mut planned: Vec<String> = guest.devices.iter().map(|d| d.guest.to_string()).collect();
    planned.sort();
    c.eq(
        "guest: GPUs at the planned bus ids",
        guest_gpus.clone(),
        planned,
    );
    let index = |guest_bdf: Bdf| topo.gpus.iter().position(|g| g.bdf == guest_bdf);
    for (i, a) in GPUS.iter().enumerate() {
        for (j, b) in GPUS.iter().enumerate().skip(i + 1) {
            let (ha, hb): (Bdf, Bdf) = (a.bdf.parse().unwrap(), b.bdf.parse().unwrap());
            let (Some(ga), Some(gb)) = (guest.guest_bdf(ha), guest.guest_bdf(hb)) else {
                c.check(
                    format!("{ha}-{hb}: both in the guest map"),
                    false,
                    String::new,
                );
                continue;
            };
            let cell = index(ga)
                .zip(index(gb))
                .map(|(x, y)| topo.links[x][y].to_string());
            c.eq(
                format!("guest class {ga}-{gb} (host {ha}-{hb}) = hand-derived host class"),
                cell.clone(),
                Some(CLASSES[i][j].to_string()),
            );
            let host_class = plan.vms[0]
                .pairs
                .iter()
                .find(|p| (p.a == ha && p.b == hb) || (p.a == hb && p.b == ha))
                .map(|p| p.pcie_class.to_string());
            c.eq(
                format!("guest class {ga}-{gb} = plan's host class"),
                cell,
                host_class,
            );
        }
    }
    // NUMA: guest node of each GPU as the plan mapped its host node.
    for d in &guest.devices {
        let rc = guest.root_complex_of(&d.parent);
        let g = topo.gpus.iter().find(|g| g.bdf == d.guest);
        c.eq(
            format!("guest NUMA of {} = planned", d.guest),
            g.and_then(|g| g.numa_node),
            rc.and_then(|r| r.numa_node),
        );
    }

    // Root ports and switch upstream ports carry the host link in the guest.
    let snap = p2p_host::sysfs::SysfsRoot::new(got.join("snap")).expect("snapshot tree");
    match p2p_host::sysfs::scan(&snap) {
        Ok(gtopo) => {
            for p in guest.ports.iter().filter(|p| p.kind.has_link_properties()) {
                let Some(link) = p.link else { continue };
                let f = gtopo.function(p.guest);
                c.eq(
                    format!(
                        "guest {} {} max link = host {}",
                        p.kind.qemu_driver(),
                        p.guest,
                        link.speed
                    ),
                    f.map(|f| (f.link.max_speed.clone(), f.link.max_width)),
                    Some((Some(link.speed.sysfs().to_string()), Some(link.width))),
                );
            }
        }
        Err(e) => c.check("guest snapshot scans", false, || e.to_string()),
    }

    // Cliques as planned reached the guest (served by p2p-host serve).
    let probe: Value = serde_json::from_str(&read(&got, "probe.json")).unwrap_or(Value::Null);
    for a in &plan.vms[0].assignments {
        let gb = guest.guest_bdf(a.bdf).map(|b| b.to_string());
        let found = probe["gpus"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|g| g["bdf"].as_str() == gb.as_deref());
        c.eq(
            format!(
                "probe: {} (host {}) clique as planned",
                gb.as_deref().unwrap_or("?"),
                a.bdf
            ),
            found.and_then(|g| g["clique"].as_u64()),
            Some(u64::from(a.clique.id())),
        );
    }

    // NCCL: the fw_cfg file is the host's, install accepts it, and it lands.
    c.eq(
        "fw_cfg: the guest reads the host's file byte for byte",
        read(&got, "fwcfg.xml"),
        xml.clone(),
    );
    let install: Value = serde_json::from_str(&read(&got, "install.json")).unwrap_or(Value::Null);
    let checks = install["checks"].as_array().cloned().unwrap_or_default();
    c.check("install: every bus id checked", checks.len() >= 8, || {
        read(&got, "install.json")
    });
    c.check(
        "install: every check ok",
        checks.iter().all(|k| k["ok"] == true),
        || read(&got, "install.json"),
    );
    c.eq(
        "install: written to NCCL's default path",
        install["installed"].as_str(),
        Some("/var/run/nvidia-topologyd/virtualTopology.xml"),
    );
    let installed = read(&got, "installed.xml");
    c.check(
        "installed file: affinity filled from the guest's nodes",
        installed.contains("numaid=\"0\" affinity=")
            && installed.contains("numaid=\"1\" affinity="),
        || installed.clone(),
    );
    // NCCL's path classes in the installed file: one switch = PIX, else PHB, other node SYS.
    let sys = p2p_guest::nccl_topo::parse(Path::new("installed.xml"), &installed);
    match sys {
        Ok(sys) => {
            for (i, a) in GPUS.iter().enumerate() {
                for (j, b) in GPUS.iter().enumerate().skip(i + 1) {
                    let ga = guest.guest_bdf(a.bdf.parse().unwrap()).unwrap();
                    let gb = guest.guest_bdf(b.bdf.parse().unwrap()).unwrap();
                    // nvidia-smi's NODE is PHB for NCCL.
                    let want = match CLASSES[i][j] {
                        "NODE" => "PHB",
                        other => other,
                    };
                    c.eq(
                        format!("NCCL class in the file {ga}-{gb}"),
                        sys.nccl_class(ga, gb),
                        Some(want),
                    );
                }
            }
        }
        Err(e) => c.check("installed file parses", false, || e.to_string()),
    }
    // A file from the guest's own cliques: one switch per clique.
    let derived: Value = serde_json::from_str(&read(&got, "derived.json")).unwrap_or(Value::Null);
    let switches: std::collections::BTreeSet<String> = derived["gpus"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g["switch"].as_str().map(str::to_string))
        .collect();
    let cliques: std::collections::BTreeSet<u8> = plan.vms[0]
        .assignments
        .iter()
        .map(|a| a.clique.id())
        .collect();
    c.eq(
        "derived: one invented switch per clique",
        switches.len(),
        cliques.len(),
    );

    eprintln!(
        "mirror e2e: boot {boot_s:.1} s, whole test {:.1} s\n{}",
        t0.elapsed().as_secs_f64(),
        c.summary()
    );
    println!("{}", c.summary());
    assert!(c.failed.is_empty(), "{}", c.summary());
}
