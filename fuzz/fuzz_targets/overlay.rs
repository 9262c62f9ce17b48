//! The config-space overlay under arbitrary config bytes and arbitrary guest
//! read/write sequences: no panic, reads always equal the virtual bytes, and no
//! write changes the bytes the overlay owns (the capability, the patched
//! pointer, the status bit), nor reaches the device through them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use p2p_host::overlay::{ConfigOverlay, OverlayOptions};
use p2p_topology::Clique;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 + 256 {
        return;
    }
    let (head, rest) = data.split_at(2);
    let (config, ops) = rest.split_at(256);
    let mut config = config.to_vec();
    if head[0] & 1 == 0 {
        // An NVIDIA GPU most of the time, so the overlay gets past the vendor check.
        config[0..2].copy_from_slice(&0x10de_u16.to_le_bytes());
        config[0x0b] = 0x03;
    }
    let options = OverlayOptions {
        allow_non_nvidia: head[0] & 2 != 0,
        any_offset: head[0] & 4 != 0,
    };
    let clique = Clique::new(head[1] & 0xf).unwrap();
    let Ok(mut o) = ConfigOverlay::new(&config, clique, options) else {
        return;
    };
    let read_all = |o: &ConfigOverlay| {
        let mut v = vec![0u8; 256];
        o.read(0, &mut v).expect("reads inside the config succeed");
        v
    };
    let before = read_all(&o);
    let owned: Vec<usize> = (0..256).filter(|&i| o.owned_mask(i as u64) != 0).collect();
    // Ops: [kind, offset, len, data...]: kind even = write, odd = read.
    let mut i = 0;
    while i + 3 <= ops.len() {
        let (kind, off, len) = (ops[i], usize::from(ops[i + 1]), usize::from(ops[i + 2] % 9));
        i += 3;
        let len = len.min(256 - off);
        if kind & 1 == 0 {
            let bytes: Vec<u8> = ops[i..].iter().copied().take(len).collect();
            i += bytes.len();
            let _ = o.write(off as u64, &bytes);
        } else {
            let mut buf = vec![0u8; len];
            let _ = o.read(off as u64, &mut buf);
        }
        let now = read_all(&o);
        for &b in &owned {
            let mask = o.owned_mask(b as u64);
            assert_eq!(
                now[b] & mask,
                before[b] & mask,
                "owned bits of byte {b:#x} changed"
            );
            assert_eq!(
                o.physical()[b] & mask,
                config[b] & mask,
                "a write reached the device through owned bits of byte {b:#x}"
            );
        }
        // Reads equal the physical bytes with the patches applied.
        let mut v = o.physical().to_vec();
        o.apply_to(&mut v);
        assert_eq!(now, v[..256], "read differs from the virtual bytes");
    }
});
