//! Every `console` block of every page under docs/ runs verbatim (from the
//! repository's root, with the binaries built from this tree) and prints what
//! the page shows, as the README's do (`tests/tests/readme.rs`); `...` and
//! `[..]` mark output cut for length. Output recorded elsewhere is in `text`
//! blocks.

use p2p_tests::{binary, repo_root};

#[test]
fn docs_console_blocks_run_verbatim() {
    std::env::set_current_dir(repo_root()).expect("the repository's root");
    let mut pages: Vec<_> = std::fs::read_dir(repo_root().join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .filter(|p| std::fs::read_to_string(p).is_ok_and(|t| t.contains("```console")))
        .collect();
    pages.sort();
    // The pages that carry the reference's examples must be among them.
    for must in [
        "p2p-host.md",
        "p2p-guest.md",
        "nccl.md",
        "libvirt.md",
        "incus.md",
    ] {
        assert!(
            pages.iter().any(|p| p.ends_with(must)),
            "docs/{must} has no console block any more"
        );
    }
    let cases = trycmd::TestCases::new();
    cases
        .register_bin("p2p-host", binary("p2p-host"))
        .register_bin("p2p-guest", binary("p2p-guest"));
    for page in &pages {
        cases.case(page);
    }
}
