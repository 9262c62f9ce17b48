//! Arbitrary bytes as a config space: ConfigSpace::new, both walkers and every
//! accessor must not panic, and what they return must obey p2p_fuzz::walkers.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(broken) = p2p_fuzz::walkers::check(data) {
        panic!("{broken}");
    }
    if cfg!(feature = "region-check") {
        if let Err(broken) = p2p_fuzz::walkers::check_regions(data) {
            panic!("{broken}");
        }
    }
});
