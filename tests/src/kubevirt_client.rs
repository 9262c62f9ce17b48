//! KubeVirt v1.9.0's own hook client as a test peer: `kubevirt-hook-client`
//! (the Go module in tests/kubevirt) calls a plugin's `MutateDomain` through
//! virt-launcher's plugin pipeline (`plugins.ApplyDomainHooks`) or a hook
//! sidecar through virt-launcher's hook manager (`hooks.Manager`), and
//! `sidecar-shim` is KubeVirt's `cmd/sidecars`. Both are built by
//! scripts/build-kubevirt-hook-client.sh.

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::go_peer::GoPeer;

/// The `kubevirt-hook-client` binary (`sidecar-shim` beside it), built from
/// tests/kubevirt when either is missing or older than a file of that
/// module; `VP2P_KUBEVIRT_HOOK_CLIENT` names another build to use as it is
/// (with its `sidecar-shim` beside it).
pub fn kubevirt_hook_client() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            GoPeer {
                dir: "kubevirt-hook-client",
                bins: &["kubevirt-hook-client", "sidecar-shim"],
                module: "tests/kubevirt",
                script: "scripts/build-kubevirt-hook-client.sh",
                env: "VP2P_KUBEVIRT_HOOK_CLIENT",
            }
            .binary()
        })
        .clone()
}
