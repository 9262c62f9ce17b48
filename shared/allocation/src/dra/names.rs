//! Kubernetes' name and value formats for what a ResourceSlice carries
//! (k8s.io/apimachinery validation: `IsDNS1123Label`, `IsDNS1123Subdomain`,
//! `IsCIdentifier`; limits from resource/v1 types.go, see the `api` module).

use super::api::{
    Device, DeviceAttribute, MAX_ATTRIBUTES_PER_DEVICE, MAX_DEVICE_NAME, MAX_DOMAIN, MAX_ID,
    MAX_VALUE,
};
use super::SliceError;
use p2p_topology::bdf::Bdf;

/// A DNS label (RFC 1123): 1 to `max` lowercase letters, digits and `-`,
/// starting and ending with a letter or digit.
pub fn is_dns_label(s: &str, max: usize) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= max
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// A DNS subdomain (RFC 1123): labels joined by `.`, at most `max` characters.
pub fn is_dns_subdomain(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && s.split('.').all(|l| is_dns_label(l, 63))
}

/// A C identifier of at most 32 characters: a letter or `_`, then letters,
/// digits and `_`.
pub fn is_c_identifier(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_ID
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// A qualified attribute name: `id`, or `domain/id` with a DNS-subdomain
/// domain of at most 63 characters.
pub fn is_qualified_name(s: &str) -> bool {
    match s.split_once('/') {
        Some((domain, id)) => is_dns_subdomain(domain, MAX_DOMAIN) && is_c_identifier(id),
        None => is_c_identifier(s),
    }
}

/// The device name for a PCI address: `gpu-0000-41-00-0` (a DNS label).
pub fn device_name(kind: &str, bdf: p2p_topology::Bdf) -> String {
    format!("{kind}-{}", bdf.to_string().replace([':', '.'], "-"))
}

/// Kubernetes' limits on one device: its name, the attribute count, every
/// attribute's name and value.
pub(super) fn check_device(d: &Device, bdf: Bdf) -> Result<(), SliceError> {
    let bad = |name: &str, value: String, why| SliceError::BadAttribute {
        device: d.name.clone(),
        name: name.to_string(),
        value,
        why,
    };
    if !is_dns_label(&d.name, MAX_DEVICE_NAME) {
        return Err(bad("(device name)", d.name.clone(), "not a DNS label"));
    }
    if d.attributes.len() > MAX_ATTRIBUTES_PER_DEVICE {
        return Err(SliceError::TooManyAttributes {
            device: d.name.clone(),
            bdf,
            count: d.attributes.len(),
        });
    }
    for (name, value) in &d.attributes {
        if !is_qualified_name(name) {
            return Err(bad(name, format!("{value:?}"), "the name is not a C identifier of at most 32 characters after a DNS subdomain of at most 63"));
        }
        if let DeviceAttribute::String(v) | DeviceAttribute::Version(v) = value {
            if v.len() > MAX_VALUE {
                return Err(bad(
                    name,
                    v.clone(),
                    "the value is longer than 64 characters",
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_rfc_1123_and_c_rules() {
        assert!(is_dns_label("gpu-0000-41-00-0", 63));
        assert!(!is_dns_label("-gpu", 63) && !is_dns_label("gpu-", 63));
        assert!(!is_dns_label("Gpu", 63) && !is_dns_label("", 63));
        assert!(is_dns_label(&"a".repeat(63), 63) && !is_dns_label(&"a".repeat(64), 63));
        assert!(is_dns_subdomain("gpu.vp2p.io", 63));
        assert!(!is_dns_subdomain("gpu..vp2p.io", 63) && !is_dns_subdomain("gpu.vp2p.io.", 63));
        assert!(is_c_identifier("cliquePix") && is_c_identifier("_x1"));
        assert!(!is_c_identifier("1x") && !is_c_identifier("a-b"));
        assert!(is_c_identifier(&"a".repeat(32)) && !is_c_identifier(&"a".repeat(33)));
        assert!(is_qualified_name("resource.kubernetes.io/pciBusID"));
        assert!(is_qualified_name("kind"));
        assert!(!is_qualified_name("Resource.io/x") && !is_qualified_name("a/b/c"));
        let bdf = "0000:41:00.0".parse().unwrap();
        assert_eq!(device_name("gpu", bdf), "gpu-0000-41-00-0");
    }
}
