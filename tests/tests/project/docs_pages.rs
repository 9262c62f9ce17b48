//! Every `console` block of every page under docs/ runs verbatim (from the
//! repository's root, with the binaries built from this tree) and prints what
//! the page shows, as the README's do (`tests/tests/project/readme.rs`); `...` and
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

/// docs/kubevirt.md's device plugin section is true to `p2p-host
/// device-plugin --help`: its usage line names exactly the options --help
/// lists, and no sentence of the section says one of them is not an option.
#[test]
fn kubevirt_page_names_the_device_plugins_options_as_its_help_does() {
    let help = p2p_tests::run("p2p-host", &["device-plugin", "--help"]);
    assert_eq!(help.code, Some(0), "{}", help.stderr);
    let flags = |text: &str| -> std::collections::BTreeSet<String> {
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .filter(|w| w.starts_with("--") && w.len() > 2)
            .map(str::to_string)
            .collect()
    };
    let mut want = flags(
        help.stdout
            .split_once("Options:")
            .expect("--help lists options")
            .1,
    );
    want.remove("--help");
    let page = std::fs::read_to_string(repo_root().join("docs/kubevirt.md")).unwrap();
    let section = page
        .split_once("## Device plugin")
        .expect("docs/kubevirt.md has a device plugin section")
        .1;
    let section = section.split("\n## ").next().unwrap();
    let usage = section
        .split('`')
        .find(|s| s.starts_with("p2p-host device-plugin "))
        .expect("a `p2p-host device-plugin ...` usage");
    assert_eq!(flags(usage), want, "usage: {usage}");
    let flat = section.replace('\n', " ");
    for sentence in flat.split(". ") {
        let denies = ["not options", "not an option", "has no `--"]
            .iter()
            .any(|d| sentence.contains(d));
        let named: Vec<&String> = want
            .iter()
            .filter(|f| sentence.contains(f.as_str()))
            .collect();
        assert!(
            !denies || named.is_empty(),
            "docs/kubevirt.md says {named:?} are not options: {sentence}"
        );
    }
}

/// docs/kubevirt.md's DRA walk-through shows manifests verbatim: every
/// `yaml` block of its DRA section is one of the documents shipped in
/// host/kubernetes/dra (compared as parsed YAML), and passes Kubernetes
/// 1.34's and 1.37's schemas, strict, as written in the page.
#[test]
fn kubevirt_page_dra_manifests_are_the_shipped_ones_and_pass_the_schemas() {
    let blocks = p2p_tests::kube::docs_dra_yaml_blocks();
    assert!(
        blocks.len() >= 2,
        "{} yaml blocks in the DRA section",
        blocks.len()
    );
    let docs = p2p_tests::yaml_documents;
    let dir = repo_root().join("host/kubernetes/dra");
    let mut shipped = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        shipped.extend(docs(&std::fs::read_to_string(e.unwrap().path()).unwrap()));
    }
    let tmp = tempfile::tempdir().unwrap();
    for (i, block) in blocks.iter().enumerate() {
        let shown = docs(block);
        assert_eq!(shown.len(), 1, "block {i} holds one document");
        assert!(
            shipped.contains(&shown[0]),
            "block {i} of the DRA section is not a document of host/kubernetes/dra:\n{block}"
        );
        let file = tmp.path().join(format!("block-{i}.yaml"));
        std::fs::write(&file, block).unwrap();
        for v in p2p_tests::kubernetes_validate::VERSIONS {
            let verdict = p2p_tests::kubernetes_validate::validate(&file, v);
            assert!(verdict.ok, "block {i} against {v}: {:#?}", verdict.lines);
        }
    }
}
