//! Where the driver reads a claim's allocation at prepare. The API server is
//! the real source (the kubelet sends only the claim's name and uid); until
//! that side is built the driver reads ResourceClaim objects, as the API
//! server would answer them, from a directory, and tests hand claims in
//! through the same trait.

use std::path::PathBuf;

use p2p_shared::dra::claim::ResourceClaim;

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

/// A source of ResourceClaim objects.
pub trait ClaimSource: Send + Sync {
    /// The claim `claim` names, or why it cannot be had.
    fn claim(&self, claim: &ClaimRef) -> Result<ResourceClaim, String>;
}

/// Claims read from `<dir>/<namespace>/<name>.json`, each a ResourceClaim
/// object as `kubectl get resourceclaim -o json` prints it.
#[derive(Debug, Clone)]
pub struct ClaimDir(pub PathBuf);

impl ClaimSource for ClaimDir {
    fn claim(&self, claim: &ClaimRef) -> Result<ResourceClaim, String> {
        let path = self
            .0
            .join(&claim.namespace)
            .join(format!("{}.json", claim.name));
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}
