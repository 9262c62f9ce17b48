//! Live end-to-end: boots the Debian kernel under QEMU (TCG) with boot.sh's
//! `two-socket` topology and an IOMMU, once with QEMU 7.2 and once with the
//! 11.1 build. Inside, the workspace's `p2p-host` prints `topo --json --gpu-class
//! 0108` and takes a `snapshot`; both come back over the serial console. The
//! test checks them against the classes written from QEMU's command line, and
//! checks that scanning the snapshot here gives what the guest printed there.
//!
//! Needs `bash scripts/qemu/setup.sh` once; without it these tests FAIL (they
//! never skip). About 10 s per boot on 2 cores, plus the workspace's build the
//! first time.

use std::time::Instant;

use p2p_tests::qemu::{
    assert_no_errors, capture_guest_script, compare_guest_and_host, extract, guest_bin_dir,
    guest_report, mkinitramfs, require_setup, scan_capture, Boot,
};
use p2p_tests::qemu_expect;

fn boot_two_socket(qemu: &str) {
    let t0 = Instant::now();
    let setup = require_setup();
    let bin = guest_bin_dir().join("p2p-host");
    let t_build = t0.elapsed();

    let tmp = tempfile::tempdir().expect("temporary directory");
    let init = tmp.path().join("init.sh");
    capture_guest_script(&init);
    let initrd = tmp.path().join("initrd.cpio.gz");
    mkinitramfs(&initrd, &init, &[(bin.as_path(), "/usr/bin/p2p-host")]);

    let log = tmp.path().join("serial.log");
    let booted = Boot {
        qemu,
        topology: "two-socket",
        iommu: true,
        initrd: &initrd,
        timeout_s: 150,
        log: &log,
    }
    .run_ok();
    let version = setup.qemu_version(qemu);
    assert!(
        booted
            .stderr
            .contains(&format!("qemu-system-x86_64 {version}")),
        "boot.sh did not run QEMU {version}:\n{}",
        booted.stderr
    );

    let cap = tmp.path().join("capture");
    extract(&log, "capture", &cap);
    let guest_txt = std::fs::read_to_string(cap.join("guest.txt")).expect("guest.txt");
    assert!(
        guest_txt.contains(&format!("uname -r: {}", setup.kernel_version())),
        "not the cached kernel:\n{guest_txt}"
    );
    assert!(
        guest_txt.contains("intel_iommu=on"),
        "IOMMU not enabled:\n{guest_txt}"
    );

    let expect = &qemu_expect::TWO_SOCKET;
    let serials = std::fs::read_to_string(cap.join("nvme-serials.txt")).expect("nvme-serials.txt");
    assert_no_errors("NVMe serials vs the table", &expect.check_serials(&serials));

    // What p2p-host printed inside the guest, from the live /sys.
    let guest = guest_report(&cap);
    assert_eq!(guest.sysfs_root, "/sys");
    // Our scan, here, of the snapshot p2p-host took there.
    let (topo, host) = scan_capture(&cap);
    let errs = expect.check(&topo, &guest, true);
    assert!(
        errs.is_empty(),
        "QEMU {version}: the guest's report differs from QEMU's command line:\n  - {}\n\n{}",
        errs.join("\n  - "),
        expect.class_table(&guest)
    );
    assert_no_errors(
        &format!("QEMU {version}: our scan of the snapshot vs QEMU's command line"),
        &expect.check(&topo, &host, true),
    );
    assert_no_errors(
        &format!("QEMU {version}: guest topo.json vs our scan of its snapshot"),
        &compare_guest_and_host(&guest, &host),
    );
    eprintln!(
        "QEMU {version}: binaries {:.1?}, boot {:.1?}, total {:.1?}",
        t_build,
        booted.wall,
        t0.elapsed()
    );
}

#[test]
fn two_socket_iommu_on_qemu_7_2() {
    boot_two_socket("7.2");
}

#[test]
fn two_socket_iommu_on_qemu_11_1() {
    boot_two_socket("10");
}
