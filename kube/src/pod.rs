//! What a Pod refers to, read from its spec.

use k8s_openapi::api::core::v1::Pod;

/// Whether `pod` mounts the PersistentVolumeClaim `claim` (of its namespace): the node
/// agent keeps a claim's volume while one does, and a syncer keeps a claim it made.
pub fn mounts_claim(pod: &Pod, claim: &str) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .any(|c| c.claim_name == claim)
}
