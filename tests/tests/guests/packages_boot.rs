//! The guest package's boot units booting for real (README "Install",
//! docs/install.md): the packaged Debian 12 root, packed into an initramfs
//! with systemd as init, boots under QEMU 11.1 with six GPUs served by
//! `p2p-host serve`, once with the host's NCCL file over fw_cfg, once with a
//! file naming a missing GPU, once with none; the host's serve unit runs in
//! the first boot. What the guest reports comes from systemd itself
//! (`systemctl show`, the journal) and from the file on its disk.
//!
//! Needs root (chroot) and `bash scripts/qemu/setup.sh`; a missing piece
//! fails the test with the hint, it never skips.

use std::process::Command;

use p2p_tests::e2e::Checks;
use p2p_tests::packages::{debs, DebianRoot};
use p2p_tests::repo_root;

/// The values a boot report gave under `key`, a line each.
fn report_text(report: &[(String, String)], key: &str) -> String {
    report
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| format!("{v}\n"))
        .collect()
}

/// The `busid`s of every `<pci>` in an NCCL topology file.
fn busids(xml: &str) -> std::collections::BTreeSet<String> {
    let doc = roxmltree::Document::parse(xml).unwrap_or_else(|e| panic!("{e}:\n{xml}"));
    doc.descendants()
        .filter(|n| n.has_tag_name("pci"))
        .filter_map(|n| n.attribute("busid").map(str::to_string))
        .collect()
}

/// What the host hands over, and what the guest must then show.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Handed {
    /// The file derived from the guest's own captured tree.
    Matching,
    /// The same with GPU 0000:23:00.0 renamed 0000:99:00.0 (no such function).
    MissingGpu,
    /// No fw_cfg entry.
    Nothing,
}

#[test]
fn the_guest_units_put_the_file_in_place_at_boot_and_a_mismatch_does_not_block_boot() {
    use p2p_tests::e2e::{
        boot_with, hand_cliques, require_vfio_user_qemu, unpack_h200, Server, GPUS, HAND_CLIQUES,
    };
    use p2p_tests::packages::{report_lines, unit_property};
    use p2p_tests::{binary, fixture_dir};

    let _setup = require_vfio_user_qemu();
    let debs = debs();
    let root = DebianRoot::copy();
    root.install(&[&debs.host, &debs.guest]);
    // The host unit's instance vm1 serves the captured H200 from /var/lib/vp2p.
    let lib = root.path().join("var/lib/vp2p/vm1");
    std::fs::create_dir_all(&lib).unwrap();
    let config = unpack_h200(&lib);
    let in_guest = format!("/{}", config.strip_prefix(root.path()).unwrap().display());
    let status = Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(&lib)
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::write(
        root.path().join("etc/vp2p/serve/vm1.conf"),
        format!("# the boot test's instance\nsocket=/run/vp2p/vm1/gpu0.sock,config={in_guest},clique=0,max-bar=256M\n"),
    )
    .unwrap();
    let work = tempfile::Builder::new()
        .prefix("vp2p-boot.")
        .tempdir_in(repo_root().join("target"))
        .unwrap();
    let initrd = work.path().join("initrd.gz");
    root.pack_initramfs(&initrd);
    drop(root);

    // The host's file: what p2p-guest derives on the captured guest of this
    // very topology (cliques 0,0,0,1,2,2 in its capabilities).
    let tree = fixture_dir("qemu-11.1-vfio-user-gpus").join("sysfs");
    let out = Command::new(binary("p2p-guest"))
        .args(["nccl-topo", "--sysfs-root"])
        .arg(&tree)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let matching = String::from_utf8(out.stdout).unwrap();
    assert!(matching.contains("busid=\"0000:23:00.0\""), "{matching}");
    let missing = matching.replace("0000:23:00.0", "0000:99:00.0");
    let host_config = unpack_h200(work.path());
    let served: Vec<_> = GPUS.iter().copied().zip(HAND_CLIQUES).collect();

    let mut c = Checks::default();
    for handed in [Handed::Matching, Handed::MissingGpu, Handed::Nothing] {
        let name = format!("{handed:?}");
        let sockets = work.path().join(format!("sockets-{name}"));
        std::fs::create_dir_all(&sockets).unwrap();
        let server = Server::start(&binary("p2p-host"), &sockets, &host_config, &served);
        let mut extra = Vec::new();
        let file = work.path().join(format!("{name}.xml"));
        match handed {
            Handed::Matching => std::fs::write(&file, &matching).unwrap(),
            Handed::MissingGpu => std::fs::write(&file, &missing).unwrap(),
            Handed::Nothing => {}
        }
        if handed != Handed::Nothing {
            extra.push(format!(
                "-fw_cfg name=opt/vp2p/nccl-topo.xml,file={}",
                file.display()
            ));
        }
        let append = if handed == Handed::Matching {
            "vp2p.host_units=1"
        } else {
            ""
        };
        let log = work.path().join(format!("console-{name}.log"));
        eprintln!("booting the systemd guest, host file: {name} ...");
        let booted = boot_with(&initrd, &sockets, &log, 300, &extra, append);
        drop(server);
        let console = std::fs::read_to_string(&log).unwrap_or_default();
        eprintln!(
            "  {name}: boot.sh exit {:?} after {:.0} s",
            booted.status,
            booted.wall.as_secs_f64()
        );
        let report = report_lines(&console);
        let prop = |unit: &str, p: &str| unit_property(&report, unit, p).unwrap_or_default();
        let ok = booted.status == Some(0) && !report.is_empty();
        c.check(
            format!("{name}: boots to multi-user.target and reports"),
            ok,
            || {
                format!(
                    "boot.sh {:?}\n{}\n{}",
                    booted.status,
                    booted.stderr,
                    console
                        .chars()
                        .rev()
                        .take(3000)
                        .collect::<String>()
                        .chars()
                        .rev()
                        .collect::<String>()
                )
            },
        );
        if !ok {
            continue;
        }
        c.eq(
            format!("{name}: multi-user.target reached"),
            prop("multi-user.target", "ActiveState"),
            "active".into(),
        );
        let xml = report_text(&report, "xml");
        let present = report.iter().any(|(k, v)| k == "file" && v == "present");
        let journal = report_text(&report, "journal");
        let t = |unit: &str| {
            prop(unit, "ActiveEnterTimestampMonotonic")
                .parse::<u64>()
                .unwrap_or(0)
        };
        match handed {
            Handed::Matching => {
                let u = "vp2p-nccl-topo.service";
                c.eq(
                    format!("{name}: {u} active"),
                    prop(u, "ActiveState"),
                    "active".into(),
                );
                c.eq(
                    format!("{name}: {u} succeeded"),
                    prop(u, "Result"),
                    "success".into(),
                );
                c.eq(
                    format!("{name}: the cliques unit is skipped"),
                    prop("vp2p-nccl-topo-cliques.service", "ConditionResult"),
                    "no".into(),
                );
                c.check(format!("{name}: file installed"), present, || {
                    journal.clone()
                });
                c.eq(
                    format!("{name}: installed file's bus ids are the host's"),
                    busids(&xml),
                    busids(&matching),
                );
                let (unit, sysinit, multi) = (t(u), t("sysinit.target"), t("multi-user.target"));
                c.check(
                    format!("{name}: installed before sysinit.target, so before multi-user.target"),
                    unit > 0 && unit <= sysinit && sysinit < multi,
                    || format!("unit {unit} us, sysinit {sysinit} us, multi-user {multi} us"),
                );
                // The host unit: a missing conf fails once, clearly; a good one serves.
                let m = "p2p-host-serve@missing.service";
                c.eq(
                    format!("{m} failed"),
                    prop(m, "ActiveState"),
                    "failed".into(),
                );
                c.eq(
                    format!("{m} exit status 78"),
                    prop(m, "ExecMainStatus"),
                    "78".into(),
                );
                c.eq(
                    format!("{m} not restarted"),
                    prop(m, "NRestarts"),
                    "0".into(),
                );
                let mj = report_text(&report, &format!("journal-{m}"));
                c.check(
                    format!("{m}: the journal names the file"),
                    mj.contains("/etc/vp2p/serve/missing.conf: No such file or directory"),
                    || mj.clone(),
                );
                let v = "p2p-host-serve@vm1.service";
                c.eq(
                    format!("{v} active"),
                    prop(v, "ActiveState"),
                    "active".into(),
                );
                let vj = report_text(&report, &format!("journal-{v}"));
                c.check(
                    format!("{v}: serving"),
                    vj.contains("p2p-host serve: ready: 1 GPU(s)"),
                    || vj.clone(),
                );
                let stat: Vec<String> = report
                    .iter()
                    .filter(|(k, _)| k == "stat")
                    .map(|(_, v)| v.clone())
                    .collect();
                c.eq(
                    format!("{v}: socket folder and socket for group kvm"),
                    stat,
                    vec![
                        "/run/vp2p/vm1 750 kvm directory".to_string(),
                        "/run/vp2p/vm1/gpu0.sock 660 kvm socket".to_string(),
                    ],
                );
            }
            Handed::MissingGpu => {
                let u = "vp2p-nccl-topo.service";
                c.eq(
                    format!("{name}: {u} failed"),
                    prop(u, "ActiveState"),
                    "failed".into(),
                );
                c.eq(
                    format!("{name}: {u} exit-code"),
                    prop(u, "Result"),
                    "exit-code".into(),
                );
                c.check(
                    format!("{name}: the journal names the missing bus id"),
                    journal.contains("0000:99:00.0"),
                    || journal.clone(),
                );
                c.check(format!("{name}: no file written"), !present, || xml.clone());
                c.eq(
                    format!("{name}: the cliques unit stays out of it"),
                    prop("vp2p-nccl-topo-cliques.service", "ConditionResult"),
                    "no".into(),
                );
            }
            Handed::Nothing => {
                c.eq(
                    format!("{name}: the fw_cfg unit is skipped"),
                    prop("vp2p-nccl-topo.service", "ConditionResult"),
                    "no".into(),
                );
                let u = "vp2p-nccl-topo-cliques.service";
                c.eq(
                    format!("{name}: {u} succeeded"),
                    prop(u, "Result"),
                    "success".into(),
                );
                c.check(format!("{name}: derived file installed"), present, || {
                    journal.clone()
                });
                if present {
                    // GPUs of one clique share a parent; other cliques do not.
                    let doc = roxmltree::Document::parse(&xml).unwrap();
                    let parent = |bdf: &str| {
                        doc.descendants()
                            .find(|n| n.has_tag_name("pci") && n.attribute("busid") == Some(bdf))
                            .and_then(|n| n.parent())
                            .and_then(|p| p.attribute("busid").map(str::to_string))
                    };
                    let hand = hand_cliques();
                    for (a, ca) in &hand {
                        for (b, cb) in &hand {
                            if a < b {
                                let same = parent(a).is_some() && parent(a) == parent(b);
                                c.eq(
                                    format!("{name}: {a} and {b} share a switch iff one clique"),
                                    same,
                                    ca == cb,
                                );
                            }
                        }
                    }
                }
            }
        }
    }
    eprintln!("{}", c.summary());
    assert!(c.failed.is_empty(), "{}", c.summary());
}
