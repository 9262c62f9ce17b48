//! `plan --emit proxmox` on the captured trees, read back with a parser of
//! Proxmox VE's VM configuration format (`p2p_tests::proxmox`, written from
//! Proxmox's documented format and qemu-server's reader), and the `-set`
//! lines fed to QEMU 11.1 on the command line Proxmox VE builds for
//! `hostpciN: BDF,pcie=1` entries.
//!
//! Expectations from outside vp2p: the cliques of `plan --json`; each IOMMU
//! group's functions from the fixture's own `kernel/iommu_groups/N/devices`
//! (bridges, class 0x0604, left out: Proxmox's `pci_dev_group_bind_to_vfio`
//! skips them); the QEMU ids and root ports of qemu-server's
//! `print_hostpci_devices` (`id=hostpciN`, or `hostpciN.J` for an entry of
//! several functions; `bus=ich9-pcie-port-(N+1),addr=0x0`; ports 1-4 from
//! pve-q35-4.0.cfg at 1c.0-1c.3, ports 5-16 added at 10.0-11.3); and what
//! QEMU itself says.

use p2p_tests::process::SpawnOwned;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use p2p_report::PlanReport;
use p2p_tests::emitted::{blocks, planned};
use p2p_tests::proxmox::{self, parse, parse_hostpci, split_args, VmConfig, MAX_HOSTPCI};
use p2p_tests::{fixture_dir, plan_stdout, run, unpack_fixture};
use p2p_topology::guest_layout::{DeviceRole, GuestDevice, GuestLayout, GuestTopology};
use p2p_topology::iommu_groups::{GroupMember, GroupUse, IommuGroup};
use p2p_topology::Bdf;

const TWO_SOCKET: &str = "qemu-11.1-two-socket-iommu-on";
const NESTED: &str = "qemu-11.1-nested-switch-iommu-on";

/// A tree to plan on and the plan's extra arguments.
struct Case {
    what: &'static str,
    root: PathBuf,
    args: Vec<&'static str>,
}

/// The cases: six NVMe "GPUs" on two sockets; the nested switches whose
/// gpu0 and gpu1 share IOMMU group 9, planned whole and with gpu0 alone; two
/// VMs on the two-socket tree; the H200 passthrough guest (NVIDIA display
/// class, no IOMMU groups). The guard keeps the H200 tree unpacked.
fn cases() -> (Vec<Case>, tempfile::TempDir) {
    let h200 = unpack_fixture("h200x2-passthrough-guest");
    let nvme = |what, tree: &str, args: &[&'static str]| Case {
        what,
        root: fixture_dir(tree),
        args: [&["--gpu-class", "0108"][..], args].concat(),
    };
    let cases = vec![
        nvme("two-socket", TWO_SOCKET, &[]),
        nvme("nested", NESTED, &[]),
        nvme("nested, gpu0 alone", NESTED, &["--vm", "a=0000:25:00.0"]),
        nvme(
            "two-socket, two VMs",
            TWO_SOCKET,
            &[
                "--vm",
                "a=0000:23:00.0,0000:24:00.0,0000:83:00.0",
                "--vm",
                "b=0000:26:00.0,0000:41:00.0",
            ],
        ),
        Case {
            what: "h200x2",
            root: h200.path().to_path_buf(),
            args: vec![],
        },
    ];
    (cases, h200)
}

fn emit(c: &Case, extra: &[&str]) -> String {
    plan_stdout(
        &c.root,
        &[&c.args[..], &["--emit", "proxmox"], extra].concat(),
    )
}

fn json(c: &Case) -> PlanReport {
    let out = plan_stdout(&c.root, &[&c.args[..], &["--json"]].concat());
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{}: plan --json: {e}", c.what))
}

/// One VM's block, parsed; panics with the line Proxmox would refuse.
fn read(what: &str, block: &str) -> VmConfig {
    parse(block).unwrap_or_else(|e| panic!("{what}: Proxmox would not read {e}\n{block}"))
}

/// The `-set` arguments of `args:` as (id, property, value).
fn sets(cfg: &VmConfig) -> Vec<(String, String, String)> {
    let words = split_args(cfg.main.get("args").expect("an args line")).unwrap();
    assert_eq!(words.len() % 2, 0, "{words:?}");
    words
        .chunks(2)
        .map(|w| {
            assert_eq!(w[0], "-set", "{words:?}");
            let (target, value) = w[1].split_once('=').expect("-set GROUP.ID.PROP=VALUE");
            // As QEMU reads it: group, then id up to the next dot, then the property.
            let (group, rest) = target.split_once('.').unwrap();
            assert_eq!(group, "device");
            let (id, prop) = rest.split_once('.').unwrap();
            (id.to_string(), prop.to_string(), value.to_string())
        })
        .collect()
}

/// `hostpciN` -> the one host function it names.
fn hostpcis(what: &str, cfg: &VmConfig) -> BTreeMap<String, String> {
    cfg.main
        .hostpci()
        .into_iter()
        .map(|(n, v)| {
            let e = parse_hostpci(v).unwrap();
            let f = e
                .single_function()
                .unwrap_or_else(|| panic!("{what}: hostpci{n}: {v} names more than one function"));
            (format!("hostpci{n}"), f)
        })
        .collect()
}

#[test]
fn every_line_parses_and_each_entry_is_one_function() {
    let (cases, _guard) = cases();
    for c in &cases {
        let out = emit(c, &[]);
        let report = json(c);
        let bl = blocks(&out);
        assert_eq!(bl.len(), report.vms.len(), "{}: one block per VM", c.what);
        for block in bl {
            let cfg = read(c.what, block);
            assert!(cfg.snapshots.is_empty() && cfg.pending.is_none());
            let entries = cfg.main.hostpci();
            assert!(!entries.is_empty(), "{}", c.what);
            // Unique indices 0..=15, numbered from 0 without gaps.
            let idx: Vec<usize> = entries.iter().map(|(n, _)| *n).collect();
            let unique: BTreeSet<usize> = idx.iter().copied().collect();
            assert_eq!(unique.len(), idx.len(), "{}: {idx:?}", c.what);
            assert!(idx.iter().all(|n| *n < MAX_HOSTPCI), "{}: {idx:?}", c.what);
            assert_eq!(idx, (0..idx.len()).collect::<Vec<_>>(), "{}", c.what);
            for (n, v) in &entries {
                let e = parse_hostpci(v).unwrap();
                assert!(!v.contains(';'), "{}: hostpci{n}: {v}", c.what);
                assert!(e.single_function().is_some(), "{}: hostpci{n}: {v}", c.what);
                assert!(e.pcie, "{}: hostpci{n}: {v} without pcie=1", c.what);
            }
            // pcie=1 needs q35: the notes say what the file must hold.
            assert!(
                cfg.main
                    .description
                    .lines()
                    .any(|l| l.trim() == "machine: q35"),
                "{}: {}",
                c.what,
                cfg.main.description
            );
            // Every -set names the x-nv-gpudirect-clique of a hostpciN entry.
            let ids = hostpcis(c.what, &cfg);
            for (id, prop, value) in sets(&cfg) {
                assert!(ids.contains_key(&id), "{}: -set names {id}", c.what);
                assert_eq!(prop, "x-nv-gpudirect-clique");
                assert!(value.parse::<u8>().is_ok_and(|v| v <= 15), "{value}");
            }
        }
    }
}

/// The (host, clique) pairs of every `-set` equal the JSON plan's, per VM:
/// only GPUs carry one, and every GPU does.
#[test]
fn cliques_equal_the_json_plan() {
    let (cases, _guard) = cases();
    for c in &cases {
        let out = emit(c, &[]);
        let report = json(c);
        let want = planned(&report);
        for (i, block) in blocks(&out).iter().enumerate() {
            let cfg = read(c.what, block);
            let ids = hostpcis(c.what, &cfg);
            let mut got: Vec<(Bdf, u8)> = sets(&cfg)
                .into_iter()
                .map(|(id, _, v)| (ids[&id].parse().unwrap(), v.parse().unwrap()))
                .collect();
            let mut w = want[i].clone();
            got.sort();
            w.sort();
            assert_eq!(got, w, "{}: VM {}", c.what, report.vms[i].vm);
        }
    }
}

/// The functions of an IOMMU group, bridges left out, from the fixture's
/// `kernel/iommu_groups`; None when the function has no group.
fn group_of(sysfs: &Path, bdf: &str) -> Option<BTreeSet<String>> {
    let link = sysfs.join("bus/pci/devices").join(bdf).join("iommu_group");
    let group = std::fs::canonicalize(&link).ok()?;
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir(group.join("devices")).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        let class =
            std::fs::read_to_string(sysfs.join("bus/pci/devices").join(&name).join("class"))
                .unwrap();
        if !class.trim().starts_with("0x0604") {
            out.insert(name);
        }
    }
    Some(out)
}

#[test]
fn iommu_groups_go_whole() {
    let (cases, _guard) = cases();
    for c in &cases {
        let out = emit(c, &[]);
        let report = json(c);
        let sysfs = c.root.join("sysfs");
        for (i, block) in blocks(&out).iter().enumerate() {
            let cfg = read(c.what, block);
            let given: BTreeSet<String> = hostpcis(c.what, &cfg).into_values().collect();
            let mut want = BTreeSet::new();
            for (bdf, _) in &planned(&report)[i] {
                let b = bdf.to_string();
                want.insert(b.clone());
                want.extend(group_of(&sysfs, &b).unwrap_or_default());
            }
            assert_eq!(given, want, "{}: VM {}", c.what, report.vms[i].vm);
        }
    }
    // By hand, from the nested tree's kernel/iommu_groups/9: gpu0 (25:00.0)
    // shares the group with gpu1 (26:00.0) and switch B's ports. Planned
    // alone, gpu0 takes gpu1 along, without a clique, and the notes say why.
    let nested = Case {
        what: "nested, gpu0 alone",
        root: fixture_dir(NESTED),
        args: vec!["--gpu-class", "0108", "--vm", "a=0000:25:00.0"],
    };
    let cfg = read("gpu0 alone", &emit(&nested, &[]));
    assert_eq!(cfg.main.get("hostpci0"), Some("0000:25:00.0,pcie=1"));
    assert_eq!(cfg.main.get("hostpci1"), Some("0000:26:00.0,pcie=1"));
    assert_eq!(cfg.main.hostpci().len(), 2);
    assert_eq!(
        cfg.main.get("args"),
        Some("-set device.hostpci0.x-nv-gpudirect-clique=0")
    );
    assert!(
        cfg.main
            .description
            .contains("hostpci1: 0000:26:00.0 shares IOMMU group 9 with 0000:25:00.0"),
        "{}",
        cfg.main.description
    );
    // The plan's warning (bind 26:00.0 or give it to the VM) holds for the
    // other formats; the Proxmox entries give it to the VM, so none is printed.
    let stderr = |format: &str| {
        let root = nested.root.to_str().unwrap();
        let args = [&["plan", "--sysfs-root", root][..], &nested.args[..]].concat();
        let r = run("p2p-host", &[&args[..], &["--emit", format]].concat());
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        r.stderr
    };
    assert!(stderr("qemu").contains("IOMMU group 9 also holds 0000:26:00.0"));
    assert_eq!(stderr("proxmox"), "");
}

/// The `qm set` line in the notes sets what the file lines hold.
#[test]
fn qm_set_writes_the_same_and_the_vmid_option_is_checked() {
    let c = Case {
        what: "nested",
        root: fixture_dir(NESTED),
        args: vec!["--gpu-class", "0108"],
    };
    for (extra, id) in [(&[][..], "VMID"), (&["--proxmox-vmid", "101"][..], "101")] {
        let out = emit(&c, extra);
        let cfg = read(c.what, &out);
        let qm = cfg
            .main
            .description
            .lines()
            .find_map(|l| l.trim_start().strip_prefix("qm set "))
            .expect("a qm set line");
        let words = split_args(qm).unwrap();
        assert_eq!(words[0], id);
        let mut set: Vec<(String, String)> = words[1..]
            .chunks(2)
            .map(|w| (w[0].strip_prefix("--").unwrap().to_string(), w[1].clone()))
            .collect();
        let mut lines = cfg.main.options.clone();
        set.sort();
        lines.sort();
        assert_eq!(set, lines);
        assert!(
            out.contains(&format!("/etc/pve/qemu-server/{id}.conf")),
            "{out}"
        );
    }
    // A Proxmox VM id is 100 to 999999999 (pve-common's pve-vmid format,
    // ^[1-9][0-9]{2,8}$), names one VM, and goes with --emit proxmox.
    let base = [
        "plan",
        "--sysfs-root",
        c.root.to_str().unwrap(),
        "--gpu-class",
        "0108",
    ];
    let cases: [(&[&str], i32, &str); 4] = [
        (
            &["--emit", "proxmox", "--proxmox-vmid", "99"],
            2,
            "99 is not in 100..=999999999",
        ),
        (
            &["--emit", "proxmox", "--proxmox-vmid", "1000000000"],
            2,
            "is not in 100..=999999999",
        ),
        (
            &[
                "--emit",
                "proxmox",
                "--proxmox-vmid",
                "101",
                "--vm",
                "a=0000:25:00.0,0000:26:00.0",
                "--vm",
                "b=0000:81:00.0",
            ],
            1,
            "--proxmox-vmid names one VM; the plan has 2 VMs",
        ),
        (
            &["--emit", "qemu", "--proxmox-vmid", "101"],
            1,
            "--proxmox-vmid goes with --emit proxmox",
        ),
    ];
    for (extra, code, needle) in cases {
        let r = run("p2p-host", &[&base[..], extra].concat());
        assert_eq!(r.code, Some(code), "{extra:?}: {}", r.stderr);
        assert!(r.stderr.contains(needle), "{extra:?}: {}", r.stderr);
    }
}

#[test]
fn mirror_is_refused_as_for_incus() {
    let r = run(
        "p2p-host",
        &[
            "plan",
            "--sysfs-root",
            fixture_dir(TWO_SOCKET).to_str().unwrap(),
            "--gpu-class",
            "0108",
            "--guest-topology",
            "mirror",
            "--emit",
            "proxmox",
        ],
    );
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr
            .contains("Proxmox VE lays out the guest's PCIe ports itself")
            && r.stderr.contains("use --guest-topology flat"),
        "{}",
        r.stderr
    );
    assert!(r.stdout.is_empty());
}

/// A guest tree of `gpus` GPUs and `nics` NICs, for the library's limits.
fn synthetic(gpus: usize, nics: usize) -> GuestTopology {
    let dev = |i: usize, role, clique| GuestDevice {
        id: format!("d{i}"),
        role,
        host: Bdf::new(0, 0x40 + i as u8, 0, 0).unwrap(),
        guest: Bdf::new(0, 0, 0x10, 0).unwrap(),
        parent: "pcie.0".into(),
        clique,
        multifunction: false,
    };
    GuestTopology {
        layout: GuestLayout::Flat,
        numa_nodes: vec![],
        root_complexes: vec![],
        ports: vec![],
        devices: (0..gpus)
            .map(|i| dev(i, DeviceRole::Gpu, Some((i % 2) as u8)))
            .chain((gpus..gpus + nics).map(|i| dev(i, DeviceRole::Nic, None)))
            .collect(),
        notes: vec![],
    }
}

/// hostpci0 to hostpci15 (MAX_HOSTPCI_DEVICES = 16): 16 entries fit, the
/// 17th is refused, also when it is another function of a group; a NIC
/// gets an entry without a clique.
#[test]
fn sixteen_entries_fit_and_seventeen_are_refused() {
    use p2p_host::vmm::proxmox::{entries, Passed};
    use p2p_host::vmm::EmitError;
    let g = synthetic(15, 1);
    let e = entries("vm", &g, &[]).unwrap();
    assert_eq!(e.len(), 16);
    assert_eq!(e[15].key(), "hostpci15");
    assert_eq!(e[15].passed, Passed::Nic);
    assert_eq!(e[15].set_arg(), None);
    assert_eq!(
        e[1].set_arg().as_deref(),
        Some("-set device.hostpci1.x-nv-gpudirect-clique=1")
    );
    match entries("vm", &synthetic(17, 0), &[]) {
        Err(EmitError::TooManyHostpci { vm, count: 17 }) => assert_eq!(vm, "vm"),
        other => panic!("{other:?}"),
    }
    // 16 devices plus an audio-like function in the first GPU's group: 17.
    let g = synthetic(16, 0);
    let member = |bdf: Bdf, vm: Option<&str>| GroupMember {
        bdf,
        vm: vm.map(str::to_string),
        bridge: false,
        driver: None,
    };
    let gpu0 = g.devices[0].host;
    let audio = Bdf {
        function: 1,
        ..gpu0
    };
    let groups = [GroupUse {
        group: IommuGroup(3),
        members: vec![member(gpu0, Some("vm")), member(audio, None)],
        warning: None,
    }];
    let err = entries("vm", &g, &groups).unwrap_err();
    assert!(
        err.to_string()
            .contains("VM vm needs 17 hostpci entries (one per function of its devices' IOMMU groups); Proxmox VE takes hostpci0 to hostpci15"),
        "{err}"
    );
    // With 15 GPUs the audio function takes hostpci1, right after its GPU.
    let e = entries("vm", &synthetic(15, 0), &groups).unwrap();
    assert_eq!(e[1].host, audio);
    assert_eq!(
        e[1].passed,
        Passed::GroupMember {
            group: IommuGroup(3),
            with: gpu0
        }
    );
    assert_eq!(e[1].set_arg(), None);
}

/// QEMU 11.1 from the cache (`bash scripts/qemu/setup.sh`).
fn qemu_bin() -> PathBuf {
    p2p_tests::qemu::require_setup().qemu("10")
}

/// Runs QEMU with `args` after a bare q35 machine that stops before running
/// (`-S`); returns its stderr. QEMU exits on the first bad option or device;
/// a run that gets past all of them is stopped after 30 s.
fn qemu(args: &[String]) -> String {
    let mut child = Command::new(qemu_bin())
        .args([
            "-machine",
            "q35,accel=tcg",
            "-nodefaults",
            "-display",
            "none",
            "-monitor",
            "none",
            "-S",
        ])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn_owned()
        .expect("qemu runs");
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The root port qemu-server puts `hostpciN` (pcie=1) on: ports 1-4 come
/// from pve-q35-4.0.cfg at 1c.0-1c.3, ports 5-16 are added at 10.0-11.3.
fn root_port(n: usize) -> String {
    let (slot, func) = if n < 4 {
        (0x1c, n)
    } else {
        (0x10 + (n - 4) / 8, (n - 4) % 8)
    };
    let p = n + 1;
    format!(
        "pcie-root-port,id=ich9-pcie-port-{p},bus=pcie.0,addr={slot:x}.{func},multifunction=on,\
         port={p},chassis={p},x-speed=16,x-width=32"
    )
}

/// `-device` arguments as qemu-server writes them for single-function
/// `hostpciN: BDF,pcie=1` entries: the root port, then `vfio-pci` with id
/// `hostpciN` on it.
fn proxmox_devices(entries: &BTreeMap<String, String>, only: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    for (id, host) in entries {
        if only.is_some_and(|o| o != id) {
            continue;
        }
        let n: usize = id.strip_prefix("hostpci").unwrap().parse().unwrap();
        out.push("-device".into());
        out.push(root_port(n));
        out.push("-device".into());
        out.push(format!(
            "vfio-pci,host={host},id={id},bus=ich9-pcie-port-{},addr=0x0",
            n + 1
        ));
    }
    out
}

#[test]
fn qemu_takes_every_set_and_refuses_a_multifunction_id() {
    let (cases, _guard) = cases();
    let no_device = |err: &str| err.contains("no such host device");
    for c in &cases {
        let out = emit(c, &[]);
        for block in blocks(&out) {
            let cfg = read(c.what, block);
            let ids = hostpcis(c.what, &cfg);
            let args = split_args(cfg.main.get("args").unwrap()).unwrap();
            // The whole VM: every -device, then args, as config_to_command
            // orders them. QEMU reads each -set against the devices given so
            // far; one naming no device stops it with "there is no device".
            // Passing them all, it stops at the first vfio-pci's missing host
            // device: hostpci0, after its properties were set.
            let mut all = proxmox_devices(&ids, None);
            all.extend(args.iter().cloned());
            let err = qemu(&all);
            assert!(
                no_device(&err)
                    && err.contains("id=hostpci0,")
                    && !err.contains("there is no device")
                    && !err.contains("Property"),
                "{}: QEMU refused the VM's args:\n{all:?}\n{err}",
                c.what
            );
            // One GPU at a time: QEMU sets x-nv-gpudirect-clique on the
            // vfio-pci device before looking for the host device, so a bad
            // name or value would be the complaint instead.
            for (id, _, value) in sets(&cfg) {
                let mut one = proxmox_devices(&ids, Some(&id));
                one.push("-set".into());
                one.push(format!("device.{id}.x-nv-gpudirect-clique={value}"));
                let err = qemu(&one);
                assert!(
                    no_device(&err) && !err.contains("Property"),
                    "{}: {id}: {err}",
                    c.what
                );
                // Control: QEMU does check the value there.
                let last = one.len() - 1;
                one[last] = format!("device.{id}.x-nv-gpudirect-clique=16");
                assert!(qemu(&one).contains("valid range 0-15"));
            }
        }
    }

    // Controls on the nested tree's gpu0. The slot form `hostpci0: 0000:25:00`
    // expands to two functions, which qemu-server names hostpci0.0 and
    // hostpci0.1 (id=${id}${mf_addr}): -set reads the id up to the first dot,
    // so neither spelling reaches the GPU, and QEMU does not start.
    let multi = vec![
        "-device".to_string(),
        root_port(0),
        "-device".into(),
        "vfio-pci,host=0000:25:00.0,id=hostpci0.0,bus=ich9-pcie-port-1,addr=0x0.0,multifunction=on"
            .into(),
        "-device".into(),
        "vfio-pci,host=0000:25:00.1,id=hostpci0.1,bus=ich9-pcie-port-1,addr=0x0.1".into(),
    ];
    for set in [
        "device.hostpci0.0.x-nv-gpudirect-clique=0",
        "device.hostpci0.x-nv-gpudirect-clique=0",
    ] {
        let mut a = multi.clone();
        a.extend(["-set".to_string(), set.to_string()]);
        let err = qemu(&a);
        assert!(
            err.contains("there is no device \"hostpci0\" defined"),
            "{set}: {err}"
        );
    }
    // And args before the -device it names is refused too: the order matters.
    let ids = BTreeMap::from([("hostpci0".to_string(), "0000:25:00.0".to_string())]);
    let mut early = vec![
        "-set".to_string(),
        "device.hostpci0.x-nv-gpudirect-clique=0".into(),
    ];
    early.extend(proxmox_devices(&ids, None));
    assert!(qemu(&early).contains("there is no device \"hostpci0\" defined"));
}

/// The parser refuses what Proxmox refuses, so the checks above can fail.
#[test]
fn the_parser_refuses_what_proxmox_refuses() {
    for (bad, why) in [
        ("hostpci16: 0000:25:00.0,pcie=1", "hostpci0 to hostpci15"),
        ("hostpci0: 0000:25:00.0,pcie=maybe", "not a boolean"),
        ("hostpci0: 0000:25:00.0,bogus=1", "unknown key"),
        ("hostpci0: 0000:25:0.0", "not a host PCI id"),
        ("hostpci0: 0000:25:00.0,pcie=1,pcie=0", "duplicate key"),
        ("args: -set 'unterminated", "unterminated"),
        ("hostpci0 0000:25:00.0", "unable to parse config"),
        ("[bad section!]", "unknown section"),
    ] {
        let e = parse(bad).unwrap_err();
        assert!(e.why.contains(why), "{bad}: {e}");
    }
    // And reads what Proxmox writes: notes, snapshots, the slot form.
    let cfg = parse(
        "#notes\nhostpci0: 0000:25:00,pcie=1\nhostpci1: host=01:00.0;01:00.1\n\n[snap1]\nmemory: 512\n",
    )
    .unwrap();
    assert_eq!(cfg.main.description, "notes\n");
    assert_eq!(cfg.snapshots[0].0, "snap1");
    let slot = parse_hostpci(cfg.main.get("hostpci0").unwrap()).unwrap();
    assert_eq!(slot.single_function(), None, "a slot is every function");
    let list = parse_hostpci(cfg.main.get("hostpci1").unwrap()).unwrap();
    assert_eq!(list.hosts.len(), 2);
    assert_eq!(list.single_function(), None);
    assert_eq!(
        proxmox::split_args(r#"-a 'b c' "d\"e" f\ g"#).unwrap(),
        ["-a", "b c", "d\"e", "f g"]
    );
}
