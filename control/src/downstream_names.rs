//! The installation's key for downstream namespace names (see
//! [`crate::admission::downstream_names`], which stamps them): its own name and 80 bits of
//! an HMAC keyed with a secret of the installation, so no tenant can search offline for a
//! namespace name that lands in another's namespace on a shared cluster.

use ring::hmac;
use sluice_api::LogicalClusterPath;
use sluice_api::sync::{base32, downstream_name_with};

/// Base-32 characters of the keyed tag: 80 bits.
const TAG_CHARS: usize = 16;

/// The installation's key for downstream names.
pub struct DownstreamNames {
    key: hmac::Key,
}

impl DownstreamNames {
    /// A key derived from `secret`, a secret every replica of the control plane shares (the
    /// ServiceAccount signing key), so that replicas name alike and no new file is needed.
    pub fn derive(secret: &[u8]) -> Self {
        let root = hmac::Key::new(hmac::HMAC_SHA256, secret);
        let derived = hmac::sign(&root, b"sluice.dev/downstream-namespace v1");
        Self {
            key: hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref()),
        }
    }

    /// The key of the installation whose credentials are in `dir` (a data or PKI
    /// directory: its `service-account.key`), as its control plane derives it.
    pub fn load(dir: &std::path::Path) -> Result<Self, crate::pki::PkiError> {
        let path = dir.join("service-account.key");
        let pem = std::fs::read_to_string(&path)
            .map_err(|source| crate::pki::PkiError::Io { path, source })?;
        Ok(Self::derive(
            &rcgen::KeyPair::from_pem(&pem)?.serialize_der(),
        ))
    }

    /// The downstream name of a new namespace `namespace` of `path`.
    pub fn name(&self, path: &LogicalClusterPath, namespace: &str) -> String {
        let mut input = Vec::with_capacity(path.as_str().len() + namespace.len() + 1);
        input.extend_from_slice(path.as_str().as_bytes());
        input.push(0);
        input.extend_from_slice(namespace.as_bytes());
        let tag = hmac::sign(&self.key, &input);
        let mut bits = [0u8; 16];
        bits.copy_from_slice(&tag.as_ref()[..16]);
        downstream_name_with(namespace, &base32(u128::from_le_bytes(bits), TAG_CHARS))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_api::sync::legacy_downstream_namespace;

    fn path(s: &str) -> LogicalClusterPath {
        s.parse().expect("path")
    }

    #[test]
    fn names_are_keyed_labels_distinct_per_path_and_stable_per_key() {
        let a = DownstreamNames::derive(b"one installation");
        let b = DownstreamNames::derive(b"another installation");
        let n = a.name(&path("root:shop"), "default");
        assert!(sluice_api::logical_cluster::is_dns_label(&n), "{n}");
        assert!(n.starts_with("default-") && n.len() == "default-".len() + TAG_CHARS);
        assert_eq!(n, a.name(&path("root:shop"), "default"));
        assert_ne!(n, b.name(&path("root:shop"), "default"));
        assert_ne!(n, a.name(&path("root:sho"), "pdefault"));
        assert_ne!(
            n,
            legacy_downstream_namespace(&path("root:shop"), "default")
        );
        for odd in ["", "-", "ß", &"x".repeat(300), "a\0b"] {
            let d = a.name(&path("root"), odd);
            assert!(
                sluice_api::logical_cluster::is_dns_label(&d),
                "{odd:?} → {d}"
            );
        }
    }
}
