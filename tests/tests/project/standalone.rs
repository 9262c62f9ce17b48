//! The repository stands alone: no tracked file outside docs/results reads the
//! project's `shared` folder that sits beside a developer's checkout (a user's
//! clone has none). The workspace's own crates under `shared/` are named
//! `../shared/topology` and so on from fuzz/Cargo.toml; such a path is fine
//! when it lands inside this repository's `shared/`.

use std::path::Path;
use std::process::Command;

use p2p_tests::repo_root;

/// Every `(../)+shared` path in `text`, with what follows it up to the next
/// character that cannot be part of a path.
fn shared_paths(text: &str) -> Vec<String> {
    let climb = "../";
    let mut found = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find(climb) {
        let start = i + at;
        let mut j = start;
        while text[j..].starts_with(climb) {
            j += climb.len();
        }
        if text[j..].starts_with("shared") {
            let mut end = j + "shared".len();
            while end < bytes.len()
                && (bytes[end].is_ascii_alphanumeric() || b"/._-".contains(&bytes[end]))
            {
                end += 1;
            }
            found.push(text[start..end].to_string());
            i = end;
        } else {
            i = j;
        }
    }
    found
}

/// Whether `path`, read in `file`, names the workspace's own `shared/` crate
/// (or something inside it) rather than a folder beside the repository.
fn is_the_workspace_crate(root: &Path, file: &str, path: &str) -> bool {
    let rest = path.trim_start_matches("../");
    let climbs = (path.len() - rest.len()) / 3;
    let depth = Path::new(file).components().count() - 1;
    // A climb out of the file's own folder that still ends inside the
    // repository, onto the crate or an entry it really has.
    let inside = climbs <= depth;
    let entry = rest.strip_prefix("shared").unwrap_or("");
    let entry = entry
        .trim_start_matches('/')
        .split('/')
        .next()
        .unwrap_or("");
    inside && (entry.is_empty() || root.join("shared").join(entry).exists())
}

/// One level up, kept apart so that this file holds no path it would flag.
const UP: &str = "../";

#[test]
fn the_path_scanner_finds_what_a_file_reads_from_beside_the_repository() {
    // Hand-written cases: each string is what a reader of the file would follow.
    assert_eq!(
        shared_paths(&format!("join(\"{UP}{UP}shared/fixtures/x.xml\")")),
        [format!("{UP}{UP}shared/fixtures/x.xml")]
    );
    assert_eq!(
        shared_paths(&format!(
            "p2p-topology = {{ path = \"{UP}shared/topology\" }}"
        )),
        [format!("{UP}shared/topology")]
    );
    assert!(shared_paths(&format!("the shared/ crate and {UP}sharedness")).len() == 1);
    assert!(shared_paths("path = \"shared\"").is_empty());
    let root = repo_root();
    assert!(is_the_workspace_crate(
        &root,
        "fuzz/Cargo.toml",
        &format!("{UP}shared/topology")
    ));
    assert!(!is_the_workspace_crate(
        &root,
        "README.md",
        &format!("{UP}shared/fixtures/a")
    ));
    assert!(!is_the_workspace_crate(
        &root,
        "host/tests/a.rs",
        &format!("{UP}{UP}shared/fixtures/a")
    ));
    assert!(!is_the_workspace_crate(
        &root,
        "fuzz/Cargo.toml",
        &format!("{UP}shared/fixtures")
    ));
}

#[test]
fn no_tracked_file_reads_the_shared_folder_beside_the_repository() {
    let root = repo_root();
    let out = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(&root)
        .output()
        .expect("git ls-files: this test lists the tracked files with git");
    assert!(
        out.status.success(),
        "git ls-files failed in {}: {}",
        root.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let files: Vec<String> = String::from_utf8(out.stdout)
        .expect("file names in UTF-8")
        .split('\0')
        .filter(|f| !f.is_empty())
        .map(str::to_string)
        .collect();
    assert!(files.len() > 100, "git listed only {} files", files.len());
    let mut offending = Vec::new();
    // docs/results keeps recorded runs verbatim.
    for file in files.iter().filter(|f| !f.starts_with("docs/results/")) {
        let Ok(text) = std::fs::read_to_string(root.join(file)) else {
            continue; // binary (a .tgz fixture): holds no path a reader follows
        };
        for path in shared_paths(&text) {
            if !is_the_workspace_crate(&root, file, &path) {
                offending.push(format!("{file}: {path}"));
            }
        }
    }
    assert!(
        offending.is_empty(),
        "tracked files read the folder beside the repository (copy the data into tests/fixtures):\n{}",
        offending.join("\n")
    );
}
