//! A logical cluster's effective tenancy policy, read from the `Workspace` objects of its
//! path in the store (`sluice_api::tenancy` combines them): what admission enforces on a
//! tenant's writes before anything reaches a shared cluster.

use serde_json::Value;
use sluice_api::LogicalClusterPath;
use sluice_api::tenancy::{EffectivePolicy, WorkspacePolicy};

use crate::storage::{ResourcePrefix, Store};

/// The resource prefix of `Workspace` objects.
fn workspaces() -> ResourcePrefix {
    ResourcePrefix::new(sluice_api::sluice::GROUP, "workspaces")
}

/// The policy of `cluster`: the root's is unrestricted; each workspace below it is bounded
/// by its parent's. A workspace object that is missing (being created or deleted) counts
/// as one with no policy of its own: the defaults.
pub fn effective(store: &Store, cluster: &LogicalClusterPath) -> EffectivePolicy {
    match cluster.parent() {
        None => EffectivePolicy::unrestricted(),
        Some((parent, name)) => {
            let own = own_policy(store, &parent, name);
            effective(store, &parent).child(cluster, own.as_ref())
        }
    }
}

/// The `spec.policy` of workspace `name` in `parent`, if it has one that parses.
fn own_policy(store: &Store, parent: &LogicalClusterPath, name: &str) -> Option<WorkspacePolicy> {
    let entry = store.get(&workspaces().key(parent, None, name))?;
    let obj: Value = serde_json::from_slice(&entry.value).ok()?;
    policy_of(&obj)
}

/// A Workspace object's `spec.policy`.
pub fn policy_of(obj: &Value) -> Option<WorkspacePolicy> {
    let p = &obj["spec"]["policy"];
    if p.is_null() {
        return None;
    }
    serde_json::from_value(p.clone()).ok()
}

/// Whether a physical cluster labelled `labels` is one `policy` lets its workspace use:
/// it matches every cluster selector of the chain (a selector that does not parse matches
/// nothing: validation refuses such a policy, and an old one must not open everything).
pub fn cluster_allowed(
    policy: &EffectivePolicy,
    labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    policy
        .cluster_selectors
        .iter()
        .all(|s| sluice_kube::selector::Selector::parse(s).is_ok_and(|s| s.matches(labels)))
}
