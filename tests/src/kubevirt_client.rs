//! KubeVirt v1.9.0's own hook client as a test peer: `kubevirt-hook-client`
//! (the Go module in tests/kubevirt) calls a plugin's `MutateDomain` through
//! virt-launcher's plugin pipeline (`plugins.ApplyDomainHooks`) or a hook
//! sidecar through virt-launcher's hook manager (`hooks.Manager`), and
//! `sidecar-shim` is KubeVirt's `cmd/sidecars`. Both are built by
//! scripts/build-kubevirt-hook-client.sh.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::SystemTime;

use crate::{repo_root, target_dir};

/// The `kubevirt-hook-client` binary (`sidecar-shim` beside it), built from
/// tests/kubevirt when either is missing or older than a file of that
/// module; `VP2P_KUBEVIRT_HOOK_CLIENT` names another build to use as it is
/// (with its `sidecar-shim` beside it).
pub fn kubevirt_hook_client() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if let Some(p) = std::env::var_os("VP2P_KUBEVIRT_HOOK_CLIENT") {
                return PathBuf::from(p);
            }
            let dir = target_dir().join("kubevirt-hook-client");
            let bin = dir.join("kubevirt-hook-client");
            let newest = newest_source(&repo_root().join("tests/kubevirt"));
            let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
            let built = [bin.clone(), dir.join("sidecar-shim")]
                .iter()
                .map(|p| modified(p))
                .min()
                .flatten();
            if built.is_none_or(|b| b < newest) {
                let status = Command::new("bash")
                    .arg(repo_root().join("scripts/build-kubevirt-hook-client.sh"))
                    .status()
                    .expect("bash runs scripts/build-kubevirt-hook-client.sh");
                assert!(
                    status.success(),
                    "building kubevirt-hook-client (tests/kubevirt, Go) failed: Go 1.26 and \
                     the Go module proxy are needed (scripts/setup.sh says how to get them)"
                );
            }
            assert!(bin.exists(), "{} was not built", bin.display());
            bin
        })
        .clone()
}

fn newest_source(dir: &Path) -> SystemTime {
    let mut newest = SystemTime::UNIX_EPOCH;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return newest;
    };
    for e in entries.flatten() {
        let p = e.path();
        let t = if p.is_dir() {
            newest_source(&p)
        } else if p
            .extension()
            .is_some_and(|x| x == "go" || x == "mod" || x == "sum")
        {
            e.metadata()
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH)
        } else {
            continue;
        };
        newest = newest.max(t);
    }
    newest
}
