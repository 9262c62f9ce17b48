//! The overlay on crafted config spaces: every placement rule and every refusal.

use p2p_topology::pci::{ConfigSpace, WalkError};
use p2p_topology::P2pCapability;

use super::super::{ConfigOverlay, OverlayError, OverlayOptions, PlacementAction};
use super::{clique, patched, read_all, space};

const PM: (u8, &[u8]) = (0x01, &[0x03, 0x00]);
const MSIX: (u8, &[u8]) = (0x11, &[0x08, 0x80]);

fn place(config: &[u8]) -> Result<ConfigOverlay, OverlayError> {
    ConfigOverlay::new(config, clique(2), OverlayOptions::default())
}

/// As the operator's `--any-offset` asks: past 0xD4 when both are taken.
fn place_anywhere(config: &[u8]) -> Result<ConfigOverlay, OverlayError> {
    let any = OverlayOptions {
        any_offset: true,
        ..Default::default()
    };
    ConfigOverlay::new(config, clique(2), any)
}

fn rejected(o: &ConfigOverlay) -> Vec<u8> {
    o.placement().rejected.iter().map(|r| r.offset).collect()
}

#[test]
fn c8_taken_goes_to_d4() {
    let config = space(&[(0x40, PM.0, PM.1), (0xc8, PM.0, PM.1)]);
    let o = place(&config).unwrap();
    assert_eq!(o.placement().offset, 0xd4);
    assert_eq!(rejected(&o), vec![0xc8]);
    assert_eq!(o.placement().rejected[0].overlaps().unwrap().offset, 0xc8);
    // Linked after the last in list order (0xc8), not the highest offset.
    assert_eq!(o.placement().pointer_offset(), Some(0xc9));
}

#[test]
fn c8_and_d4_taken_is_refused_unless_any_offset() {
    // PM 0x40..0x48, MSI-X 0x48..0x54, PM at 0xc8 and 0xd4: 0x54 is the first free.
    let config = space(&[
        (0x40, PM.0, PM.1),
        (0x48, MSIX.0, MSIX.1),
        (0xc8, PM.0, PM.1),
        (0xd4, PM.0, PM.1),
    ]);
    let err = place(&config).unwrap_err();
    let OverlayError::PreferredSlotsTaken { rejected: tried } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(
        tried.iter().map(|r| r.offset).collect::<Vec<_>>(),
        [0xc8, 0xd4]
    );
    assert!(err.to_string().contains("--any-offset"), "{err}");
    let o = place_anywhere(&config).unwrap();
    assert_eq!(o.placement().offset, 0x54);
    assert_eq!(rejected(&o), vec![0xc8, 0xd4, 0x40, 0x44, 0x48, 0x4c, 0x50]);
    let v = read_all(&o, 256);
    let caps = ConfigSpace::new(&v).unwrap().capabilities().unwrap();
    let order: Vec<u8> = caps.iter().map(|c| c.offset).collect();
    assert_eq!(
        order,
        vec![0x40, 0x48, 0xc8, 0xd4, 0x54],
        "last in list order"
    );
}

#[test]
fn a_capability_at_c4_of_length_12_overlaps_c8() {
    // MSI-X at 0xc4 covers 0xc4..0xd0: its start is below 0xc8, its bytes are not.
    let config = space(&[(0x40, PM.0, PM.1), (0xc4, MSIX.0, MSIX.1)]);
    let o = place(&config).unwrap();
    assert_eq!(o.placement().offset, 0xd4);
    let r = &o.placement().rejected[0];
    let c = r.overlaps().unwrap();
    assert_eq!((r.offset, c.offset, c.len), (0xc8, 0xc4, 12));
    assert!(r.to_string().contains("0xc4..0xd0"), "{r}");
    // The same with a vendor-specific capability stating length 12.
    let config = space(&[(0x40, PM.0, PM.1), (0xc4, 0x09, &[12])]);
    assert_eq!(place(&config).unwrap().placement().offset, 0xd4);
}

#[test]
fn unknown_layouts_are_conservative() {
    // An unknown capability last by offset runs to 0x100: 0xc8 and 0xd4 are
    // taken, so are 0x80.. up to it; the first free slot is below it.
    let config = space(&[(0x40, PM.0, PM.1), (0x80, 0x33, &[])]);
    assert!(matches!(
        place(&config),
        Err(OverlayError::PreferredSlotsTaken { .. })
    ));
    let o = place_anywhere(&config).unwrap();
    assert_eq!(o.placement().offset, 0x48);
    let r = o.placement().rejected[0].overlaps().unwrap();
    assert_eq!((r.offset, r.end()), (0x80, 0x100));
}

#[test]
fn no_list_gets_pointer_and_status_bit() {
    let config = space(&[]);
    let o = place(&config).unwrap();
    let p = o.placement();
    assert_eq!(p.offset, 0xc8);
    assert_eq!(p.pointer_offset(), Some(0x34));
    assert!(p.cap_pointer_changed() && p.status_changed());
    let v = read_all(&o, 256);
    assert_eq!((v[0x34], v[0x06]), (0xc8, 0x10));
    let caps = ConfigSpace::new(&v).unwrap().capabilities().unwrap();
    assert_eq!(caps.len(), 1);
    assert!(P2pCapability::decode(&v[0xc8..]).is_ok());
    // Status is partly owned: the guest's write reaches the device without bit 4,
    // and bit 4 still reads set.
    let mut o = o;
    o.write(0x04, &[0x07, 0x00, 0xff, 0xff]).unwrap();
    assert_eq!(o.physical()[0x04..0x08], [0x07, 0x00, 0xef, 0xff]);
    let mut st = [0u8; 2];
    o.read(0x06, &mut st).unwrap();
    assert_eq!(st, [0xff, 0xff]);
    o.write(0x06, &[0x00]).unwrap();
    o.read(0x06, &mut st).unwrap();
    assert_eq!(st, [0x10, 0xff]);
}

#[test]
fn list_bit_set_but_empty_pointer_patches_only_the_pointer() {
    let mut config = space(&[]);
    config[0x06] = 0x10;
    config[0x34] = 0x01; // reserved bits only: an empty list
    let p = place(&config).unwrap().placement().clone();
    assert_eq!(p.cap_pointer.map(|b| (b.old, b.new)), Some((0x01, 0xc8)));
    assert!(!p.status_changed());
}

#[test]
fn no_free_slot_is_an_error_naming_the_slots() {
    // An unknown capability at 0x40, last: its length runs to 0x100.
    let config = space(&[(0x40, 0x33, &[])]);
    let err = place_anywhere(&config).unwrap_err();
    let OverlayError::NoFreeSlot { rejected } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(rejected.len(), (0x100 - 0x40) / 4 - 1);
    let msg = err.to_string();
    assert!(
        msg.contains("0xc8..0xd0 overlaps capability 0x33 at 0x40..0x100"),
        "{msg}"
    );
    assert!(msg.contains("0xd4"), "{msg}");
}

#[test]
fn existing_capability_same_clique_is_kept_other_is_refused() {
    let cap = P2pCapability::new(clique(2), 0).encode();
    let config = space(&[(0x40, PM.0, PM.1), (0xa0, 0x09, &cap[2..])]);
    let o = place(&config).unwrap();
    assert_eq!(o.placement().action, PlacementAction::AlreadyPresent);
    assert_eq!(o.placement().offset, 0xa0);
    assert_eq!(o.placement().capability, cap);
    assert!(o.patches().is_empty());
    assert_eq!(read_all(&o, 256), config);

    let err = ConfigOverlay::new(&config, clique(3), OverlayOptions::default()).unwrap_err();
    assert!(matches!(
        err,
        OverlayError::ExistingOtherClique { offset: 0xa0, .. }
    ));
    assert!(err.to_string().contains("0xa0") && err.to_string().contains("clique 2"));

    let mut bad = cap;
    bad[6] |= 1; // version 1
    let config = space(&[(0x40, 0x09, &bad[2..])]);
    let err = place(&config).unwrap_err();
    assert!(matches!(
        err,
        OverlayError::ExistingMalformed { offset: 0x40, .. }
    ));
    // Other vendor-specific capabilities are not ours.
    let config = space(&[(0x40, 0x09, &[0x08, b'N', b'V', b'0', 0, 0])]);
    assert_eq!(place(&config).unwrap().placement().offset, 0xc8);
}

#[test]
fn non_nvidia_refused_unless_allowed() {
    let mut intel = space(&[(0x40, PM.0, PM.1)]);
    intel[0..2].copy_from_slice(&0x8086_u16.to_le_bytes());
    let mut audio = space(&[(0x40, PM.0, PM.1)]);
    audio[0x0b] = 0x04; // the GPU's HDMI audio function
    for config in [&intel, &audio] {
        let err = place(config).unwrap_err();
        assert!(matches!(err, OverlayError::NotNvidiaGpu { .. }), "{err:?}");
        assert!(err.to_string().contains("0x0b"), "{err}");
        let allow = OverlayOptions {
            allow_non_nvidia: true,
            ..Default::default()
        };
        assert_eq!(
            ConfigOverlay::new(config, clique(2), allow)
                .unwrap()
                .placement()
                .offset,
            0xc8
        );
    }
}

#[test]
fn refuses_short_malformed_and_cardbus_configs() {
    let config = space(&[(0x40, PM.0, PM.1)]);
    for len in [64, 255] {
        assert!(matches!(
            place(&config[..len]).unwrap_err(),
            OverlayError::Truncated { len: l } if l == len
        ));
    }
    let mut looped = space(&[(0x40, PM.0, PM.1), (0x50, MSIX.0, MSIX.1)]);
    looped[0x51] = 0x40;
    let err = place(&looped).unwrap_err();
    assert!(matches!(
        err,
        OverlayError::MalformedList(WalkError::Loop {
            at: 0x51,
            ptr: 0x40
        })
    ));
    assert!(err.to_string().contains("0x51"), "{err}");
    let mut cardbus = config.clone();
    cardbus[0x0e] = 0x02;
    assert!(matches!(
        place(&cardbus).unwrap_err(),
        OverlayError::UnsupportedHeaderType { header_type: 2 }
    ));
    let mut none = config;
    none[0..2].copy_from_slice(&[0xff, 0xff]);
    assert!(matches!(place(&none).unwrap_err(), OverlayError::Config(_)));
}

#[test]
fn straddling_accesses_split_around_owned_bytes() {
    let config = space(&[(0x40, PM.0, PM.1), (0xb0, MSIX.0, MSIX.1)]);
    let mut o = place(&config).unwrap();
    let data: Vec<u8> = (1..=0x20).collect();
    o.write(0xc0, &data).unwrap();
    let phys = o.physical().clone();
    assert_eq!(phys[0xc0..0xc8], data[..8]);
    assert_eq!(phys[0xc8..0xd0], [0; 8]);
    assert_eq!(phys[0xd0..0xe0], data[0x10..]);
    let v = read_all(&o, 256);
    assert_eq!(v, patched(&o, &phys));
    // Past the end of the captured config: an error, nothing written.
    assert!(o.read(0xfe, &mut [0u8; 4]).is_err());
    assert!(o.write(0xfe, &[0u8; 4]).is_err());
    assert!(o.read(u64::MAX, &mut [0u8; 2]).is_err());
}

#[test]
fn from_physical_reads_the_device_and_lends_it() {
    let mut device = space(&[(0x40, PM.0, PM.1)]);
    let mut o =
        ConfigOverlay::from_physical(&mut device, clique(15), OverlayOptions::default()).unwrap();
    assert_eq!(o.placement().offset, 0xc8);
    o.write(0xcc, &[0; 4]).unwrap();
    o.write(0x10, &[0xff; 4]).unwrap();
    let mut dw = [0u8; 4];
    o.read(0xcc, &mut dw).unwrap();
    assert_eq!(u32::from_le_bytes(dw), 15 << 19 | 0x5032);
    drop(o);
    assert_eq!(device[0x10..0x14], [0xff; 4]);
    assert_eq!(device[0xcc..0xd0], [0; 4]);
    let short = vec![0u8; 64];
    let err =
        ConfigOverlay::from_physical(short, clique(0), OverlayOptions::default()).unwrap_err();
    assert!(matches!(err, OverlayError::ReadPhysical { .. }), "{err}");
}

#[test]
fn unlinked_bytes_at_c8_move_it_to_d4_and_say_why() {
    // Turing: MSI-X bytes at 0xc8 that the list does not link (RTX 2080 Ti dump).
    let mut config = space(&[(0x60, PM.0, PM.1), (0x68, MSIX.0, MSIX.1)]);
    config[0xc8..0xd0].copy_from_slice(&[0x11, 0x00, 0x05, 0x00, 0x00, 0x00, 0xb9, 0x00]);
    let o = place(&config).unwrap();
    assert_eq!(o.placement().offset, 0xd4);
    let r = &o.placement().rejected[0];
    assert_eq!(r.offset, 0xc8);
    assert!(r.overlaps().is_none());
    assert!(
        r.to_string()
            .contains("non-zero bytes outside the list (11 00 05 00 00 00 b9 00)"),
        "{r}"
    );
    // One stray byte anywhere in the 8 is enough.
    let mut config = space(&[(0x40, PM.0, PM.1)]);
    config[0xcf] = 1;
    assert_eq!(place(&config).unwrap().placement().offset, 0xd4);
}

#[test]
fn the_drivers_bts_capability_is_kept() {
    // BTS at 0xd4 (driver 580.65+ preference), linked last: 0xc8 is free.
    let bts = [0x08, 0x42, 0x54, 0x53, 0x01, 0x00];
    let config = space(&[(0x40, PM.0, PM.1), (0xd4, 0x09, &bts)]);
    let o = place(&config).unwrap();
    let p = o.placement();
    assert_eq!((p.offset, p.bts_offset), (0xc8, Some(0xd4)));
    let v = read_all(&o, 256);
    // BTS keeps its bytes; only its next pointer, as the last in the list, now
    // leads to the new capability.
    assert_eq!(v[0xd4], config[0xd4]);
    assert_eq!(v[0xd6..0xdc], config[0xd6..0xdc], "BTS bytes untouched");
    assert_eq!(v[0xd5], 0xc8);
    let caps = ConfigSpace::new(&v).unwrap().capabilities().unwrap();
    assert_eq!(
        caps.iter().map(|c| c.offset).collect::<Vec<_>>(),
        [0x40, 0xd4, 0xc8]
    );
    // BTS at 0xd4 and Turing's unlinked MSI-X at 0xc8: nowhere QEMU would go.
    let mut config = config;
    config[0xc8..0xd0].copy_from_slice(&[0x11, 0x00, 0x05, 0x00, 0x00, 0x00, 0xb9, 0x00]);
    let err = place(&config).unwrap_err();
    assert!(
        matches!(err, OverlayError::PreferredSlotsTaken { .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("overlaps capability 0x09 at 0xd4"),
        "{err}"
    );
    let o = place_anywhere(&config).unwrap();
    assert_eq!(o.placement().offset, 0x48);
}
