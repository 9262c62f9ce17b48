//! Hostile input, tried as an attacker would (issue 28), through the real
//! binaries: nesting past every reader's bound, huge tokens, files that never
//! end, a kernel command line that quotes, and the exit codes. Each case
//! failed before its fix (a SIGABRT on the stack, a read until memory ran
//! out, a 100 MB message, a parameter misread); what is expected comes from
//! the kernel's and NCCL's own rules, cited where they are used.

use p2p_tests::process::SpawnOwned;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use p2p_tests::{binary, fixture_dir, run, Run};

/// Runs `name args`, killed after `limit`: a command that does not end
/// (reading /dev/zero) fails the test instead of hanging it. Its output is
/// drained while it runs, so a large report cannot block it on a full pipe.
fn run_within(name: &str, args: &[&str], limit: Duration) -> Run {
    let mut child = Command::new(binary(name))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn_owned()
        .expect("the binary runs");
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            pipe.read_to_end(&mut buf).unwrap();
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("{name} {args:?} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code: status.code(),
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

/// An NCCL topology file with `depth` `<pci>` nested below one `<cpu>`, one
/// per line from line 3.
fn nested_nccl(depth: usize) -> String {
    let mut s = String::from("<system version=\"1\">\n<cpu numaid=\"0\">\n");
    for i in 0..depth {
        s += &format!(
            "<pci busid=\"0000:{:02x}:00.0\" class=\"0x060400\">\n",
            i % 256
        );
    }
    s += &"</pci>".repeat(depth);
    s + "\n</cpu>\n</system>\n"
}

fn explain(file: &Path) -> Run {
    run(
        "p2p-guest",
        &[
            "nccl-topo",
            "explain",
            "--no-driver",
            "--file",
            file.to_str().unwrap(),
        ],
    )
}

/// 12,000 levels of `<pci>` aborted `explain` with SIGABRT (the stack); now
/// NCCL's own reader, as explain models it, stops once it holds 256
/// elements (NCCL_TOPO_XML_MAX_NODES, src/graph/xml.cc:192 at v2.28.3-1):
/// system, cpu and 254 levels, the last on line 256. The installer names the
/// file; vp2p's reader alone (unit tests of p2p_nccl::xml) refuses the 257th
/// level.
#[test]
fn nccl_files_nested_12000_deep_are_refused_at_the_257th_level() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("deep.xml");
    std::fs::write(&file, nested_nccl(12_000)).unwrap();
    let r = explain(&file);
    assert_eq!(r.code, Some(1), "ended by a signal or passed: {}", r.stderr);
    let refusal =
        "line 256: in <pci>: NCCL prints \"NCCL WARN Error : XML parser is limited to 256 nodes\"";
    assert!(r.stdout.contains(refusal), "{}", r.stdout);
    // The guest's installer reads the host's file with its own reader.
    let tree = fixture_dir("qemu-11.1-two-socket-iommu-on");
    let r = run(
        "p2p-guest",
        &[
            "nccl-topo",
            "install",
            "--dry-run",
            "--sysfs-root",
            tree.to_str().unwrap(),
            "--from",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "{}: NCCL 2.28.3 refuses this file at initialisation",
            file.display()
        )) && r.stderr.contains(refusal),
        "{}",
        r.stderr
    );
    // 256 levels are read (the file then explained has no GPU: exit 0).
    std::fs::write(&file, nested_nccl(256)).unwrap();
    let r = explain(&file);
    assert!(!r.stderr.contains("nested"), "{}", r.stderr);
    assert!(r.code.is_some(), "{}", r.stderr);
}

/// A 50 MB attribute went into the error whole, twice for busid and class
/// (100 MB on stderr); now NCCL's own reader refuses it after 253
/// characters (src/graph/xml.cc:66 at v2.28.3-1), and what is printed
/// quotes the 254 NCCL quotes, never the value.
#[test]
fn a_50_mb_nccl_attribute_is_quoted_as_a_short_prefix() {
    let dump =
        std::fs::read_to_string(fixture_dir("h200x2-passthrough-guest").join("nccl-topo-dump.xml"))
            .unwrap();
    let huge = "a".repeat(50_000_000);
    let dir = tempfile::tempdir().unwrap();
    for (at, line) in [
        ("busid=\"0000:00:06.0\"", 3),
        ("class=\"0x030200\"", 3),
        ("count=\"18\"", 5),
    ] {
        let name = at.split('=').next().unwrap();
        let file = dir.path().join(format!("{name}.xml"));
        std::fs::write(&file, dump.replacen(at, &format!("{name}=\"{huge}\""), 1)).unwrap();
        let r = explain(&file);
        assert_eq!(r.code, Some(1), "{name}");
        assert!(
            r.stderr.len() + r.stdout.len() < 4096,
            "{name}: {} bytes printed",
            r.stderr.len() + r.stdout.len()
        );
        let quoted = format!(
            "line {line}: <{}>: NCCL prints \"NCCL WARN Error : value {} too long (max 255)\"",
            if name == "count" { "nvlink" } else { "pci" },
            "a".repeat(254)
        );
        assert!(r.stdout.contains(&quoted), "{}", r.stdout);
    }
}

/// A file cut short was reported at line 1; it is reported where it ends.
/// `count="-1"` was "not a number"; it says what a count must be.
#[test]
fn truncated_and_negative_nccl_files_say_where_and_what() {
    let dump =
        std::fs::read_to_string(fixture_dir("h200x2-passthrough-guest").join("nccl-topo-dump.xml"))
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Cut inside the second GPU's <pci> (line 11 of the dump).
    let cut = &dump[..dump.find("<pci busid=\"0000:00:07.0\"").unwrap() + 20];
    assert_eq!(cut.lines().count(), 11);
    let file = dir.path().join("cut.xml");
    std::fs::write(&file, cut).unwrap();
    let r = explain(&file);
    assert_eq!(r.code, Some(1));
    assert!(
        r.stdout
            .contains("line 11: <pci>: NCCL prints \"NCCL WARN XML Parse : Unexpected EOF\""),
        "{}",
        r.stdout
    );
    let file = dir.path().join("neg.xml");
    std::fs::write(&file, dump.replacen("count=\"18\"", "count=\"-1\"", 1)).unwrap();
    let r = explain(&file);
    assert!(
        r.stderr
            .contains("neg.xml: line 5: <nvlink> count=\"-1\" must be a non-negative integer"),
        "{}",
        r.stderr
    );
}

/// A libvirt domain nested 12,000 deep (as KubeVirt's shim hands it on the
/// command line) or 1,000,000 deep (a file) overflowed roxmltree 0.20's
/// recursive tokenizer; roxmltree 0.21.2 reads nesting iteratively, and the
/// domain reader walks only fixed paths. The domain has no GPU: unchanged.
#[test]
fn domains_nested_a_million_deep_are_read() {
    let src = std::fs::read_to_string(fixture_dir("domains").join("virt-manager-q35.xml")).unwrap();
    let deep = |n: usize| {
        src.replacen(
            "<devices>",
            &format!(
                "<metadata>{}{}</metadata>\n<devices>",
                "<a>".repeat(n),
                "</a>".repeat(n)
            ),
            1,
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("deep.xml");
    std::fs::write(&file, deep(1_000_000)).unwrap();
    let tree = fixture_dir("qemu-11.1-two-socket-iommu-on");
    let r = run(
        "p2p-host",
        &[
            "plan",
            "--sysfs-root",
            tree.to_str().unwrap(),
            "--patch-domain",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stderr.contains("nothing to patch"), "{}", r.stderr);
    let domain = deep(12_000);
    let r = run(
        "p2p-host",
        &[
            "kubevirt",
            "on-define-domain",
            "--vmi",
            "{}",
            "--domain",
            &domain,
            "--sysfs-root",
            tree.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.stdout, domain, "the domain passes unchanged");
}

/// A VMI nested past serde_json's 128 levels: the hook names the depth and
/// passes the domain unchanged (KubeVirt's default on-error: keep).
#[test]
fn a_vmi_nested_past_128_levels_is_named_and_the_domain_kept() {
    let src =
        std::fs::read_to_string(fixture_dir("domains").join("kubevirt-virt-launcher.xml")).unwrap();
    let vmi = format!("{{\"metadata\": {}", "[".repeat(100_000));
    let tree = fixture_dir("qemu-11.1-two-socket-iommu-on");
    let r = run(
        "p2p-host",
        &[
            "kubevirt",
            "on-define-domain",
            "--vmi",
            &vmi,
            "--domain",
            &src,
            "--sysfs-root",
            tree.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("--vmi is not JSON: nested deeper than 128 levels"),
        "{}",
        r.stderr
    );
    assert_eq!(r.stdout, src);
}

fn check_with_cmdline(file: &Path) -> Run {
    let tree = fixture_dir("qemu-11.1-two-socket-iommu-on");
    run_within(
        "p2p-host",
        &[
            "check",
            "--json",
            "--sysfs-root",
            tree.to_str().unwrap(),
            "--gpu-class",
            "0108",
            "--cmdline-from",
            file.to_str().unwrap(),
        ],
        Duration::from_secs(20),
    )
}

/// `--cmdline-from /dev/zero` read until memory ran out; a device, a FIFO or
/// a file past 64 KiB is refused at once, naming it.
#[test]
fn cmdline_files_that_never_end_or_are_too_big_are_refused() {
    let r = check_with_cmdline(Path::new("/dev/zero"));
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("--cmdline-from: /dev/zero: not a regular file but a character device"),
        "{}",
        r.stderr
    );
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path and a mode; mkfifo touches nothing else.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let r = check_with_cmdline(&fifo);
    assert!(
        r.stderr.contains("not a regular file but a FIFO"),
        "{}",
        r.stderr
    );
    let big = dir.path().join("big.txt");
    let mut f = std::fs::File::create(&big).unwrap();
    // A plausible line, then padding past 64 KiB.
    f.write_all(b"ro intel_iommu=on iommu=pt ").unwrap();
    f.write_all(&vec![b'x'; 64 * 1024]).unwrap();
    drop(f);
    let r = check_with_cmdline(&big);
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr.contains("big.txt: longer than 65536 bytes"),
        "{}",
        r.stderr
    );
    // Exactly 64 KiB is read.
    let edge = dir.path().join("edge.txt");
    let mut line = b"ro iommu=pt ".to_vec();
    line.resize(64 * 1024, b'x');
    std::fs::write(&edge, &line).unwrap();
    let r = check_with_cmdline(&edge);
    assert!(r.code.is_some_and(|c| c <= 2), "{}", r.stderr);
    assert_eq!(iommu_mode(&r), "pass");
}

/// The `iommu-mode` verdict and evidence of a `check --json` run.
fn iommu_mode(r: &Run) -> String {
    let v: serde_json::Value =
        serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", r.stderr));
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["check"] == "iommu-mode")
        .unwrap()["verdict"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The kernel's rules (next_arg in lib/cmdline.c, parse_args in
/// kernel/params.c; kernel-parameters.rst at tag v6.11): `iommu=pt` inside a
/// quoted value, after an unterminated quote or after `--` is not set; a
/// parameter wholly quoted, or set with a hyphen-free name, is.
#[test]
fn the_command_line_is_read_as_the_kernel_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    for (line, want) in [
        ("ro intel_iommu=on iommu=pt quiet", "pass"),
        (
            "ro dyndbg=\"module vfio iommu=pt intel_iommu=on\" quiet",
            "warn",
        ),
        ("ro foo=\"bar iommu=pt", "warn"),
        ("ro -- iommu=pt", "warn"),
        ("ro \"iommu=pt\" quiet", "pass"),
        ("ro iommu=\"pt\"", "pass"),
        ("ro --x iommu=pt", "pass"),
    ] {
        let file = dir.path().join("cmdline");
        std::fs::write(&file, format!("{line}\n")).unwrap();
        let r = check_with_cmdline(&file);
        assert_eq!(iommu_mode(&r), want, "{line}");
    }
}

/// `allocate`: 2 is clap's usage error, a refusal is 3 (it was 2 for both).
#[test]
fn allocate_tells_a_usage_error_from_a_refusal() {
    let tree = fixture_dir("qemu-11.1-two-socket-iommu-on").join("sysfs");
    let tree = tree.to_str().unwrap();
    let base = ["allocate", "--sysfs-root", tree, "--gpu-class", "0108"];
    let with = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        run("p2p-host", &a)
    };
    let r = with(&["--available", "0000:23:00.0", "--size", "x"]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    let r = with(&["--available", "0000:23:00.0", "--size", "2"]);
    assert_eq!(r.code, Some(3), "{}", r.stderr);
    assert!(
        r.stderr.contains("2 GPUs asked for, 1 available"),
        "{}",
        r.stderr
    );
}

/// `--fm-partitions` with a wrong isActive said `untagged enum Active`; it
/// says what the file should hold.
#[test]
fn fm_partition_errors_say_what_the_file_should_hold() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fmpm.json");
    std::fs::write(
        &file,
        r#"{"partitionInfo": [{"partitionId": 0, "isActive": "no", "numGpus": 1,
            "gpuInfo": [{"pciBusId": "00000000:23:00.0"}]}]}"#,
    )
    .unwrap();
    let tree = fixture_dir("qemu-11.1-two-socket-iommu-on").join("sysfs");
    let r = run(
        "p2p-host",
        &[
            "allocate",
            "--sysfs-root",
            tree.to_str().unwrap(),
            "--gpu-class",
            "0108",
            "--available",
            "0000:23:00.0",
            "--size",
            "1",
            "--fm-partitions",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(!r.stderr.contains("enum"), "{}", r.stderr);
    assert!(r.stderr.contains("fmpm.json"), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("expected isActive as fmpm writes it: 0 or 1 (or true or false)"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("the file should hold {\"partitionInfo\""),
        "{}",
        r.stderr
    );
}

/// The typed JSON readers of files (`--nvlink` maps, `compare`'s bench
/// reports): nesting in a typed field stops at the first wrong type, nesting
/// in an ignored key is skipped by serde_json without recursion (10,000,000
/// deep here), and a 10 MB string is quoted as a short prefix.
#[test]
fn json_files_nested_or_huge_are_refused_in_few_words() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: String| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let n = 10_000_000;
    let files = [
        write(
            "typed.json",
            format!("{{\"links\": {}", "[".repeat(100_000)),
        ),
        write(
            "ignored.json",
            format!("{{\"x\": {}{}}}", "[".repeat(n), "]".repeat(n)),
        ),
        write(
            "huge.json",
            format!("{{\"links\": \"{}\", \"schema\": 1}}", "a".repeat(n)),
        ),
    ];
    let tree = fixture_dir("qemu-11.1-two-socket-iommu-on");
    for f in &files {
        let path = f.to_str().unwrap();
        let name = f.file_name().unwrap().to_str().unwrap();
        for r in [
            run(
                "p2p-host",
                &[
                    "plan",
                    "--sysfs-root",
                    tree.to_str().unwrap(),
                    "--gpu-class",
                    "0108",
                    "--nvlink",
                    path,
                ],
            ),
            run("p2p-guest", &["compare", path, path]),
        ] {
            assert_eq!(r.code, Some(1), "{name}: {}", r.stderr);
            assert!(r.stderr.contains(name), "{}", r.stderr);
            assert!(r.stderr.len() < 1024, "{name}: {} bytes", r.stderr.len());
        }
    }
}

/// A libvirt domain with a 1 MB element name went into the error whole; one
/// cut short was placed at line 1. Now a short prefix, and the line where
/// the text ends.
#[test]
fn domain_errors_quote_short_and_name_the_last_line() {
    let src = std::fs::read_to_string(fixture_dir("domains").join("virt-manager-q35.xml")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tree = fixture_dir("qemu-11.1-two-socket-iommu-on");
    let patch = |name: &str, text: &str| {
        let f = dir.path().join(name);
        std::fs::write(&f, text).unwrap();
        run(
            "p2p-host",
            &[
                "plan",
                "--sysfs-root",
                tree.to_str().unwrap(),
                "--patch-domain",
                f.to_str().unwrap(),
            ],
        )
    };
    let huge = "a".repeat(1 << 20);
    let r = patch(
        "huge.xml",
        &src.replacen("</devices>", &format!("</{huge}>"), 1),
    );
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.stderr.len() < 1024, "{} bytes", r.stderr.len());
    assert!(r.stderr.contains("(1048576 bytes)"), "{}", r.stderr);
    // Cut inside <devices>: the line of the cut, counted by hand from the text.
    let cut = &src[..src.find("</devices>").unwrap()];
    let last = cut.trim_end().lines().count();
    let r = patch("cut.xml", cut);
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr.contains(&format!("not XML: line {last}: ")),
        "{}",
        r.stderr
    );
}
