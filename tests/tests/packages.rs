//! The .debs as an operator installs them (README "Install"): built by
//! `scripts/package.sh`, installed with the README's own `dpkg -i` lines into a
//! Debian 12 root with systemd, man-db and bash-completion, checked there, and
//! removed. Expectations come from outside the packaging code: git for the
//! commit, each binary's own `--help` for the man pages, bash for the
//! completions, systemd-analyze for the units, docs/install.md for the file
//! list and the security score, and the root's file list before installing
//! for `dpkg -r`.
//!
//! Needs root (chroot) and `bash scripts/qemu/setup.sh` (the cached root); a
//! missing piece fails the test with the hint, it never skips.

use std::process::Command;

use p2p_tests::e2e::Checks;
use p2p_tests::packages::{debs, help_commands, DebianRoot};
use p2p_tests::repo_root;

/// The lines of the fenced block that follows `marker` in `page` (a path
/// from the repository's root).
fn block_after(page: &str, marker: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(repo_root().join(page)).expect(page);
    let at = readme
        .find(marker)
        .unwrap_or_else(|| panic!("{page} has no '{marker}'"));
    let rest = &readme[at..];
    let open = rest.find("```").expect("a fenced block after the marker");
    let body = &rest[open..];
    let body = &body[body.find('\n').unwrap() + 1..];
    let close = body.find("\n```").expect("the block's end");
    body[..close].lines().map(str::to_string).collect()
}

/// Whether `path` matches `pattern`, where `*` stands for any run of
/// characters within one file name.
fn glob_match(pattern: &str, path: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == path,
        Some((head, tail)) => {
            path.starts_with(head)
                && path.len() >= head.len() + tail.len()
                && path.ends_with(tail)
                && !path[head.len()..path.len() - tail.len()].contains('/')
        }
    }
}

fn head_commit() -> String {
    let out = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(repo_root())
        .output()
        .expect("git rev-parse: the test compares --version with the checkout's HEAD");
    assert!(out.status.success(), "git rev-parse HEAD failed");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn glob_patterns_match_within_one_file_name() {
    assert!(glob_match(
        "/usr/share/man/man1/p2p-host*.1.gz",
        "/usr/share/man/man1/p2p-host-plan.1.gz"
    ));
    assert!(glob_match(
        "/usr/share/man/man1/p2p-host*.1.gz",
        "/usr/share/man/man1/p2p-host.1.gz"
    ));
    assert!(!glob_match(
        "/usr/share/man/man1/p2p-host*.1.gz",
        "/usr/share/man/man1/p2p-guest.1.gz"
    ));
    assert!(!glob_match("/usr/*.gz", "/usr/share/a.gz"));
    assert!(glob_match("/usr/bin/p2p-host", "/usr/bin/p2p-host"));
}

#[test]
fn both_packages_install_work_and_leave_nothing_behind() {
    let debs = debs();
    let root = DebianRoot::copy();
    let before = root.paths();
    let mut c = Checks::default();

    // The README's install lines, run as written (sudo is root here; the
    // package files sit where package.sh left them, target/debian/).
    let install = block_after("README.md", "## Install");
    let dpkg_lines: Vec<&String> = install.iter().filter(|l| l.contains("dpkg -i")).collect();
    c.eq("README: two dpkg -i lines", dpkg_lines.len(), 2);
    c.check(
        "README: the packages are built by scripts/package.sh",
        install
            .iter()
            .any(|l| l.trim() == "bash scripts/package.sh"),
        || format!("{install:?}"),
    );
    let build = root.path().join("build/target/debian");
    std::fs::create_dir_all(&build).unwrap();
    for deb in [&debs.host, &debs.guest] {
        std::fs::copy(deb, build.join(deb.file_name().unwrap())).unwrap();
    }
    for line in &dpkg_lines {
        let script = format!("sudo() {{ \"$@\"; }}; cd /build && {line}");
        let out = root.run(&["bash", "-c", &script]);
        c.check(format!("`{line}` succeeds"), out.status.success(), || {
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
    }
    std::fs::remove_dir_all(root.path().join("build")).unwrap();

    // --version names the commit of this checkout.
    let commit = head_commit();
    for bin in ["p2p-host", "p2p-guest"] {
        let v = root.run_ok(&[bin, "--version"]);
        c.eq(
            format!("{bin} --version"),
            v.trim().to_string(),
            format!("{bin} 0.1.0 (commit {commit})"),
        );
    }

    // A man page for the binary and for every command its --help lists (and
    // the subcommands of those that have some).
    for bin in ["p2p-host", "p2p-guest"] {
        let mut pages = vec![bin.to_string()];
        for cmd in help_commands(&root.run_ok(&[bin, "--help"])) {
            let page = format!("{bin}-{cmd}");
            for sub in help_commands(&root.run_ok(&[bin, &cmd, "--help"])) {
                pages.push(format!("{page}-{sub}"));
            }
            pages.push(page);
        }
        c.check(
            format!("{bin}: more than 5 pages expected"),
            pages.len() > 5,
            || format!("{pages:?}"),
        );
        for page in pages {
            let out = root.run(&["man", "-w", &page]);
            let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
            c.eq(
                format!("man -w {page}"),
                path,
                format!("/usr/share/man/man1/{page}.1.gz"),
            );
        }
        // The page renders, and its NAME line is the page's.
        let text = root.run_ok(&["env", "MANWIDTH=200", "man", "-P", "cat", bin]);
        c.check(
            format!("man {bin} renders its NAME"),
            text.contains(&format!("{bin} -")),
            || text.chars().take(400).collect(),
        );
    }

    // bash loads the completions on demand and completes a subcommand.
    for (bin, typed, want) in [
        ("p2p-host", "to", "topo"),
        ("p2p-guest", "nccl", "nccl-topo"),
    ] {
        let script = format!(
            ". /usr/share/bash-completion/bash_completion; _completion_loader {bin}; \
             complete -p {bin}; COMP_WORDS=({bin} {typed}); COMP_CWORD=1; \
             COMP_LINE='{bin} {typed}'; COMP_POINT=${{#COMP_LINE}}; \
             $(complete -p {bin} | sed -n 's/.*-F \\([^ ]*\\).*/\\1/p') {bin} {typed} {bin}; \
             printf 'reply %s\\n' \"${{COMPREPLY[@]}}\""
        );
        let out = root.run(&["bash", "-c", &script]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        c.check(
            format!("bash completes `{bin} {typed}` to {want}"),
            text.lines().any(|l| l.trim() == format!("reply {want}")),
            || format!("{text}{}", String::from_utf8_lossy(&out.stderr)),
        );
    }

    // systemd-analyze accepts the units, and rejects a broken one (control).
    for unit in [
        "vp2p-nccl-topo.service",
        "vp2p-nccl-topo-cliques.service",
        "p2p-host-serve@vm1.service",
    ] {
        let out = root.run(&["systemd-analyze", "verify", unit]);
        c.check(
            format!("systemd-analyze verify {unit}"),
            out.status.success() && out.stderr.is_empty(),
            || String::from_utf8_lossy(&out.stderr).into_owned(),
        );
    }
    std::fs::write(
        root.path().join("tmp/broken.service"),
        "[Service]\nExecStart=/usr/bin/p2p-guest-missing\n",
    )
    .unwrap();
    let out = root.run(&["systemd-analyze", "verify", "/tmp/broken.service"]);
    c.check(
        "systemd-analyze verify rejects a unit whose binary is missing",
        !out.status.success(),
        || "it passed".into(),
    );
    std::fs::remove_file(root.path().join("tmp/broken.service")).unwrap();
    let enabled = root.path().join("etc/systemd/system/sysinit.target.wants");
    for unit in ["vp2p-nccl-topo.service", "vp2p-nccl-topo-cliques.service"] {
        // The link points into the root (absolute), so it is not followed here.
        let link = std::fs::symlink_metadata(enabled.join(unit));
        c.check(
            format!("{unit} enabled at install"),
            link.is_ok_and(|m| m.is_symlink()),
            || format!("no link in {}", enabled.display()),
        );
    }

    // The security score docs/install.md gives is what systemd-analyze says.
    let out = root.run(&[
        "systemd-analyze",
        "security",
        "--offline=true",
        "p2p-host-serve@vm1.service",
    ]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let measured = text
        .lines()
        .find_map(|l| l.split_once("Overall exposure level for p2p-host-serve@vm1.service: "))
        .map(|(_, v)| v.split_whitespace().take(2).collect::<Vec<_>>().join(" "));
    let page = std::fs::read_to_string(repo_root().join("docs/install.md")).unwrap();
    let claimed = page
        .split_once("p2p-host-serve@vm1.service` rates it **")
        .and_then(|(_, r)| r.split_once("**"))
        .map(|(v, _)| v.to_string());
    eprintln!("systemd-analyze security p2p-host-serve@vm1.service: {measured:?}");
    c.check(
        "docs/install.md's security score is systemd-analyze's",
        measured.is_some() && measured == claimed,
        || format!("measured {measured:?}, docs/install.md {claimed:?}"),
    );

    // dpkg -L lists what docs/install.md says, no more, no less.
    let listed: Vec<(String, String)> = block_after("docs/install.md", "What lands where")
        .iter()
        .filter(|l| l.starts_with('/'))
        .map(|l| {
            let pattern = l.split_whitespace().next().unwrap().to_string();
            (pattern, l.clone())
        })
        .collect();
    let mut files = Vec::new();
    for pkg in ["p2p-host", "p2p-guest"] {
        for path in root.run_ok(&["dpkg", "-L", pkg]).lines() {
            if root.path().join(path.trim_start_matches('/')).is_file() {
                files.push(path.to_string());
            }
        }
    }
    for f in &files {
        c.check(
            format!("README lists {f}"),
            listed.iter().any(|(p, _)| glob_match(p, f)),
            || "no line of docs/install.md matches it".into(),
        );
    }
    for (p, line) in &listed {
        c.check(
            format!("{p} is installed"),
            files.iter().any(|f| glob_match(p, f)),
            || format!("docs/install.md line '{line}' matches nothing dpkg -L lists"),
        );
    }

    // dpkg -r takes everything back: the tree is the one before the install.
    root.run_ok(&["dpkg", "-r", "p2p-guest", "p2p-host"]);
    let after = root.paths();
    let left: Vec<&String> = after.difference(&before).collect();
    let gone: Vec<&String> = before.difference(&after).collect();
    c.check("dpkg -r leaves nothing behind", left.is_empty(), || {
        format!("left: {left:?}")
    });
    c.check("dpkg -r removes nothing else", gone.is_empty(), || {
        format!("gone: {gone:?}")
    });

    eprintln!("{}", c.summary());
    assert!(c.failed.is_empty(), "{}", c.summary());
}

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
