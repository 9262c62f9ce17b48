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

/// The README stays a front door: under 300 lines, the rest in docs/.
#[test]
fn readme_format_is_under_300_lines() {
    let text = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let n = text.lines().count();
    assert!(n < 300, "README.md has {n} lines; move detail to docs/");
}

/// Every relative link of the README names a file of the repository.
#[test]
fn readme_format_links_name_files_that_exist() {
    let text = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    for part in text.split("](").skip(1) {
        let target = part.split(')').next().unwrap();
        if target.starts_with("http") {
            continue;
        }
        let path = target.split('#').next().unwrap();
        if path.is_empty() {
            continue;
        }
        assert!(
            repo_root().join(path).exists(),
            "README.md links to {target}, which does not exist"
        );
    }
}
