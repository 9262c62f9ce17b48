//! The examples under docs/examples, shown in the README, are what the
//! binaries print today on the two-socket QEMU tree.

use p2p_tests::{fixture_dir, plan_stdout, repo_root, run};

const TWO_SOCKET: &str = "qemu-11.1-two-socket-iommu-on";

/// `p2p-host plan` on the two-socket tree with its NVMe "GPUs".
fn plan_out(args: &[&str]) -> String {
    plan_stdout(
        &fixture_dir(TWO_SOCKET),
        &[&["--gpu-class", "0108"][..], args].concat(),
    )
}

/// docs/examples/plan-two-socket*.txt, shown in the README, are what the binary
/// prints today.
#[test]
fn docs_examples_are_real_output() {
    let examples = repo_root().join("docs/examples");
    for (file, args) in [
        ("plan-two-socket.txt", &[][..]),
        ("plan-two-socket-qemu.txt", &["--emit", "qemu"][..]),
        (
            "plan-two-socket-mirror-qemu.txt",
            &[
                "--guest-topology",
                "mirror",
                "--emit",
                "qemu",
                "--nccl-topo-path",
                "/var/lib/vp2p/{vm}.nccl-topo.xml",
            ][..],
        ),
        (
            "plan-two-socket-mirror-libvirt.xml",
            &[
                "--guest-topology",
                "mirror",
                "--emit",
                "libvirt",
                "--nccl-topo-path",
                "/var/lib/vp2p/{vm}.nccl-topo.xml",
                "--libvirt-first-index",
                "10",
            ][..],
        ),
        (
            "nccl-topo-two-socket-mirror.xml",
            &["--guest-topology", "mirror", "--emit", "nccl-topo"][..],
        ),
        (
            "nccl-topo-two-socket-flat.xml",
            &["--emit", "nccl-topo"][..],
        ),
    ] {
        let path = examples.join(file);
        let saved =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let now = plan_out(args);
        assert!(
            saved == now,
            "{} is stale; regenerate it with\n  p2p-host plan --sysfs-root \
             tests/fixtures/{TWO_SOCKET} --gpu-class 0108 {} > docs/examples/{file}\n\
             --- saved\n{saved}\n--- now\n{now}",
            path.display(),
            args.join(" ")
        );
    }
}

/// docs/examples/topo-two-socket.txt is what `bash scripts/run.sh` prints on a
/// machine without a GPU (the bundled tree, every network function a NIC row).
#[test]
fn topo_example_is_real_output() {
    let path = repo_root().join("docs/examples/topo-two-socket.txt");
    let saved =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let r = run(
        "p2p-host",
        &[
            "topo",
            "--sysfs-root",
            &fixture_dir(TWO_SOCKET).display().to_string(),
            "--gpu-class",
            "0108",
            "--all-nics",
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        saved == r.stdout,
        "{} is stale; regenerate it with\n  p2p-host topo --sysfs-root tests/fixtures/{TWO_SOCKET} \
         --gpu-class 0108 --all-nics > docs/examples/topo-two-socket.txt\n--- saved\n{saved}\n--- now\n{}",
        path.display(),
        r.stdout
    );
}
