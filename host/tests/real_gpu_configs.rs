//! The overlay on the config spaces of seven NVIDIA GPUs that others published
//! (tests/fixtures/real-gpu-configs: pciutils test data and bug reports,
//! Tesla to Turing; its README names each source). Expectations come from that collection's index.json,
//! written by its own parser and checked there against pciutils 3.9: the
//! capability chain (offset, id, length) and what sits at 0xC8 and 0xD4.

use std::path::PathBuf;

use p2p_host::overlay::{ConfigOverlay, OverlayOptions, SlotConflict};
use p2p_shared::pci::ConfigSpace;
use p2p_shared::{Clique, P2pCapability};
use serde_json::Value;

fn collection() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/real-gpu-configs");
    assert!(
        dir.join("index.json").is_file(),
        "{} is missing (the repository's own fixtures)",
        dir.display()
    );
    dir
}

#[test]
fn every_published_gpu_gets_the_capability_where_qemu_would_put_it() {
    let dir = collection();
    let index: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("index.json")).unwrap()).unwrap();
    assert_eq!(index.len(), 7, "the collection's seven intact dumps");
    let mut moved = Vec::new();
    for entry in &index {
        let name = entry["name"].as_str().unwrap();
        let config = std::fs::read(dir.join(entry["config"].as_str().unwrap())).unwrap();
        assert_eq!(
            config.len() as u64,
            entry["length"].as_u64().unwrap(),
            "{name}"
        );

        // Our walk agrees with the collection's (offset, id, length).
        let caps = ConfigSpace::new(&config).unwrap().capabilities().unwrap();
        let ours: Vec<(u64, u64, u64)> = caps
            .iter()
            .map(|c| (u64::from(c.offset), u64::from(c.id), c.len as u64))
            .collect();
        let theirs: Vec<(u64, u64, u64)> = entry["capabilities"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t[0].as_u64().unwrap(),
                    t[1].as_u64().unwrap(),
                    t[2].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(ours, theirs, "{name}: capability walk");

        let c8_free = entry["slot_c8"].as_str().unwrap().starts_with("free");
        let d4_free = entry["slot_d4"].as_str().unwrap().starts_with("free");
        let clique = Clique::new(5).unwrap();
        let o = ConfigOverlay::new(&config, clique, OverlayOptions::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let p = o.placement();
        let want = if c8_free {
            0xc8
        } else {
            assert!(d4_free, "{name}: the collection has no GPU with both taken");
            0xd4
        };
        assert_eq!(p.offset, want, "{name}");
        if !c8_free {
            moved.push(name.to_string());
            // The reason: non-zero bytes outside the list, exactly those listed.
            let r = &p.rejected[0];
            assert_eq!(r.offset, 0xc8);
            let SlotConflict::NonZero { bytes } = r.conflict else {
                panic!("{name}: {r}");
            };
            let listed = entry["slot_c8"].as_str().unwrap();
            let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
            assert!(
                listed.ends_with(&hex.join(" ")),
                "{name}: {listed} vs {hex:?}"
            );
        }

        // The guest's walk: the original chain, then the capability, last.
        let mut v = vec![0u8; config.len()];
        o.read(0, &mut v).unwrap();
        let after = ConfigSpace::new(&v).unwrap().capabilities().unwrap();
        assert_eq!(after.len(), caps.len() + 1, "{name}");
        assert_eq!(after.last().unwrap().offset, want, "{name}");
        let cap = P2pCapability::decode(&v[usize::from(want)..]).unwrap();
        assert_eq!((cap.clique, cap.next), (clique, 0), "{name}");
        // Everything but the capability and the patched next pointer is the device's.
        let pointer = usize::from(p.pointer_offset().unwrap());
        for i in 0..config.len() {
            let ours = (usize::from(want)..usize::from(want) + 8).contains(&i) || i == pointer;
            if !ours {
                assert_eq!(v[i], config[i], "{name}: byte {i:#x} changed");
            }
        }
    }
    assert_eq!(
        moved,
        ["bugreport-tu102-rtx2080ti"],
        "only Turing keeps bytes at 0xc8"
    );
}
