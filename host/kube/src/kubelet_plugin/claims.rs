//! Where the driver reads a claim's allocation at prepare. The API server is
//! the real source (the kubelet sends only the claim's name and uid; see
//! `api_server::ApiClaims`); a node without it reads ResourceClaim objects,
//! as the API server would answer them, from a directory ([`ClaimDir`]), and
//! tests hand claims in through the same trait.

use std::path::PathBuf;
use std::time::Duration;

use p2p_allocation::dra::claim::{ResourceClaim, POD_CLAIM_NAME_ANNOTATION};
use p2p_allocation::dra::names::is_dns_label;

/// A claim as the kubelet names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRef {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
}

impl std::fmt::Display for ClaimRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "claim {}/{} (uid {})",
            self.namespace, self.name, self.uid
        )
    }
}

/// Checks the names of `object` that the driver makes parts of paths (the
/// host's metadata directory, the container's mount point), as Kubernetes
/// makes them: each request of `driver`'s results a DNS label of at most 63
/// characters, or two joined by `/` (`<request>/<subrequest>` of a
/// prioritized list), and the pod's claim name in the
/// `resource.kubernetes.io/pod-claim-name` annotation a DNS label. A name
/// the API server would not have accepted is refused, named, before any
/// file is written.
pub fn check_path_names(
    claim: &ClaimRef,
    object: &ResourceClaim,
    driver: &str,
) -> Result<(), String> {
    for r in object.results().iter().filter(|r| r.driver == driver) {
        let parts: Vec<&str> = r.request.split('/').collect();
        if parts.len() > 2 || !parts.iter().all(|p| is_dns_label(p, 63)) {
            return Err(format!(
                "{claim}: request name {:?} is not a DNS label or two joined by '/'",
                r.request
            ));
        }
    }
    if let Some(p) = object.metadata.annotations.get(POD_CLAIM_NAME_ANNOTATION) {
        if !is_dns_label(p, 63) {
            return Err(format!(
                "{claim}: annotation {POD_CLAIM_NAME_ANNOTATION} {p:?} is not a DNS label"
            ));
        }
    }
    Ok(())
}

/// A source of ResourceClaim objects.
pub trait ClaimSource: Send + Sync {
    /// The claim `claim` names, or why it cannot be had within `within`
    /// (a source that can wait gives up then).
    fn claim(&self, claim: &ClaimRef, within: Duration) -> Result<ResourceClaim, String>;

    /// Whether the claim `claim` names is still there (the same uid), or
    /// why that cannot be told now. A source that cannot tell a claim gone
    /// from one it failed to read answers from [`Self::claim`]: an error
    /// is "cannot tell".
    fn exists(&self, claim: &ClaimRef, within: Duration) -> Result<bool, String> {
        self.claim(claim, within)
            .map(|c| c.metadata.uid == claim.uid)
    }
}

/// Claims read from `<dir>/<namespace>/<name>.json`, each a ResourceClaim
/// object as `kubectl get resourceclaim -o json` prints it. The namespace
/// and name are checked by the server before they get here (RFC 1123: no
/// `/`, no `..`).
#[derive(Debug, Clone)]
pub struct ClaimDir(pub PathBuf);

/// The most a claim file may hold. The API server stores no object larger
/// than etcd takes in one request (1.5 MiB by default, etcd's
/// `--max-request-bytes`); 2 MiB leaves room for indentation.
pub const CLAIM_FILE_MAX: u64 = 2 << 20;

impl ClaimSource for ClaimDir {
    /// A local read, which does not wait: `within` is not needed.
    fn claim(&self, claim: &ClaimRef, _within: Duration) -> Result<ResourceClaim, String> {
        let path = self
            .0
            .join(&claim.namespace)
            .join(format!("{}.json", claim.name));
        let bytes = p2p_host_io::read_limited(&path, CLAIM_FILE_MAX)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Gone when its file is.
    fn exists(&self, claim: &ClaimRef, within: Duration) -> Result<bool, String> {
        let path = self
            .0
            .join(&claim.namespace)
            .join(format!("{}.json", claim.name));
        if !path.exists() {
            return Ok(false);
        }
        self.claim(claim, within)
            .map(|c| c.metadata.uid == claim.uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allocated(requests: &[&str], pod_claim: Option<&str>) -> ResourceClaim {
        let results: Vec<serde_json::Value> = requests
            .iter()
            .map(|r| {
                serde_json::json!({"request": r, "driver": "gpu.vp2p.io",
                "pool": "n", "device": "gpu-0000-01-00-0"})
            })
            .collect();
        let mut ann = serde_json::Map::new();
        if let Some(p) = pod_claim {
            ann.insert(POD_CLAIM_NAME_ANNOTATION.into(), p.into());
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "ns", "name": "c", "uid": "u1", "annotations": ann},
            "status": {"allocation": {"devices": {"results": results}}}
        }))
        .expect("a claim")
    }

    /// Kubernetes' names pass (a DNS label; `<request>/<subrequest>`); a
    /// request or pod claim name that would climb out of its directory, or
    /// name one more level, is refused naming it (Kubernetes 1.37: request
    /// and subrequest names are DNS labels, as is a pod's claim name).
    #[test]
    fn names_that_become_paths_are_checked_as_kubernetes_makes_them() {
        let c = claim("ns", "c");
        let ok = allocated(&["gpu-0", "gpus/tier-1"], Some("devices"));
        assert_eq!(check_path_names(&c, &ok, "gpu.vp2p.io"), Ok(()));
        for bad in ["..", "../../etc", "a/b/c", "GPU", "", "a/"] {
            let e = check_path_names(&c, &allocated(&[bad], None), "gpu.vp2p.io").unwrap_err();
            assert!(e.contains(&format!("request name {bad:?}")), "{e}");
        }
        // Another driver's requests are not this driver's to judge.
        assert_eq!(
            check_path_names(&c, &allocated(&["../x"], None), "gpu.other.io"),
            Ok(())
        );
        for bad in ["../x", "a/b", "X"] {
            let e =
                check_path_names(&c, &allocated(&["gpu-0"], Some(bad)), "gpu.vp2p.io").unwrap_err();
            assert!(e.contains("pod-claim-name") && e.contains(bad), "{e}");
        }
    }

    fn claim(ns: &str, name: &str) -> ClaimRef {
        ClaimRef {
            namespace: ns.into(),
            name: name.into(),
            uid: "u1".into(),
        }
    }

    /// A claim file is read only when it is a regular file of at most
    /// CLAIM_FILE_MAX bytes; anything else is refused naming the file, and
    /// a FIFO is refused rather than waited on.
    #[test]
    fn only_a_regular_file_of_bounded_size_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let ns = dir.path().join("vms");
        std::fs::create_dir(&ns).unwrap();
        let source = ClaimDir(dir.path().to_path_buf());

        let big = ns.join("big.json");
        let mut text = b"{\"x\":\"".to_vec();
        text.resize(CLAIM_FILE_MAX as usize + 1, b'a');
        std::fs::write(&big, &text).unwrap();
        let e = source
            .claim(&claim("vms", "big"), Duration::ZERO)
            .unwrap_err();
        assert!(
            e.contains(&*big.to_string_lossy()) && e.contains("larger than 2097152 bytes"),
            "{e}"
        );

        std::fs::create_dir(ns.join("dir.json")).unwrap();
        let e = source
            .claim(&claim("vms", "dir"), Duration::ZERO)
            .unwrap_err();
        assert!(
            e.ends_with("dir.json: not a regular file (a directory)"),
            "{e}"
        );

        let fifo = ns.join("fifo.json");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let e = source
            .claim(&claim("vms", "fifo"), Duration::ZERO)
            .unwrap_err();
        assert!(e.ends_with("fifo.json: not a regular file (a FIFO)"), "{e}");

        let e = source
            .claim(&claim("vms", "absent"), Duration::ZERO)
            .unwrap_err();
        assert!(
            e.contains("absent.json") && e.contains("No such file"),
            "{e}"
        );
    }
}
