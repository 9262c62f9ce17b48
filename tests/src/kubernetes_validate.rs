//! Kubernetes' own OpenAPI schemas, through the `kubernetes-validate` PyPI
//! package (1.37.0 bundles the schemas of Kubernetes 1.25 to 1.37), which
//! `scripts/setup.sh` installs in a venv under `$VP2P_CACHE`. Strict: an
//! unknown field fails. A missing tool fails loudly, never skips.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The Kubernetes versions every object the DRA driver prints or ships must
/// validate against: 1.34 (resource.k8s.io/v1 GA) and 1.37 (the newest the
/// package bundles).
pub const VERSIONS: [&str; 2] = ["1.34.0", "1.37.0"];

/// The `kubernetes-validate` executable: `$VP2P_KUBERNETES_VALIDATE`, else the
/// venv scripts/setup.sh makes (`$VP2P_CACHE`, default `~/.cache/vp2p`).
pub fn executable() -> PathBuf {
    if let Some(p) = std::env::var_os("VP2P_KUBERNETES_VALIDATE") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("VP2P_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(&std::env::var_os("HOME").expect("HOME is set")).join(".cache/vp2p")
        });
    let exe = cache.join("kubernetes-validate/bin/kubernetes-validate");
    assert!(
        exe.is_file(),
        "{} is missing: run `bash scripts/setup.sh` (it installs kubernetes-validate 1.37.0 from PyPI), or set VP2P_KUBERNETES_VALIDATE",
        exe.display()
    );
    exe
}

/// One file's verdict for one version: every resource line the tool printed.
#[derive(Debug)]
pub struct Verdict {
    /// Exit status 0.
    pub ok: bool,
    /// The tool's lines (`INFO ... passed`, `ERROR ...`, `WARN ...`).
    pub lines: Vec<String>,
}

/// Validates `file` (YAML or JSON, one or more documents) strictly against
/// Kubernetes `version`.
pub fn validate(file: &Path, version: &str) -> Verdict {
    let out = Command::new(executable())
        .args(["--strict", "-k", version])
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("running kubernetes-validate: {e}"));
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    Verdict {
        ok: out.status.success(),
        lines: text.lines().map(str::to_string).collect(),
    }
}

/// Asserts that every document of `file` passes for every version of
/// [`VERSIONS`], each `kind/name` of `expect` among them, and that nothing
/// was skipped (the tool only warns on a kind it has no schema for).
pub fn assert_valid(file: &Path, expect: &[&str]) {
    for v in VERSIONS {
        let verdict = validate(file, v);
        let minor = v.trim_end_matches(".0");
        let bad: Vec<&String> = verdict
            .lines
            .iter()
            .filter(|l| !l.starts_with("INFO "))
            .collect();
        assert!(
            verdict.ok && bad.is_empty(),
            "{} against Kubernetes {v}: {:#?}",
            file.display(),
            verdict.lines
        );
        for e in expect {
            let want = format!("passed for resource {e} against version {minor}");
            assert!(
                verdict.lines.iter().any(|l| l.contains(&want)),
                "{}: no '{want}' in {:#?}",
                file.display(),
                verdict.lines
            );
        }
    }
}
