//! A logical cluster's effective tenancy policy, read from the `Workspace` objects of its
//! path in the store (placement's [`sluice_placement::tenancy`] combines them, as the
//! placement controllers do from their cache): what admission enforces on a tenant's
//! writes before anything reaches a shared cluster.

use serde_json::Value;
use sluice_api::LogicalClusterPath;
use sluice_api::tenancy::EffectivePolicy;
pub use sluice_placement::tenancy::cluster_allowed;

use crate::storage::{ResourcePrefix, Store};

/// The policy of `cluster`: the root's is unrestricted; each workspace below it is bounded
/// by its parent's. A workspace object that is missing (being created or deleted) counts
/// as one with no policy of its own: the defaults.
pub fn effective(store: &Store, cluster: &LogicalClusterPath) -> EffectivePolicy {
    let workspaces = ResourcePrefix::new(sluice_api::sluice::GROUP, "workspaces");
    sluice_placement::tenancy::effective(cluster, &|parent, name| {
        let entry = store.get(&workspaces.key(parent, None, name))?;
        let obj: Value = serde_json::from_slice(&entry.value).ok()?;
        sluice_placement::tenancy::policy_of(&obj)
    })
}
