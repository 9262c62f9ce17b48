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
