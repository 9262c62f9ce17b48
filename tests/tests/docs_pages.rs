//! Every `console` block of every page under docs/ (`docs/*.md`) runs
//! verbatim from the repository's root, as `readme.rs` runs the README's:
//! the binaries built from this tree print what the page shows (`...` and
//! `[..]` mark output cut for length, `? N` an exit status, and a blank line
//! ends the output). A page without a console block passes as it is; trycmd
//! also runs unlabelled fences, so other blocks carry a language (`text`).

use p2p_tests::{binary, repo_root};

#[test]
fn docs_console_blocks_run_verbatim() {
    let mut pages: Vec<_> = std::fs::read_dir(repo_root().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("a docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    assert!(
        pages.iter().any(|p| p.ends_with("proxmox.md")),
        "docs/proxmox.md is one of the pages: {pages:?}"
    );
    // The commands' paths are relative to the repository's root, as a reader
    // runs them; this test binary is the only test in its process.
    std::env::set_current_dir(repo_root()).expect("the repository's root");
    let cases = trycmd::TestCases::new();
    cases
        .register_bin("p2p-host", binary("p2p-host"))
        .register_bin("p2p-guest", binary("p2p-guest"));
    for page in pages {
        cases.case(page);
    }
}
