//! Arbitrary bytes to the P2P capability decoder: decode must not panic, and what
//! it decodes must re-encode to the same bytes (p2p_fuzz::capability).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(broken) = p2p_fuzz::capability::check(data) {
        panic!("{broken}");
    }
});
