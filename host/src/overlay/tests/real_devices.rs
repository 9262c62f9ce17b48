//! The overlay on real config spaces: the H200 of the passthrough fixture and
//! the virtio functions of the Firecracker development VM.

use p2p_topology::pci::ConfigSpace;
use p2p_topology::P2pCapability;

use super::super::{
    BytePatch, ConfigOverlay, ConfigPatch, LinkedAfter, OverlayError, OverlayOptions,
    PlacementAction,
};
use super::{clique, firecracker_config, h200_config, patched, read_all};

/// DESIGN.md: DW0 = 0x50080009 | next << 8, DW1 = (clique << 19) | 0x5032.
fn design_dwords(clique: u32, next: u32) -> [u32; 2] {
    [0x5008_0009 | next << 8, clique << 19 | 0x5032]
}

#[test]
fn h200_places_at_c8_after_msix() {
    let config = h200_config();
    let o = ConfigOverlay::new(&config, clique(3), OverlayOptions::default()).unwrap();
    let p = o.placement();
    assert_eq!(p.action, PlacementAction::Injected);
    assert_eq!(p.offset, 0xc8);
    assert_eq!(
        p.linked_after,
        Some(LinkedAfter {
            id: 0x11,
            offset: 0xb0,
            next: BytePatch {
                offset: 0xb1,
                old: 0x00,
                new: 0xc8
            }
        })
    );
    assert_eq!(p.pointer_offset(), Some(0xb1));
    assert!(!p.cap_pointer_changed() && !p.status_changed());
    assert!(p.rejected.is_empty(), "{:?}", p.rejected);
    assert_eq!(
        o.patches(),
        vec![
            ConfigPatch {
                offset: 0xb0,
                mask: 0x0000_ff00,
                value: 0x0000_c800
            },
            ConfigPatch {
                offset: 0xc8,
                mask: !0,
                value: 0x5008_0009
            },
            ConfigPatch {
                offset: 0xcc,
                mask: !0,
                value: 3 << 19 | 0x5032
            },
        ]
    );
}

#[test]
fn h200_capability_bytes_are_the_design_dwords_for_every_clique() {
    let config = h200_config();
    for c in 0..=15u8 {
        let o = ConfigOverlay::new(&config, clique(c), OverlayOptions::default()).unwrap();
        let mut dw = [0u8; 8];
        o.read(0xc8, &mut dw).unwrap();
        assert_eq!(dw, [0x09, 0x00, 0x08, b'P', b'2', b'P', c << 3, 0x00]);
        let got = [
            u32::from_le_bytes(dw[..4].try_into().unwrap()),
            u32::from_le_bytes(dw[4..].try_into().unwrap()),
        ];
        assert_eq!(got, design_dwords(c.into(), 0), "clique {c}");
        assert_eq!(o.placement().capability, dw);
    }
}

#[test]
fn h200_virtual_config_walks_to_the_capability_last() {
    let config = h200_config();
    let o = ConfigOverlay::new(&config, clique(7), OverlayOptions::default()).unwrap();
    let v = read_all(&o, config.len());
    assert_eq!(v, patched(&o, &config), "reads equal the patched bytes");
    let caps = ConfigSpace::new(&v).unwrap().capabilities().unwrap();
    let walk: Vec<(u8, u8)> = caps.iter().map(|c| (c.offset, c.id)).collect();
    assert_eq!(
        walk,
        vec![
            (0x40, 0x01),
            (0x48, 0x05),
            (0x60, 0x10),
            (0xb0, 0x11),
            (0xc8, 0x09)
        ]
    );
    let cap = P2pCapability::decode(&v[0xc8..]).unwrap();
    assert_eq!((cap.clique, cap.next), (clique(7), 0));
    // Everything but the 8 bytes and the pointer at 0xb1 is the physical config.
    for (i, (a, b)) in v.iter().zip(&config).enumerate() {
        if i != 0xb1 && !(0xc8..0xd0).contains(&i) {
            assert_eq!(a, b, "byte {i:#x}");
        }
    }
    assert_eq!(v[0xb1], 0xc8);
}

#[test]
fn h200_reads_of_every_width_and_alignment_across_the_capability() {
    let config = h200_config();
    let o = ConfigOverlay::new(&config, clique(9), OverlayOptions::default()).unwrap();
    let v = patched(&o, &config);
    for start in 0xc0u64..=0xd4 {
        for width in 1..=16usize {
            let mut buf = vec![0xa5u8; width];
            o.read(start, &mut buf).unwrap();
            let s = start as usize;
            assert_eq!(buf, v[s..s + width], "read {width} at {start:#x}");
        }
    }
    // Dword reads at the MSI-X header show the patched next pointer.
    let mut dw = [0u8; 4];
    o.read(0xb0, &mut dw).unwrap();
    assert_eq!(u32::from_le_bytes(dw), 0x8008_c811);
    let mut w = [0u8; 2];
    o.read(0xb1, &mut w).unwrap();
    assert_eq!(w, [0xc8, 0x08]);
}

#[test]
fn h200_guest_writes_to_owned_bytes_are_dropped() {
    let config = h200_config();
    let mut o = ConfigOverlay::new(&config, clique(4), OverlayOptions::default()).unwrap();
    let v = patched(&o, &config);
    // Every width at every alignment across 0xc6..0xd2, all ones.
    for start in 0xc6u64..0xd2 {
        for width in [1usize, 2, 3, 4, 8] {
            let end = (start as usize + width).min(0xd2);
            let data = vec![0xffu8; end - start as usize];
            o.write(start, &data).unwrap();
        }
    }
    o.write(0xb0, &[0x00, 0x00, 0x08, 0x80]).unwrap(); // MSI-X header dword
    o.write(0xb1, &[0x40]).unwrap(); // the patched pointer alone
    let now = read_all(&o, config.len());
    assert_eq!(now[0xc8..0xd0], v[0xc8..0xd0], "injected bytes unchanged");
    assert_eq!(now[0xb1], 0xc8, "patched pointer unchanged");
    let phys = o.physical();
    assert_eq!(phys[0xc8..0xd0], [0; 8], "nothing reached the device there");
    assert_eq!(phys[0xb1], 0x00, "the device's pointer was never written");
    // The bytes around them were written through.
    assert_eq!(phys[0xc6..0xc8], [0xff, 0xff]);
    assert_eq!(phys[0xd0..0xd2], [0xff, 0xff]);
    assert_eq!((phys[0xb0], phys[0xb2], phys[0xb3]), (0x00, 0x08, 0x80));
    assert_eq!(now[0xc6..0xc8], [0xff, 0xff]);
}

#[test]
fn h200_already_carrying_the_capability() {
    let config = h200_config();
    let first = ConfigOverlay::new(&config, clique(5), OverlayOptions::default()).unwrap();
    let v = patched(&first, &config);
    let again = ConfigOverlay::new(&v, clique(5), OverlayOptions::default()).unwrap();
    assert_eq!(again.placement().action, PlacementAction::AlreadyPresent);
    assert_eq!(again.placement().offset, 0xc8);
    assert!(again.patches().is_empty());
    assert_eq!(read_all(&again, v.len()), v);
    let err = ConfigOverlay::new(&v, clique(6), OverlayOptions::default()).unwrap_err();
    assert!(matches!(
        err,
        OverlayError::ExistingOtherClique { offset: 0xc8, .. }
    ));
    assert!(err.to_string().contains("0xc8"), "{err}");
}

#[test]
fn virtio_functions_are_refused_unless_allowed() {
    // 00:03.0: virtio-net (vendor 0x1af4), vendor-specific capabilities at
    // 0x40..0x84, MSI-X at 0x98 (last).
    let config = firecracker_config(3);
    let err = ConfigOverlay::new(&config, clique(0), OverlayOptions::default()).unwrap_err();
    assert!(matches!(
        err,
        OverlayError::NotNvidiaGpu {
            vendor: 0x1af4,
            base_class: 0x02
        }
    ));
    let allow = OverlayOptions {
        allow_non_nvidia: true,
        ..Default::default()
    };
    let o = ConfigOverlay::new(&config, clique(0), allow).unwrap();
    assert_eq!(o.placement().offset, 0xc8);
    assert_eq!(o.placement().pointer_offset(), Some(0x99));
    let v = read_all(&o, config.len());
    let caps = ConfigSpace::new(&v).unwrap().capabilities().unwrap();
    assert_eq!(caps.last().map(|c| (c.offset, c.id)), Some((0xc8, 0x09)));
    assert_eq!(caps.len(), 7);
}

#[test]
fn host_bridge_without_a_list_gets_one() {
    // 00:00.0: Intel host bridge, status bit 4 clear, 0x34 = 0.
    let config = firecracker_config(0);
    let allow = OverlayOptions {
        allow_non_nvidia: true,
        ..Default::default()
    };
    let o = ConfigOverlay::new(&config, clique(1), allow).unwrap();
    let p = o.placement();
    assert_eq!(p.offset, 0xc8);
    assert_eq!(p.linked_after, None);
    assert_eq!(
        p.cap_pointer,
        Some(BytePatch {
            offset: 0x34,
            old: 0,
            new: 0xc8
        })
    );
    assert_eq!(
        p.status,
        Some(BytePatch {
            offset: 0x06,
            old: 0,
            new: 0x10
        })
    );
    let v = read_all(&o, config.len());
    let cs = ConfigSpace::new(&v).unwrap();
    assert!(cs.has_capability_list());
    let caps = cs.capabilities().unwrap();
    assert_eq!(
        caps.iter().map(|c| c.offset).collect::<Vec<_>>(),
        vec![0xc8]
    );
}
