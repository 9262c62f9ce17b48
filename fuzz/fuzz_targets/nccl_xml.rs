//! Arbitrary text to the NCCL topology XML reader and NCCL's model over what it
//! reads (p2p_fuzz::nccl_xml): no panic, no stack overflow, errors at a line of
//! the text with short quotes, no tree deeper than the reader's bound.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(broken) = p2p_fuzz::nccl_xml::check(data) {
        panic!("{broken}");
    }
});
