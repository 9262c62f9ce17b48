//! `p2p-host inject` on the real H200 config space of the passthrough fixture:
//! the output is the input with exactly the capability and its link changed,
//! and `lspci` (pciutils) decodes it as a vendor-specific capability at 0xc8.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use p2p_tests::{run, unpack_fixture};

const H200: &str = "sysfs/devices/pci0000:00/0000:00:06.0/config";

/// DESIGN.md: DW0 = 0x50080009 | next << 8, DW1 = (clique << 19) | 0x5032.
fn capability_bytes(clique: u32) -> Vec<u8> {
    let mut b = 0x5008_0009u32.to_le_bytes().to_vec();
    b.extend((clique << 19 | 0x5032).to_le_bytes());
    b
}

fn inject(input: &Path, out: &Path, clique: &str, extra: &[&str]) -> p2p_tests::Run {
    let mut args = vec![
        "inject",
        "--config",
        input.to_str().unwrap(),
        "--clique",
        clique,
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    run("p2p-host", &args)
}

#[test]
fn inject_writes_the_capability_at_c8_and_links_it_from_b1() {
    let tree = unpack_fixture("h200x2-passthrough-guest");
    let input = tree.path().join(H200);
    let out = tree.path().join("virtual-config");
    let r = inject(&input, &out, "6", &[]);
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    assert!(
        r.stdout.contains("0xc8, clique 6, injected"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("next pointer at 0xb1 0x00 -> 0xc8"),
        "{}",
        r.stdout
    );

    let phys = std::fs::read(&input).unwrap();
    let virt = std::fs::read(&out).unwrap();
    assert_eq!(virt.len(), phys.len(), "same length as the input");
    assert_eq!(virt[0xc8..0xd0], capability_bytes(6)[..]);
    assert_eq!(
        (phys[0xb1], virt[0xb1]),
        (0x00, 0xc8),
        "MSI-X next pointer patched"
    );
    for (i, (a, b)) in phys.iter().zip(&virt).enumerate() {
        if i != 0xb1 && !(0xc8..0xd0).contains(&i) {
            assert_eq!(a, b, "byte {i:#x} changed");
        }
    }

    // The JSON form carries the same placement.
    let r = inject(&input, &out, "6", &["--json"]);
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    let j: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(j["schema"], "vp2p.inject/1");
    assert_eq!(j["length"], 4096);
    assert_eq!(j["placement"]["action"], "injected");
    assert_eq!(j["placement"]["offset"], "0xc8");
    assert_eq!(j["placement"]["clique"], 6);
    assert_eq!(j["placement"]["linked_after"]["offset"], "0xb0");
    assert_eq!(j["pointer_offset"], "0xb1");
    assert_eq!(j["cap_pointer_changed"], false);
    assert_eq!(j["status_changed"], false);
    assert_eq!(j["patches"].as_array().unwrap().len(), 3);
}

#[test]
fn inject_errors_name_the_file_and_the_offset() {
    let tree = unpack_fixture("h200x2-passthrough-guest");
    let input = tree.path().join(H200);
    let out = tree.path().join("virtual-config");
    assert_eq!(inject(&input, &out, "2", &[]).code, Some(0));
    // Injecting into the output again with another clique is refused at 0xc8.
    let again = tree.path().join("again");
    let r = inject(&out, &again, "3", &[]);
    assert_ne!(r.code, Some(0));
    assert!(r.stderr.contains(out.to_str().unwrap()), "{}", r.stderr);
    assert!(
        r.stderr.contains("0xc8") && r.stderr.contains("clique 2"),
        "{}",
        r.stderr
    );
    // The same clique is kept as it is.
    let r = inject(&out, &again, "2", &[]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stdout.contains("already present"), "{}", r.stdout);
    assert_eq!(std::fs::read(&again).unwrap(), std::fs::read(&out).unwrap());
    // A config read by a non-root user stops at 64 bytes.
    let short = tree.path().join("short");
    std::fs::write(&short, &std::fs::read(&input).unwrap()[..64]).unwrap();
    let r = inject(&short, &again, "0", &[]);
    assert_ne!(r.code, Some(0));
    assert!(
        r.stderr.contains(short.to_str().unwrap()) && r.stderr.contains("0x100"),
        "{}",
        r.stderr
    );
}

/// `bytes` in the text form of `lspci -xxxx`, which `lspci -F` reads back.
fn lspci_dump(slot: &str, bytes: &[u8]) -> String {
    let mut s = format!("{slot} 3D controller: NVIDIA Corporation Device 2335 (rev a1)\n");
    for (i, row) in bytes.chunks(16).enumerate() {
        let _ = write!(s, "{:02x}:", i * 16);
        for b in row {
            let _ = write!(s, " {b:02x}");
        }
        s.push('\n');
    }
    s.push('\n');
    s
}

#[test]
fn lspci_shows_the_injected_capability() {
    let lspci = ["lspci", "/usr/bin/lspci", "/usr/sbin/lspci", "/sbin/lspci"]
        .into_iter()
        .find(|p| Command::new(p).arg("--version").output().is_ok())
        .expect(
            "lspci is not installed: install pciutils (Debian/Ubuntu: apt-get install pciutils) \
             to check the injected capability the way an operator would",
        );
    let tree = unpack_fixture("h200x2-passthrough-guest");
    let input = tree.path().join(H200);
    let out = tree.path().join("virtual-config");
    let r = inject(&input, &out, "1", &[]);
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    let dump = tree.path().join("lspci-xxxx.txt");
    std::fs::write(&dump, lspci_dump("00:06.0", &std::fs::read(&out).unwrap())).unwrap();
    let o = Command::new(lspci)
        .arg("-F")
        .arg(&dump)
        .arg("-vvv")
        .output()
        .expect("lspci runs");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "lspci failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let caps: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("Capabilities: ["))
        .collect();
    assert!(
        caps.iter()
            .any(|l| l.starts_with("Capabilities: [c8] Vendor Specific Information: Len=08")),
        "lspci does not show the capability at [c8]:\n{text}"
    );
    // The rest of the list is intact, in order, with the capability last.
    let standard: Vec<&str> = caps
        .iter()
        .map(|l| &l["Capabilities: [".len()..l.find(']').unwrap()])
        .filter(|o| o.len() == 2)
        .collect();
    assert_eq!(standard, ["40", "48", "60", "b0", "c8"], "{text}");
    // The unmodified config has no standard vendor-specific capability (its
    // extended list has a VSEC at 0x2a4, which lspci names alike).
    std::fs::write(
        &dump,
        lspci_dump("00:06.0", &std::fs::read(&input).unwrap()),
    )
    .unwrap();
    let o = Command::new(lspci)
        .arg("-F")
        .arg(&dump)
        .arg("-vvv")
        .output()
        .unwrap();
    let before = String::from_utf8_lossy(&o.stdout);
    assert!(!before.contains("[c8]"), "{before}");
    assert!(before.contains("Capabilities: [b0] MSI-X"), "{before}");
}
