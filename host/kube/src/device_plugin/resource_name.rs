//! The resource names the kubelet registers: checked at start, so a name it
//! would refuse stops the plugin at once instead of a registration retried
//! forever.
//!
//! The kubelet's rule (k8s.io/kubernetes v1.37.2): its registration server
//! refuses a RegisterRequest whose resource name is not an extended resource
//! name (`pkg/kubelet/cm/devicemanager/plugin/v1beta1/server.go:170`,
//! `v1helper.IsExtendedResourceName`, `pkg/apis/core/v1/helper/helpers.go:39`).
//! That holds when all of these do:
//! - the name is not native (`IsNativeResource`, helpers.go:60): it contains
//!   a `/`, and it does not contain `kubernetes.io/` anywhere
//!   (`IsPrefixedNativeResource`, helpers.go:53, a substring test: so
//!   `kubernetes.io/x`, `foo.kubernetes.io/x` and even `notkubernetes.io/x`
//!   are refused);
//! - it does not start with `requests.` (`DefaultResourceRequestsPrefix`,
//!   which quotas use);
//! - `requests.` followed by the name is a qualified name (k8s.io/apimachinery
//!   v0.37.2 `pkg/util/validation` `IsQualifiedName`, which is
//!   `pkg/api/validate/content/kube.go:43` `IsLabelKey`): at most one `/`;
//!   the part before it (here `requests.` and the domain) a lowercase RFC 1123
//!   subdomain of at most 253 characters (`content/dns.go:84`: labels of
//!   lowercase letters, digits and `-`, starting and ending with a letter or
//!   digit, joined by `.`; only the whole length is bounded, not each
//!   label's), so the domain is such a subdomain of at most 244 characters;
//!   the part after it 1 to 63 letters, digits, `-`, `_` or `.`, starting and
//!   ending with a letter or digit (kube.go:24-28).

use p2p_allocation::dra::names::is_dns_label;

/// Quota's prefix, which the kubelet puts before the name to check it.
const REQUESTS: &str = "requests.";
/// The longest subdomain (apimachinery's `DNS1123SubdomainMaxLength`).
const MAX_SUBDOMAIN: usize = 253;
/// The longest name part of a qualified name (apimachinery's `labelKeyMaxLength`).
const MAX_NAME: usize = 63;

/// Why the kubelet would refuse a resource name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceNameError {
    /// No `/`: a name without a domain is one of Kubernetes' own.
    #[error(
        "no domain: want DOMAIN/NAME, e.g. vp2p.io/gpu (a name without one is Kubernetes' own)"
    )]
    NoDomain,
    /// In the `kubernetes.io/` namespace.
    #[error("it contains \"kubernetes.io/\": that namespace is Kubernetes' own")]
    Kubernetes,
    /// Starts with `requests.`.
    #[error("it starts with \"requests.\", which is for quotas")]
    Requests,
    /// More than one `/`.
    #[error("more than one '/': want DOMAIN/NAME")]
    Slashes,
    /// The domain is not a lowercase DNS subdomain short enough.
    #[error(
        "the domain {0:?} is not a lowercase DNS subdomain of at most {max} characters \
         (labels of a-z, 0-9 and '-', starting and ending with a letter or digit, joined by '.')",
        max = MAX_SUBDOMAIN - REQUESTS.len()
    )]
    Domain(String),
    /// The part after the `/` is not a qualified name's name part.
    #[error(
        "the name {0:?} after the domain is not 1 to {MAX_NAME} characters of A-Z, a-z, 0-9, \
         '-', '_' and '.', starting and ending with a letter or digit"
    )]
    Name(String),
}

/// A resource name the kubelet's registration server refuses, with why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{name:?} is not an extended resource name, which the kubelet requires to register a device \
     plugin (IsExtendedResourceName): {why}"
)]
pub struct InvalidResourceName {
    /// The name refused.
    pub name: String,
    /// Which part of the rule it breaks.
    pub why: ResourceNameError,
}

/// Checks `name` by the kubelet's rule (see the module's documentation).
pub fn check_resource_name(name: &str) -> Result<(), InvalidResourceName> {
    why(name).map_err(|why| InvalidResourceName {
        name: name.to_string(),
        why,
    })
}

fn why(name: &str) -> Result<(), ResourceNameError> {
    let Some((domain, rest)) = name.split_once('/') else {
        return Err(ResourceNameError::NoDomain);
    };
    if name.contains("kubernetes.io/") {
        return Err(ResourceNameError::Kubernetes);
    }
    if name.starts_with(REQUESTS) {
        return Err(ResourceNameError::Requests);
    }
    if rest.contains('/') {
        return Err(ResourceNameError::Slashes);
    }
    let prefixed = format!("{REQUESTS}{domain}");
    if prefixed.len() > MAX_SUBDOMAIN
        || !prefixed.split('.').all(|l| is_dns_label(l, MAX_SUBDOMAIN))
    {
        return Err(ResourceNameError::Domain(domain.to_string()));
    }
    if !is_name_part(rest) {
        return Err(ResourceNameError::Name(rest.to_string()));
    }
    Ok(())
}

/// A qualified name's name part: 1 to 63 of `[-A-Za-z0-9_.]`, starting and
/// ending with `[A-Za-z0-9]`.
fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    let end = |c: &u8| c.is_ascii_alphanumeric();
    !b.is_empty()
        && b.len() <= MAX_NAME
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b.first().is_some_and(end)
        && b.last().is_some_and(end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ResourceNameError as E;

    fn verdict(name: &str) -> Result<(), ResourceNameError> {
        check_resource_name(name).map_err(|e| e.why)
    }

    /// A domain of `len` characters (at least 187): labels of 61 and one
    /// shorter, so that only the whole length can be at fault.
    fn long_domain(len: usize) -> String {
        let d = format!("{}.{}.{}.", "a".repeat(61), "b".repeat(61), "c".repeat(61));
        let domain = format!("{d}{}", "d".repeat(len - d.len()));
        assert_eq!(domain.len(), len);
        domain
    }

    /// Names the kubelet registers, each from a clause of the rule.
    #[test]
    fn accepted() {
        for name in [
            "vp2p.io/gpu",
            "vp2p.io/nvme",
            // The name part allows upper case, '_' and '.'.
            "nvidia.com/GH100_H100_SXM5_80GB",
            "vp2p.io/a.b-c_d",
            "vp2p.io/g",
            // A one-label domain, digits, '-' inside labels.
            "vp2p/gpu",
            "0x-1.example-2.io/9",
            // Only "kubernetes.io/" is Kubernetes': k8s.io, and the string
            // without the '/' in the name part or inside the domain, are not.
            "k8s.io/gpu",
            "example.com/kubernetes.io",
            "kubernetes.io.example.com/gpu",
            // "requests." only as a prefix of the whole name.
            "example.requests.io/gpu",
        ] {
            assert_eq!(verdict(name), Ok(()), "{name}");
        }
        // The longest name part, 63 characters.
        assert_eq!(verdict(&format!("vp2p.io/{}", "g".repeat(63))), Ok(()));
        // The subdomain is bounded as a whole (253 with "requests."), not by
        // label: a 70-character label, and 244 characters in all.
        assert_eq!(verdict(&format!("{}.io/gpu", "a".repeat(70))), Ok(()));
        let domain = long_domain(244);
        assert_eq!(verdict(&format!("{domain}/gpu")), Ok(()));
    }

    /// Names the kubelet refuses, with the clause each breaks.
    #[test]
    fn refused() {
        let d = |s: &str| E::Domain(s.to_string());
        let n = |s: &str| E::Name(s.to_string());
        let cases: Vec<(String, ResourceNameError)> = vec![
            ("nvme".into(), E::NoDomain),
            ("".into(), E::NoDomain),
            ("vp2p.io_gpu".into(), E::NoDomain),
            ("kubernetes.io/gpu".into(), E::Kubernetes),
            ("example.kubernetes.io/gpu".into(), E::Kubernetes),
            // A substring test: a domain merely ending so is refused too.
            ("notkubernetes.io/gpu".into(), E::Kubernetes),
            ("requests.vp2p.io/gpu".into(), E::Requests),
            ("vp2p.io/a/b".into(), E::Slashes),
            ("/gpu".into(), d("")),
            ("Vp2p.io/gpu".into(), d("Vp2p.io")),
            ("vp2p_io/gpu".into(), d("vp2p_io")),
            ("-vp2p.io/gpu".into(), d("-vp2p.io")),
            ("vp2p.io-/gpu".into(), d("vp2p.io-")),
            ("vp2p..io/gpu".into(), d("vp2p..io")),
            ("vp2p.io./gpu".into(), d("vp2p.io.")),
            ("vp2p.io/".into(), n("")),
            ("vp2p.io/-gpu".into(), n("-gpu")),
            ("vp2p.io/gpu_".into(), n("gpu_")),
            ("vp2p.io/gpu.".into(), n("gpu.")),
            ("vp2p.io/g pu".into(), n("g pu")),
            ("vp2p.io/gpü".into(), n("gpü")),
        ];
        for (name, want) in cases {
            assert_eq!(verdict(&name), Err(want), "{name:?}");
        }
        // One character past each bound.
        let long = "g".repeat(64);
        assert_eq!(verdict(&format!("vp2p.io/{long}")), Err(n(&long)));
        let domain = long_domain(245);
        assert_eq!(verdict(&format!("{domain}/gpu")), Err(d(&domain)));
    }

    #[test]
    fn the_message_names_the_rule_and_the_reason() {
        let e = check_resource_name("nvme").unwrap_err();
        assert_eq!(
            e.to_string(),
            "\"nvme\" is not an extended resource name, which the kubelet requires to register a \
             device plugin (IsExtendedResourceName): no domain: want DOMAIN/NAME, e.g. vp2p.io/gpu \
             (a name without one is Kubernetes' own)"
        );
    }
}
