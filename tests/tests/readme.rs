//! Every `console` block of README.md runs verbatim (from the repository's
//! root, with the binaries built from this tree) and prints what the README
//! shows; `...` and `[..]` mark output cut for length. Blocks of output
//! recorded elsewhere (GPU VMs, a Cloud Hypervisor socket) are `text` blocks.
//! Reads only the repository's own files.

use p2p_tests::{binary, repo_root};

#[test]
fn readme_console_blocks_run_verbatim() {
    let readme = repo_root().join("README.md");
    // The commands' paths are relative to the repository's root, as a reader
    // runs them; this test binary is the only test in its process.
    std::env::set_current_dir(repo_root()).expect("the repository's root");
    trycmd::TestCases::new()
        .register_bin("p2p-host", binary("p2p-host"))
        .register_bin("p2p-guest", binary("p2p-guest"))
        .case(readme);
}
