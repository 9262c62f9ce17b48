//! Broken and partial sysfs trees: every failure names the path, nothing
//! panics, and a non-root (64-byte) config read is reported, not guessed over.
//! Each case starts from the real H200 passthrough tree and breaks one thing.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use p2p_host::sysfs::{scan, ScanError, SysfsRoot};
use p2p_tests::{run, unpack_fixture};
use p2p_topology::topology::AcsState;

const GPU0: &str = "devices/pci0000:00/0000:00:06.0";

fn sysfs(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("sysfs")
}

fn scan_err(tree: &Path) -> ScanError {
    scan(&SysfsRoot::new(tree).unwrap()).expect_err("scan must fail")
}

/// Runs the CLI on the tree: it must fail, and its message must name `needle`.
fn cli_fails_naming(tree: &Path, needle: &str) {
    let r = run(
        "p2p-host",
        &["topo", "--sysfs-root", tree.to_str().unwrap()],
    );
    assert_eq!(r.code, Some(1), "stdout: {}", r.stdout);
    assert!(
        r.stderr.contains(needle),
        "stderr does not name {needle}: {}",
        r.stderr
    );
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
}

#[test]
fn dangling_device_link() {
    let dir = unpack_fixture("h200x2-passthrough-guest");
    let tree = sysfs(&dir);
    symlink(
        "../../../devices/pci0000:00/0000:00:1f.0",
        tree.join("bus/pci/devices/0000:00:1f.0"),
    )
    .unwrap();
    let e = scan_err(&tree);
    assert!(matches!(e, ScanError::DanglingLink { .. }), "{e}");
    assert!(
        e.to_string().contains("bus/pci/devices/0000:00:1f.0"),
        "{e}"
    );
    cli_fails_naming(&tree, "0000:00:1f.0: dangling link");
}

#[test]
fn config_shorter_than_the_header() {
    let dir = unpack_fixture("h200x2-passthrough-guest");
    let tree = sysfs(&dir);
    let cfg = tree.join(GPU0).join("config");
    let bytes = fs::read(&cfg).unwrap();
    fs::write(&cfg, &bytes[..40]).unwrap();
    let e = scan_err(&tree);
    assert!(
        matches!(e, ScanError::TruncatedConfig { len: 40, .. }),
        "{e}"
    );
    cli_fails_naming(&tree, "0000:00:06.0/config: config space has 40 bytes");
}

#[test]
fn missing_and_garbled_attributes() {
    let dir = unpack_fixture("h200x2-passthrough-guest");
    let tree = sysfs(&dir);
    fs::remove_file(tree.join(GPU0).join("vendor")).unwrap();
    let e = scan_err(&tree);
    assert!(e.to_string().contains("0000:00:06.0/vendor"), "{e}");
    cli_fails_naming(&tree, "0000:00:06.0/vendor");

    let dir = unpack_fixture("h200x2-passthrough-guest");
    let tree = sysfs(&dir);
    fs::write(tree.join(GPU0).join("class"), "0xzz0200\n").unwrap();
    let e = scan_err(&tree);
    let garbled = "'0xzz0200' is not a hex number of at most 32 bits";
    assert_eq!(
        e.to_string(),
        format!("{}: {garbled}", tree.join(GPU0).join("class").display())
    );
    // The guest reads the same attribute in the same words (p2p_topology::hex).
    let root = tree.to_str().unwrap();
    for args in [
        &["probe", "--no-driver", "--sysfs-root", root][..],
        &["nccl-topo", "--sysfs-root", root],
        &["bench", "--sysfs-root", root],
    ] {
        let r = run("p2p-guest", args);
        let want = format!("0000:00:06.0/class: {garbled}");
        assert!(r.stderr.contains(&want), "{args:?}: {}", r.stderr);
        assert_eq!(
            r.stderr.matches(garbled).count(),
            1,
            "said once: {}",
            r.stderr
        );
    }

    // An id wider than its field is refused, not cut to its low bits.
    let dir = unpack_fixture("h200x2-passthrough-guest");
    let tree = sysfs(&dir);
    fs::write(tree.join(GPU0).join("vendor"), "0x110de\n").unwrap();
    let wide = "0000:00:06.0/vendor: '0x110de' is not a hex number of at most 16 bits";
    assert!(scan_err(&tree).to_string().contains(wide));
    cli_fails_naming(&tree, wide);

    // Read only by the guest's NCCL file reader: the same words again.
    let dir = unpack_fixture("h200x2-passthrough-guest");
    let tree = sysfs(&dir);
    fs::write(tree.join(GPU0).join("subsystem_vendor"), "0x\n").unwrap();
    let r = run(
        "p2p-guest",
        &["nccl-topo", "--sysfs-root", tree.to_str().unwrap()],
    );
    let want = "0000:00:06.0/subsystem_vendor: '0x' is not a hex number of at most 16 bits";
    assert!(r.stderr.contains(want), "{}", r.stderr);

    let dir = unpack_fixture("h200x2-passthrough-guest");
    let tree = sysfs(&dir);
    fs::write(tree.join(GPU0).join("numa_node"), "near\n").unwrap();
    assert!(scan_err(&tree)
        .to_string()
        .contains("0000:00:06.0/numa_node: 'near' is not a number"));
}

#[test]
fn link_leading_out_of_the_tree() {
    let dir = unpack_fixture("h200x2-passthrough-guest");
    let tree = sysfs(&dir);
    let outside = dir.path().join("elsewhere/pci0000:00/0000:00:1e.0");
    fs::create_dir_all(&outside).unwrap();
    symlink(&outside, tree.join("bus/pci/devices/0000:00:1e.0")).unwrap();
    let e = scan_err(&tree);
    assert!(matches!(e, ScanError::OutsideTree { .. }), "{e}");
}

#[test]
fn not_a_sysfs_tree() {
    let dir = tempfile::tempdir().unwrap();
    let e = SysfsRoot::new(dir.path()).unwrap_err();
    assert!(e.to_string().contains("not a sysfs tree"), "{e}");
    cli_fails_naming(dir.path(), "not a sysfs tree");
}

#[test]
fn dead_function_reading_all_ones() {
    let dir = unpack_fixture("h200x2-passthrough-guest");
    let tree = sysfs(&dir);
    fs::write(tree.join(GPU0).join("config"), vec![0xffu8; 256]).unwrap();
    assert!(matches!(scan_err(&tree), ScanError::DeadFunction { .. }));
}

#[test]
fn non_root_config_reads_are_reported() {
    // What the kernel gives a non-root reader: the first 64 bytes.
    let dir = unpack_fixture("h200x2-passthrough-guest");
    let tree = sysfs(&dir);
    for entry in fs::read_dir(tree.join("devices/pci0000:00")).unwrap() {
        let cfg = entry.unwrap().path().join("config");
        if let Ok(bytes) = fs::read(&cfg) {
            fs::write(&cfg, &bytes[..64]).unwrap();
        }
    }
    let topo = scan(&SysfsRoot::new(&tree).unwrap()).unwrap();
    let gpu = topo.function("0000:00:06.0".parse().unwrap()).unwrap();
    assert!(
        matches!(&gpu.acs, AcsState::Unknown { why } if why.contains("64 bytes")),
        "{:?}",
        gpu.acs
    );
    assert_eq!(gpu.pcie_port_type, None);
    assert_eq!(topo.notes.len(), 1);
    assert!(
        topo.notes[0].contains("8 function(s) read as 64 bytes"),
        "{}",
        topo.notes[0]
    );
    assert!(topo.notes[0].contains("run as root"));

    let r = run(
        "p2p-host",
        &["topo", "--sysfs-root", tree.to_str().unwrap()],
    );
    assert_eq!(r.code, Some(0));
    assert!(r.stdout.contains("read as 64 bytes"), "{}", r.stdout);
}

#[test]
fn unknown_gpu_address_is_refused() {
    let dir = unpack_fixture("h200x2-passthrough-guest");
    let r = run(
        "p2p-host",
        &[
            "topo",
            "--sysfs-root",
            dir.path().to_str().unwrap(),
            "--gpus",
            "0000:00:06.0,0000:41:00.0",
        ],
    );
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr
            .contains("--gpus: 0000:41:00.0 is not a PCI function"),
        "{}",
        r.stderr
    );
    let r = run("p2p-host", &["topo", "--gpus", "00:06"]);
    assert_eq!(r.code, Some(2), "clap rejects a malformed address");
    assert!(r.stderr.contains("not a PCI address"), "{}", r.stderr);
}

#[test]
fn bad_nvlink_maps_name_the_file() {
    let dir = unpack_fixture("h200x2-passthrough-guest");
    let root = dir.path().to_str().unwrap();
    let cases = [
        (
            r#"{"links": [{"a": "0000:00:06.0", "b": "0000:00:09.0", "count": 18}]}"#,
            "0000:00:09.0 is not one of the GPUs",
        ),
        (
            r#"{"links": [{"a": "0000:00:06.0", "b": "0000:00:06.0", "count": 18}]}"#,
            "cannot link to itself",
        ),
        (
            r#"{"links": [{"a": "0000:00:06.0", "b": "0000:00:07.0", "count": 0}]}"#,
            "count must be at least 1",
        ),
        (
            r#"{"links": [{"a": "0000:00:06.0", "b": "0000:00:07.0"}]}"#,
            "missing field `count`",
        ),
        (
            r#"{"links": [{"a":"0000:00:06.0","b":"0000:00:07.0","count":1},{"a":"0000:00:07.0","b":"0000:00:06.0","count":1}]}"#,
            "given twice",
        ),
        ("not json", "expected ident"),
    ];
    for (i, (text, needle)) in cases.iter().enumerate() {
        let map = dir.path().join(format!("map{i}.json"));
        fs::write(&map, text).unwrap();
        let r = run(
            "p2p-host",
            &[
                "topo",
                "--sysfs-root",
                root,
                "--nvlink",
                map.to_str().unwrap(),
            ],
        );
        assert_eq!(r.code, Some(1), "case {i}");
        assert!(
            r.stderr.contains(&format!("map{i}.json")),
            "case {i}: {}",
            r.stderr
        );
        assert!(r.stderr.contains(needle), "case {i}: {}", r.stderr);
    }
}
