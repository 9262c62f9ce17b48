//! Live end-to-end proof of the VFIO backend: QEMU 11.1 (TCG) with a virtual
//! Intel IOMMU and QEMU's `edu` device; inside the guest, edu is bound to
//! vfio-pci, `p2p-host serve --gpu socket=...,vfio=<edu>,clique=3` serves it
//! and the vfio-user client `vfio_user_edu` (host/examples) checks,
//! over the socket and the mappings the server hands over:
//! - config: edu's real ids (1234:11e8) with the P2P capability, clique 3;
//! - bar0: edu's identification register and liveness check through the
//!   mmap of the VFIO device fd (the data path never crosses the socket);
//! - dma: edu's DMA engine copies client memory mapped with DMA_MAP into its
//!   buffer and back, through the guest's IOMMU;
//! - msi: an interrupt raised through edu's register fires the client's
//!   eventfd wired with SET_IRQS;
//! - bad requests (a descriptor that is no memory, overlapping, unaligned
//!   and overflowing DMA maps, SET_IRQS with a memfd): refused, the reason
//!   in the server's log, and the server serves on;
//! - disconnects (DMA unmapped, interrupts unwired), one of them by a client
//!   that left with a DMA under way and its window mapped, and the clients
//!   after them.
//!
//! Needs `bash scripts/qemu/setup.sh` once (it FAILS without it, as the other
//! QEMU tests do). One boot, about a minute under TCG on 2 cores.

use std::path::Path;
use std::process::Command;

use p2p_tests::qemu::{guest_bin_dir, require_setup, script};

const INIT: &str = r#"
modprobe vfio-pci || { echo "EDU-FAIL modprobe vfio-pci"; exit 10; }
modprobe vfio_iommu_type1 2>/dev/null
edu=""
for d in /sys/bus/pci/devices/*; do
    if [ "$(cat $d/vendor)" = 0x1234 ] && [ "$(cat $d/device)" = 0x11e8 ]; then edu=${d##*/}; fi
done
[ -n "$edu" ] || { echo "EDU-FAIL no edu device"; exit 11; }
echo "EDU-DEVICE $edu group $(basename "$(readlink /sys/bus/pci/devices/$edu/iommu_group)")"
echo vfio-pci > /sys/bus/pci/devices/$edu/driver_override
[ -e /sys/bus/pci/devices/$edu/driver ] && echo $edu > /sys/bus/pci/devices/$edu/driver/unbind
echo $edu > /sys/bus/pci/drivers_probe
echo "EDU-DRIVER $(basename "$(readlink /sys/bus/pci/devices/$edu/driver)")"
p2p-host serve -v --gpu socket=/tmp/edu.sock,vfio=$edu,clique=3,allow-non-nvidia >/tmp/serve.log 2>&1 &
pid=$!
i=0
while ! grep -q "ready:" /tmp/serve.log && [ $i -lt 150 ]; do sleep 0.2; i=$((i+1)); done
sed 's/^/SERVE| /' /tmp/serve.log
vfio_user_edu /tmp/edu.sock 1; r1=$?
vfio_user_edu /tmp/edu.sock 3
sleep 0.5
vfio_user_edu /tmp/edu.sock 2; r2=$?
vfio_user_edu /tmp/edu.sock bench 2000 | sed 's/^BENCH/BENCH vfio/'
sleep 0.5
kill $pid
wait $pid
echo "EDU-SERVE-LOG"
sed 's/^/SERVE| /' /tmp/serve.log
p2p-host serve --gpu socket=/tmp/cap.sock,config=/vp2p/gpu/config,resource=/vp2p/gpu/resource,clique=0,max-bar=16M >/tmp/cap.log 2>&1 &
pid=$!
i=0
while ! grep -q "ready:" /tmp/cap.log && [ $i -lt 150 ]; do sleep 0.2; i=$((i+1)); done
vfio_user_edu /tmp/cap.sock bench 2000 | sed 's/^BENCH/BENCH captured/'
kill $pid
wait $pid
echo "EDU-ROUNDS $r1 $r2"
[ "$r1" = 0 ] && [ "$r2" = 0 ]
"#;

fn run(cmd: &mut Command) -> (Option<i32>, String, String) {
    let out = cmd.output().expect("runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn edu_behind_serve_vfio_does_dma_and_interrupts_for_a_vfio_user_client() {
    require_setup();
    let host = guest_bin_dir().join("p2p-host");
    // Built by the suite's `cargo test` with the other examples.
    let client = guest_bin_dir().join("examples/vfio_user_edu");
    let tmp = tempfile::tempdir().unwrap();
    let init = tmp.path().join("init.sh");
    std::fs::write(&init, INIT).unwrap();
    // A captured H200 for the captured-backend figures, served beside edu.
    let gpu = "sysfs/devices/pci0000:00/0000:00:06.0";
    let (code, _, err) = run(Command::new("tar")
        .arg("xzf")
        .arg(p2p_tests::fixture_dir("h200x2-passthrough-guest").join("sysfs.tgz"))
        .arg("-C")
        .arg(tmp.path())
        .arg(gpu));
    assert_eq!(code, Some(0), "tar: {err}");
    // mkinitramfs splits --add at ':', which the sysfs path has.
    let plain = tmp.path().join("gpu");
    std::fs::create_dir_all(&plain).unwrap();
    for f in ["config", "resource"] {
        std::fs::copy(tmp.path().join(gpu).join(f), plain.join(f)).unwrap();
    }
    let gpu = plain;
    let initrd = tmp.path().join("initrd.cpio.gz");
    let add = |src: &Path, dest: &str| format!("{}:{dest}", src.display());
    let (code, _, err) = run(Command::new("bash")
        .arg(script("mkinitramfs.sh"))
        .arg(&initrd)
        .arg("--init")
        .arg(&init)
        .args(["--add", &add(&host, "/usr/bin/p2p-host")])
        .args(["--add", &add(&client, "/usr/bin/vfio_user_edu")])
        .args(["--add", &add(&gpu.join("config"), "/vp2p/gpu/config")])
        .args(["--add", &add(&gpu.join("resource"), "/vp2p/gpu/resource")])
        .args(["--modules", "vfio-pci,vfio_iommu_type1"]));
    assert_eq!(code, Some(0), "mkinitramfs: {err}");
    let log = tmp.path().join("serial.log");
    let (code, _, err) = run(Command::new("bash")
        .arg(script("boot.sh"))
        .args(["--qemu", "10", "--topology", "two-socket", "--iommu", "on"])
        .arg("--initrd")
        .arg(&initrd)
        .args([
            "--timeout",
            "300",
            "--extra",
            "-device edu,bus=pcie.0,addr=0x9",
        ])
        .arg("--log")
        .arg(&log));
    let serial = String::from_utf8_lossy(&std::fs::read(&log).unwrap_or_default()).into_owned();
    let lines: Vec<&str> = serial
        .lines()
        .filter(|l| l.contains("EDU-") || l.contains("SERVE|") || l.contains("BENCH"))
        .collect();
    let shown = lines.join("\n");
    assert_eq!(
        code,
        Some(0),
        "boot.sh: {err}\n{shown}\n--- tail ---\n{}",
        {
            let t = serial.len().saturating_sub(3000);
            &serial[t..]
        }
    );
    for want in [
        "EDU-DRIVER vfio-pci",
        "VFIO device",
        "EDU-OK config: 1234:11e8, P2P capability at",
        ", clique 3",
        "EDU-OK bar0: id 0x010000ed",
        "EDU-OK dma: edu copied 256 bytes",
        "arrived intact: true",
        "EDU-OK msi: edu raised 0x5a; the eventfd wired with SET_IRQS fired: true",
        "EDU-OK leave-mid-dma: started a 4096-byte DMA",
        "EDU-ROUNDS 0 0",
    ] {
        assert!(shown.contains(want), "no '{want}' in:\n{shown}");
    }
    // Round 2's bad requests: each refused with its reason in the server's
    // log, and the server went on (round 2's DMA and MSI after them).
    for why in [
        "rejected command 2 with EIO (5): DMA map of 0x100000 bytes at IOVA 0x1000000: cannot map the descriptor",
        "rejected command 2 with EIO (5): DMA map of 0x2000 bytes at IOVA 0x1001000: overlaps the window of 0x100000 bytes at 0x1000000",
        "rejected command 2 with EIO (5): DMA map of 0x1000 bytes at IOVA 0x2000001 (file offset 0x0): IOVA, size and offset must be multiples of 0x1000",
        // Overflowing: the session guard refuses it before the backend.
        "rejected command 2 with EINVAL (22): DMA_MAP of 0x2000 bytes at 0xfffffffffffff000",
        "rejected command 2 with EIO (5): DMA map of 0x1000 bytes at IOVA 0xfffffffff0000000: the IOMMU refused it",
        "rejected command 8 with EIO (5): SET_IRQS MSI vectors 0..1 (flags 0x24): VFIO refused it",
        "EDU-OK bad-input: 8 requests answered",
    ] {
        assert!(shown.contains(why), "no '{why}' in:\n{shown}");
    }
    // Round 2 maps the IOVA round 3 left mapped: the server had unmapped it.
    assert_eq!(shown.matches("arrived intact: true").count(), 2, "{shown}");
    assert_eq!(shown.matches("fired: true").count(), 2, "{shown}");
    assert_eq!(
        shown.matches("EDU-OK bar0").count(),
        3,
        "three clients, one after the other:\n{shown}"
    );
    assert!(!shown.contains("EDU-FAIL"), "{shown}");
    // The figures (TCG: for comparing the paths with each other, not with hardware).
    eprintln!("{shown}");
}
