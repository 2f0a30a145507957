//! What a logical cluster's workspace policy means for placement: which physical clusters
//! it may use, and each workspace's quota there against what its subtree uses. Pure, over
//! the `Workspace` objects of the path (the API server's admission applies the same rules
//! to a namespace pinned by hand).

use std::collections::BTreeMap;

use serde_json::Value;
use sluice_api::tenancy::{EffectivePolicy, WorkspacePolicy};
use sluice_api::{ClusterName, LogicalClusterPath};
use sluice_kube::resources::{Limits, Resources};
use sluice_kube::selector::Selector;

use crate::schedule::Quota;

/// A `Workspace` object's `spec.policy`, if it has one that reads.
pub fn policy_of(workspace: &Value) -> Option<WorkspacePolicy> {
    let p = &workspace["spec"]["policy"];
    (!p.is_null())
        .then(|| serde_json::from_value(p.clone()).ok())
        .flatten()
}

/// The effective policy of `path`, given `own(parent, name)`: the policy of workspace
/// `name` in `parent`. The root's is unrestricted.
pub fn effective(
    path: &LogicalClusterPath,
    own: &impl Fn(&LogicalClusterPath, &str) -> Option<WorkspacePolicy>,
) -> EffectivePolicy {
    match path.parent() {
        None => EffectivePolicy::unrestricted(),
        Some((parent, name)) => effective(&parent, own).child(path, own(&parent, name).as_ref()),
    }
}

/// Whether a cluster labelled `labels` is one `policy` lets its workspace use: it matches
/// every selector of the chain. A selector that does not parse matches nothing (admission
/// refuses such a policy; an old one must not open every cluster).
pub fn cluster_allowed(policy: &EffectivePolicy, labels: &BTreeMap<String, String>) -> bool {
    policy
        .cluster_selectors
        .iter()
        .all(|s| Selector::parse(s).is_ok_and(|s| s.matches(labels)))
}

/// What each workspace, with those below it, uses on each cluster.
#[derive(Default, Debug)]
pub struct WorkspaceUsage(BTreeMap<(LogicalClusterPath, ClusterName), Resources>);

impl WorkspaceUsage {
    /// Count `used` of a namespace of `path` on `cluster` for every workspace above it.
    pub fn add(&mut self, path: &LogicalClusterPath, cluster: &ClusterName, used: Resources) {
        let mut level = path.clone();
        while let Some((parent, _)) = level.parent() {
            let u = self.0.entry((level.clone(), cluster.clone())).or_default();
            *u = *u + used;
            level = parent;
        }
    }

    /// Take `used` of a namespace of `path` on `cluster` off every workspace above it.
    pub fn remove(&mut self, path: &LogicalClusterPath, cluster: &ClusterName, used: Resources) {
        let mut level = path.clone();
        while let Some((parent, _)) = level.parent() {
            let key = (level.clone(), cluster.clone());
            if let Some(u) = self.0.get_mut(&key) {
                *u = *u - used;
                if *u == Resources::default() {
                    self.0.remove(&key);
                }
            }
            level = parent;
        }
    }

    /// The quotas that bound a namespace of `policy`'s logical cluster on `cluster`, with
    /// what each workspace uses there apart from `mine`.
    pub fn quotas(
        &self,
        policy: &EffectivePolicy,
        cluster: &ClusterName,
        mine: Resources,
    ) -> Vec<Quota> {
        policy
            .cluster_quotas
            .iter()
            .map(|(workspace, q)| Quota {
                workspace: workspace.to_string(),
                limits: Limits::from_json(&serde_json::to_value(q).unwrap_or(Value::Null)),
                used: self
                    .0
                    .get(&(workspace.clone(), cluster.clone()))
                    .copied()
                    .unwrap_or_default()
                    - mine,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn path(p: &str) -> LogicalClusterPath {
        p.parse().unwrap()
    }

    #[test]
    fn a_quota_bounds_its_workspace_and_those_below_it_together() {
        let policies: BTreeMap<(String, String), WorkspacePolicy> = [
            (("root".into(), "a".into()), json!({"clusterQuota": {"pods": 4}, "clusterSelector": {"matchLabels": {"tier": "shared"}}})),
            (("root:a".into(), "b".into()), json!({"clusterQuota": {"pods": 3}})),
        ]
        .into_iter()
        .map(|(k, v)| (k, serde_json::from_value(v).unwrap()))
        .collect();
        let own = |parent: &LogicalClusterPath, name: &str| {
            policies
                .get(&(parent.to_string(), name.to_string()))
                .cloned()
        };
        let b = effective(&path("root:a:b"), &own);
        assert!(cluster_allowed(
            &b,
            &[("tier".into(), "shared".into())].into()
        ));
        assert!(!cluster_allowed(&b, &BTreeMap::new()));
        let east = ClusterName::new("east");
        let mut usage = WorkspaceUsage::default();
        let pods = |n: f64| Resources {
            pods: n,
            ..Default::default()
        };
        usage.add(&path("root:a:b"), &east, pods(2.0));
        usage.add(&path("root:a:c"), &east, pods(1.0));
        usage.add(&path("root"), &east, pods(9.0));
        let quotas = usage.quotas(&b, &east, pods(0.0));
        let seen: Vec<(String, f64)> = quotas
            .iter()
            .map(|q| (q.workspace.clone(), q.used.pods))
            .collect();
        // root:a counts both of its workspaces; root:a:b only its own; root none.
        assert_eq!(seen, [("root:a".into(), 3.0), ("root:a:b".into(), 2.0)]);
        assert!(quotas[0].limits.admits(&(quotas[0].used + pods(1.0))));
        assert!(!quotas[0].limits.admits(&(quotas[0].used + pods(2.0))));
    }
}
