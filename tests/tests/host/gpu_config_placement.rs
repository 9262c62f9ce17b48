//! Where the overlay puts the P2P capability on GPU config spaces the project
//! may hold, and what it leaves alone.
//!
//! - Captured: the config spaces vp2p's own `p2p-host snapshot` read in the
//!   passthrough VMs (H200: tests/fixtures/h200x2-passthrough-guest and
//!   h200x4-passthrough-guest; H100 80GB HBM3: h100x1-passthrough-guest), all
//!   4096 bytes. Their capability lists are read independently by pciutils'
//!   `lspci -F` (installed by scripts/setup.sh), and the overlay must agree.
//! - Built from published facts: the older layouts that shaped placement
//!   (Turing's MSI-X structure at 0xC8 outside the list, a vendor capability
//!   ending just below 0xC8, a list whose head is at 0xD0). No published dump
//!   is held here: each config space is made of the few registers the
//!   placement reads, each one cited where it is set, every other byte zero.
//!   `lspci -F` then reads the built bytes back as the published listings show.
//!
//! Capability lengths are the PCI specifications' (PCI Bus Power Management
//! Interface 1.2 §3.2: 8 bytes; PCI Local Bus 3.0 §6.8.1: MSI with a 64-bit
//! address and no per-vector masking 14 bytes; §6.8.2: MSI-X 12 bytes; PCI
//! Express Base 2.0 §7.8: the version-2 PCI Express capability 0x3C bytes; a
//! vendor-specific capability says its own length in its byte 2).

use std::fmt::Write as _;
use std::process::Command;

use p2p_host::overlay::{ConfigOverlay, OverlayOptions, Placement, SlotConflict};
use p2p_tests::unpack_fixture;
use p2p_topology::pci::ConfigSpace;
use p2p_topology::{Clique, P2pCapability};

/// Capability ids (PCI Code and ID Assignment Specification, §2).
const PM: u8 = 0x01;
const MSI: u8 = 0x05;
const VENDOR: u8 = 0x09;
const EXPRESS: u8 = 0x10;
const MSIX: u8 = 0x11;

fn lspci() -> &'static str {
    ["lspci", "/usr/bin/lspci", "/usr/sbin/lspci", "/sbin/lspci"]
        .into_iter()
        .find(|p| Command::new(p).arg("--version").output().is_ok())
        .expect(
            "lspci is not installed: install pciutils (bash scripts/setup.sh, or apt-get install \
             pciutils) to read the config spaces independently of vp2p",
        )
}

/// The standard capability lines (`[c8] Vendor Specific ...`) `lspci -F -vvv`
/// prints for `bytes`, written in `lspci -xxxx`'s text form.
fn lspci_capabilities(bytes: &[u8]) -> Vec<String> {
    let mut dump = String::from("00:06.0 3D controller: NVIDIA Corporation Device\n");
    for (i, row) in bytes.chunks(16).enumerate() {
        let _ = write!(dump, "{:02x}:", i * 16);
        for b in row {
            let _ = write!(dump, " {b:02x}");
        }
        dump.push('\n');
    }
    dump.push('\n');
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lspci-xxxx.txt");
    std::fs::write(&file, dump).unwrap();
    let o = Command::new(lspci())
        .arg("-F")
        .arg(&file)
        .arg("-vvv")
        .output()
        .expect("lspci runs");
    assert!(
        o.status.success(),
        "lspci failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Capabilities: "))
        // Standard capabilities have two hex digits; extended ones three.
        .filter(|l| l.as_bytes().get(3) == Some(&b']'))
        .map(str::to_string)
        .collect()
}

/// (offset, id) of each standard capability as lspci names it.
fn lspci_walk(bytes: &[u8]) -> Vec<(u8, u8)> {
    lspci_capabilities(bytes)
        .iter()
        .map(|l| {
            let offset = u8::from_str_radix(&l[1..3], 16).unwrap();
            let name = &l[5..];
            let id = if name.starts_with("Power Management") {
                PM
            } else if name.starts_with("MSI-X:") {
                MSIX
            } else if name.starts_with("MSI:") {
                MSI
            } else if name.starts_with("Express") {
                EXPRESS
            } else if name.starts_with("Vendor Specific") {
                VENDOR
            } else {
                panic!("a capability this test does not name: {l}")
            };
            (offset, id)
        })
        .collect()
}

/// vp2p's walk: (offset, id, length) of each standard capability.
fn our_walk(bytes: &[u8]) -> Vec<(u8, u8, u16)> {
    ConfigSpace::new(bytes)
        .unwrap()
        .capabilities()
        .unwrap()
        .iter()
        .map(|c| (c.offset, c.id, c.len))
        .collect()
}

/// Overlays clique 5 on `config` and checks what the guest reads: the
/// capability at `offset`, linked last after the capability `after` (id,
/// offset), every other byte the device's.
fn overlay(name: &str, config: &[u8], offset: u8, after: (u8, u8)) -> Placement {
    let clique = Clique::new(5).unwrap();
    let o = ConfigOverlay::new(config, clique, OverlayOptions::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let p = o.placement().clone();
    assert_eq!(p.offset, offset, "{name}: where the capability goes");
    let linked = p.linked_after.expect("linked after the last capability");
    assert_eq!((linked.id, linked.offset), after, "{name}: linked after");
    assert_eq!(p.pointer_offset(), Some(after.1 + 1), "{name}");

    let mut v = vec![0u8; config.len()];
    o.read(0, &mut v).unwrap();
    let before = our_walk(config);
    let now = our_walk(&v);
    assert_eq!(now.len(), before.len() + 1, "{name}: one capability more");
    assert_eq!(
        now[..before.len()]
            .iter()
            .map(|c| (c.0, c.1))
            .collect::<Vec<_>>(),
        before.iter().map(|c| (c.0, c.1)).collect::<Vec<_>>(),
        "{name}: the list kept, in order"
    );
    assert_eq!(
        now.last().map(|c| (c.0, c.1)),
        Some((offset, VENDOR)),
        "{name}"
    );
    let cap = P2pCapability::decode(&v[usize::from(offset)..]).unwrap();
    assert_eq!((cap.clique, cap.next), (clique, 0), "{name}");
    let pointer = usize::from(after.1) + 1;
    for i in 0..config.len() {
        let ours = (usize::from(offset)..usize::from(offset) + 8).contains(&i) || i == pointer;
        if !ours {
            assert_eq!(v[i], config[i], "{name}: byte {i:#x} changed");
        }
    }
    // pciutils reads the guest's bytes as a list ending in an 8-byte vendor capability there.
    let caps = lspci_capabilities(&v);
    assert!(
        caps.last().is_some_and(|l| l.starts_with(&format!(
            "[{offset:02x}] Vendor Specific Information: Len=08"
        ))),
        "{name}: {caps:#?}"
    );
    p
}

/// The GPU config files of vp2p's own captures.
const CAPTURED: [(&str, &str, u16); 6] = [
    ("h200x2-passthrough-guest", "0000:00:06.0", 0x2335),
    ("h200x4-passthrough-guest", "0000:00:06.0", 0x2335),
    ("h200x4-passthrough-guest", "0000:00:07.0", 0x2335),
    ("h200x4-passthrough-guest", "0000:00:08.0", 0x2335),
    ("h200x4-passthrough-guest", "0000:00:09.0", 0x2335),
    ("h100x1-passthrough-guest", "0000:00:06.0", 0x2330),
];

#[test]
fn captured_hopper_gpus_get_the_capability_at_c8() {
    for (fixture, bdf, device) in CAPTURED {
        let tree = unpack_fixture(fixture);
        let path = tree
            .path()
            .join(format!("sysfs/devices/pci0000:00/{bdf}/config"));
        let config = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let name = format!("{fixture} {bdf}");
        // The whole config space, extended capabilities included (read as root).
        assert_eq!(config.len(), 4096, "{name}");
        assert!(
            config[0x100..].iter().any(|&b| b != 0),
            "{name}: no extended space"
        );
        assert_eq!(
            [config[0], config[1], config[2], config[3]],
            [0xde, 0x10, device as u8, (device >> 8) as u8],
            "{name}: NVIDIA {device:04x}"
        );
        // pciutils and vp2p walk the same list: PM, MSI, PCI Express, MSI-X.
        let walk = our_walk(&config);
        let ids: Vec<(u8, u8)> = walk.iter().map(|c| (c.0, c.1)).collect();
        assert_eq!(ids, lspci_walk(&config), "{name}: vp2p's walk vs lspci's");
        assert_eq!(
            ids,
            [(0x40, PM), (0x48, MSI), (0x60, EXPRESS), (0xb0, MSIX)],
            "{name}"
        );
        // MSI-X ends at 0xbb, so 0xC8..0xCF overlap nothing and are zero.
        assert!(config[0xc8..0xd0].iter().all(|&b| b == 0), "{name}");
        let p = overlay(&name, &config, 0xc8, (MSIX, 0xb0));
        assert!(p.rejected.is_empty(), "{name}: {:?}", p.rejected);
    }
}

/// The H200 config file beside the passthrough fixture (the docs' `inject`
/// example reads it) is the capture's own, byte for byte.
#[test]
fn the_extracted_h200_config_is_the_captured_one() {
    let tree = unpack_fixture("h200x2-passthrough-guest");
    let captured = std::fs::read(
        tree.path()
            .join("sysfs/devices/pci0000:00/0000:00:06.0/config"),
    )
    .unwrap();
    let extracted = std::fs::read(
        p2p_tests::fixture_dir("h200x2-passthrough-guest").join("gpu-00-06.0.config"),
    )
    .unwrap();
    assert!(
        captured == extracted,
        "gpu-00-06.0.config differs from sysfs.tgz's"
    );
}

/// A config space holding only the registers a layout's published facts give.
struct Built(Vec<u8>);

impl Built {
    /// A type-0 header of `len` bytes: vendor and device id (offsets 0x00,
    /// 0x02), class code (0x09..0x0b: programming interface, sub-class, base
    /// class) and header type (0x0e), per the PCI Local Bus Specification 3.0
    /// §6.2.1; everything else zero.
    fn header(len: usize, vendor: u16, device: u16, class: u32, header_type: u8) -> Self {
        let mut b = vec![0u8; len];
        b[0..2].copy_from_slice(&vendor.to_le_bytes());
        b[2..4].copy_from_slice(&device.to_le_bytes());
        b[0x09..0x0c].copy_from_slice(&class.to_le_bytes()[..3]);
        b[0x0e] = header_type;
        Built(b)
    }

    /// Status bit 4 (Capabilities List, offset 0x06) set and the capabilities
    /// pointer (0x34) at `head` (PCI Local Bus 3.0 §6.2.3, §6.7).
    fn list_at(mut self, head: u8) -> Self {
        self.0[0x06] |= 0x10;
        self.0[0x34] = head;
        self
    }

    /// `bytes` at `offset`.
    fn put(mut self, offset: u8, bytes: &[u8]) -> Self {
        let at = usize::from(offset);
        self.0[at..at + bytes.len()].copy_from_slice(bytes);
        self
    }
}

/// TU102, GeForce RTX 2080 Ti (10de:1e07), on bare metal: the `lspci -d
/// "10de:*" -v -xxx` section (lines 1763-2257) of the nvidia-bug-report.log
/// at https://github.com/duaneya/tool_man/blob/e096861c22dd92f718d18f370503164e459bf0c9/nvidia-bug-report.log
/// (report of 2019-11-16), device 02:00.0. Its listing names three standard
/// capabilities: "[60] Power Management version 3", "[68] MSI: Enable+
/// Count=1/1 Maskable- 64bit+", "[78] Express Legacy Endpoint, MSI 00". Its hex
/// rows give the registers set here: row 00 `de 10 07 1e`, status `10 00`,
/// class `00 00 03`, header type `80`; row 30 pointer `60`; row 60 `01 68 c3
/// 49` (PM, next 0x68, PMC 0x49c3) and `05 78 81 00` (MSI, next 0x78, control
/// 0x0081: 64-bit, enabled); row 70 `10 00 12 00` at 0x78 (PCI Express, next
/// 0: the list ends; capabilities register 0x0012, version 2, legacy
/// endpoint); row c0 `11 00 05 00 00 00 b9 00` at 0xC8 and row d0 `00 00 ba
/// 00`: an MSI-X structure (id 0x11, table size 6, table at BAR0 + 0xb90000,
/// PBA at BAR0 + 0xba0000) that no next pointer reaches; 0xD4..0xDB are zero.
fn turing_tu102() -> Vec<u8> {
    Built::header(256, 0x10de, 0x1e07, 0x03_00_00, 0x80)
        .list_at(0x60)
        .put(0x60, &[0x01, 0x68, 0xc3, 0x49])
        .put(0x68, &[0x05, 0x78, 0x81, 0x00])
        .put(0x78, &[0x10, 0x00, 0x12, 0x00])
        .put(0xc8, &[0x11, 0x00, 0x05, 0x00, 0x00, 0x00, 0xb9, 0x00])
        .put(0xd0, &[0x00, 0x00, 0xba, 0x00])
        .0
}

/// GT218, GeForce 210 (10de:0a65), on bare metal: pciutils' test data
/// tests/tree-asus-p6t6 at
/// https://github.com/pciutils/pciutils/blob/6fdd40345b9caa7ae80227fd1a6786d2ec441af0/tests/tree-asus-p6t6
/// (device 06:00.0, lines 4141-4157). Row 00 `de 10 65 0a`, status `10 00`,
/// class `00 00 03`, header type `80`; row 30 pointer `60`; row 60 `01 68 03
/// 00` (PM, next 0x68, PMC 0x0003) and `05 78 81 00` (MSI, next 0x78, 64-bit);
/// row 70 `10 b4 02 00` at 0x78 (PCI Express, next 0xb4, version 2 endpoint);
/// row b0 `09 00 14 01` at 0xB4: a vendor-specific capability of 0x14 bytes,
/// 0xB4..0xC7, last in the list, ending one byte below 0xC8; rows c0 to f0 zero.
/// The same vendor capability at 0xB4 with Len=14 is in the listings of later
/// GPUs, e.g. the RTX 6000 Ada in
/// https://github.com/luigifcruz/stelline/blob/5abfb58163aa40435812fa5e5a06c6eff46a8917/docs/quickstart/validated-hardware/server/asus-esc8000a-e12.md
/// (lines 173-259: "Capabilities: [b4] Vendor Specific Information: Len=14").
fn vendor_cap_below_c8_gt218() -> Vec<u8> {
    Built::header(256, 0x10de, 0x0a65, 0x03_00_00, 0x80)
        .list_at(0x60)
        .put(0x60, &[0x01, 0x68, 0x03, 0x00])
        .put(0x68, &[0x05, 0x78, 0x81, 0x00])
        .put(0x78, &[0x10, 0xb4, 0x02, 0x00])
        .put(0xb4, &[0x09, 0x00, 0x14, 0x01])
        .0
}

/// GV100GL, Tesla V100 PCIe 32GB, as an NVIDIA vGPU (mdev) inside a Cloud
/// Hypervisor guest: `lspci -s 00:04.0 -vvv` in
/// https://github.com/cloud-hypervisor/cloud-hypervisor/issues/5319 (comment
/// of 2023-04-03). No hex was published; the listing says "VGA compatible
/// controller" (class 0x030000), "Status: Cap+", "Capabilities: [d0] Vendor
/// Specific Information: Len=1b" then "Capabilities: [68] MSI: Enable-
/// Count=1/1 Maskable- 64bit+" and nothing more: the list starts at 0xD0 with
/// a vendor capability covering 0xD0..0xEA (so 0xD4 is inside it), its next
/// pointer is 0x68, and MSI (control 0x0080: 64-bit, one message, not enabled)
/// ends it. Device id 0x1db6 is that name's in the PCI ID Repository
/// (https://pci-ids.ucw.cz/read/PC/10de/1db6).
fn list_at_d0_v100_vgpu() -> Vec<u8> {
    Built::header(256, 0x10de, 0x1db6, 0x03_00_00, 0x00)
        .list_at(0xd0)
        .put(0xd0, &[0x09, 0x68, 0x1b])
        .put(0x68, &[0x05, 0x00, 0x80, 0x00])
        .0
}

#[test]
fn turing_keeps_msix_at_c8_so_the_capability_goes_to_d4() {
    let config = turing_tu102();
    // The bytes read as the published listing: PM, MSI, Express; no MSI-X,
    // since nothing links 0xC8.
    let caps = lspci_capabilities(&config);
    assert!(
        caps[0].starts_with("[60] Power Management version 3"),
        "{caps:#?}"
    );
    assert!(
        caps[1].starts_with("[68] MSI: Enable+ Count=1/1 Maskable- 64bit+"),
        "{caps:#?}"
    );
    assert!(
        caps[2].starts_with("[78] Express (v2) Legacy Endpoint, MSI 00"),
        "{caps:#?}"
    );
    assert_eq!(caps.len(), 3, "{caps:#?}");
    assert_eq!(
        our_walk(&config),
        [(0x60, PM, 8), (0x68, MSI, 14), (0x78, EXPRESS, 0x3c)]
    );
    let p = overlay("TU102", &config, 0xd4, (EXPRESS, 0x78));
    // Why: 0xC8 is outside every listed capability but not zero.
    assert_eq!(p.rejected.len(), 1, "{:?}", p.rejected);
    assert_eq!(p.rejected[0].offset, 0xc8);
    let SlotConflict::NonZero { bytes } = p.rejected[0].conflict else {
        panic!("{}", p.rejected[0]);
    };
    assert_eq!(bytes, [0x11, 0x00, 0x05, 0x00, 0x00, 0x00, 0xb9, 0x00]);
}

#[test]
fn a_vendor_capability_ending_at_c7_leaves_c8_free() {
    let config = vendor_cap_below_c8_gt218();
    assert_eq!(
        lspci_walk(&config),
        [(0x60, PM), (0x68, MSI), (0x78, EXPRESS), (0xb4, VENDOR)]
    );
    assert!(lspci_capabilities(&config)[3].starts_with("[b4] Vendor Specific Information: Len=14"));
    assert_eq!(
        our_walk(&config),
        [
            (0x60, PM, 8),
            (0x68, MSI, 14),
            (0x78, EXPRESS, 0x3c),
            (0xb4, VENDOR, 0x14)
        ]
    );
    // 0xB4 + 0x14 = 0xC8: adjacent, not overlapping.
    let p = overlay("GT218", &config, 0xc8, (VENDOR, 0xb4));
    assert!(p.rejected.is_empty(), "{:?}", p.rejected);
}

#[test]
fn a_list_starting_at_d0_gets_the_capability_at_c8_linked_after_its_last() {
    let config = list_at_d0_v100_vgpu();
    let caps = lspci_capabilities(&config);
    assert!(
        caps[0].starts_with("[d0] Vendor Specific Information: Len=1b"),
        "{caps:#?}"
    );
    assert!(
        caps[1].starts_with("[68] MSI: Enable- Count=1/1 Maskable- 64bit+"),
        "{caps:#?}"
    );
    assert_eq!(caps.len(), 2, "{caps:#?}");
    assert_eq!(our_walk(&config), [(0xd0, VENDOR, 0x1b), (0x68, MSI, 14)]);
    // Last in the list is MSI at 0x68, not the highest offset.
    overlay("V100 vGPU", &config, 0xc8, (MSI, 0x68));

    // Were 0xC8 taken too (Turing's MSI-X bytes there), 0xD4 is inside the
    // vendor capability: no slot, and the error names both.
    let both = Built(config)
        .put(0xc8, &[0x11, 0x00, 0x05, 0x00, 0x00, 0x00, 0xb9, 0x00])
        .0;
    let e = ConfigOverlay::new(&both, Clique::new(5).unwrap(), OverlayOptions::default())
        .expect_err("both slots taken")
        .to_string();
    assert!(e.contains("0xc8") && e.contains("0xd4"), "{e}");
}
