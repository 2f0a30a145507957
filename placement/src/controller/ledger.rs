//! What placement has counted on each cluster: the namespaces placed there and what their
//! workloads request, kept current key by key as each namespace is reconciled (and built
//! once from the stores at start). A namespace's decision reads the others' totals here
//! instead of summing every namespace again, so a reconcile costs what its namespace has.

use std::collections::{BTreeMap, BTreeSet};

use sluice_api::{ClusterName, LogicalClusterPath};
use sluice_kube::resources::Resources;

use crate::tenancy::WorkspaceUsage;

/// A namespace of a logical cluster.
pub(crate) type NsKey = (LogicalClusterPath, String);

#[derive(Default)]
pub(crate) struct Ledger {
    /// Where each placed namespace runs, and what it requests on each of those clusters
    /// (namespaces placed nowhere have no entry).
    placed: BTreeMap<NsKey, Vec<(ClusterName, Resources)>>,
    on: BTreeMap<ClusterName, BTreeSet<NsKey>>,
    allocated: BTreeMap<ClusterName, Resources>,
    usage: WorkspaceUsage,
    /// Namespaces on more than one cluster (spread, spilled or moving).
    several: BTreeSet<NsKey>,
    /// Namespaces whose last decision was not at rest (pending, moving, shifting, held,
    /// rolled back): a change to any cluster may change theirs.
    unsettled: BTreeSet<NsKey>,
    /// Namespaces waiting for a drain slot.
    drain_queued: BTreeSet<NsKey>,
}

impl Ledger {
    /// Record that `key` runs on `placed` (each cluster with what it requests there); the
    /// clusters whose totals changed.
    pub(crate) fn set(
        &mut self,
        key: &NsKey,
        placed: Vec<(ClusterName, Resources)>,
    ) -> BTreeSet<ClusterName> {
        let old = self.placed.remove(key).unwrap_or_default();
        if old == placed {
            if !placed.is_empty() {
                self.placed.insert(key.clone(), placed);
            }
            return BTreeSet::new();
        }
        let mut changed = BTreeSet::new();
        for (c, d) in &old {
            changed.insert(c.clone());
            let a = self.allocated.entry(c.clone()).or_default();
            *a = *a - *d;
            self.usage.remove(&key.0, c, *d);
            if let Some(on) = self.on.get_mut(c) {
                on.remove(key);
                if on.is_empty() {
                    self.on.remove(c);
                    self.allocated.remove(c);
                }
            }
        }
        for (c, d) in &placed {
            changed.insert(c.clone());
            let a = self.allocated.entry(c.clone()).or_default();
            *a = *a + *d;
            self.usage.add(&key.0, c, *d);
            self.on.entry(c.clone()).or_default().insert(key.clone());
        }
        if placed.len() > 1 {
            self.several.insert(key.clone());
        } else {
            self.several.remove(key);
        }
        if !placed.is_empty() {
            self.placed.insert(key.clone(), placed);
        }
        changed
    }

    /// `key` is gone: nothing of it counts anywhere; the clusters whose totals changed.
    pub(crate) fn forget(&mut self, key: &NsKey) -> BTreeSet<ClusterName> {
        self.unsettled.remove(key);
        self.drain_queued.remove(key);
        self.set(key, Vec::new())
    }

    /// What `key` requests on `cluster` as counted.
    pub(crate) fn mine(&self, key: &NsKey, cluster: &ClusterName) -> Resources {
        self.placed
            .get(key)
            .and_then(|p| p.iter().find(|(c, _)| c == cluster))
            .map(|(_, d)| *d)
            .unwrap_or_default()
    }

    /// How many namespaces run on `cluster`.
    pub(crate) fn load(&self, cluster: &ClusterName) -> usize {
        self.on.get(cluster).map_or(0, BTreeSet::len)
    }

    /// What the namespaces on `cluster` request together.
    pub(crate) fn allocated(&self, cluster: &ClusterName) -> Resources {
        self.allocated.get(cluster).copied().unwrap_or_default()
    }

    pub(crate) fn usage(&self) -> &WorkspaceUsage {
        &self.usage
    }

    /// The namespaces on `cluster`.
    pub(crate) fn on(&self, cluster: &ClusterName) -> impl Iterator<Item = &NsKey> {
        self.on.get(cluster).into_iter().flatten()
    }

    /// Every namespace placed somewhere.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &NsKey> {
        self.placed.keys()
    }

    /// Namespaces moving off a `draining` cluster now (on it and on another).
    pub(crate) fn moving_off(&self, draining: &BTreeSet<ClusterName>) -> usize {
        self.several
            .iter()
            .filter(|k| {
                self.placed
                    .get(*k)
                    .is_some_and(|p| p.iter().any(|(c, _)| draining.contains(c)))
            })
            .count()
    }

    /// Whether `key`'s last decision left it at rest.
    pub(crate) fn settle(&mut self, key: &NsKey, settled: bool) {
        if settled {
            self.unsettled.remove(key);
        } else {
            self.unsettled.insert(key.clone());
        }
    }

    pub(crate) fn unsettled(&self) -> impl Iterator<Item = &NsKey> {
        self.unsettled.iter()
    }

    /// Whether `key` waits for a drain slot.
    pub(crate) fn queue_for_drain(&mut self, key: &NsKey, queued: bool) {
        if queued {
            self.drain_queued.insert(key.clone());
        } else {
            self.drain_queued.remove(key);
        }
    }

    /// The namespaces waiting for a drain slot (they queue again if still waiting).
    pub(crate) fn take_drain_queue(&mut self) -> BTreeSet<NsKey> {
        std::mem::take(&mut self.drain_queued)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(path: &str, ns: &str) -> NsKey {
        (path.parse().unwrap(), ns.to_string())
    }

    fn pods(n: f64) -> Resources {
        Resources {
            pods: n,
            ..Default::default()
        }
    }

    #[test]
    fn totals_follow_each_namespace_as_it_is_placed_moved_and_forgotten() {
        let (east, west) = (ClusterName::new("east"), ClusterName::new("west"));
        let mut l = Ledger::default();
        let (a, b) = (key("root:t", "a"), key("root:t", "b"));
        assert_eq!(
            l.set(&a, vec![(east.clone(), pods(2.0))]),
            [east.clone()].into()
        );
        l.set(&b, vec![(east.clone(), pods(3.0))]);
        assert_eq!((l.load(&east), l.allocated(&east).pods), (2, 5.0));
        // The same again changes no total.
        assert!(l.set(&a, vec![(east.clone(), pods(2.0))]).is_empty());
        // a moves: on both for a while, then on west alone.
        l.set(
            &a,
            vec![(east.clone(), pods(2.0)), (west.clone(), pods(2.0))],
        );
        let draining: BTreeSet<ClusterName> = [east.clone()].into();
        assert_eq!(l.moving_off(&draining), 1);
        assert_eq!(l.mine(&a, &west).pods, 2.0);
        l.set(&a, vec![(west.clone(), pods(2.0))]);
        assert_eq!(l.moving_off(&draining), 0);
        assert_eq!((l.load(&east), l.allocated(&east).pods), (1, 3.0));
        assert_eq!(l.on(&west).collect::<Vec<_>>(), [&a]);
        // Workspace usage counts it where it runs.
        let mut policy = sluice_api::tenancy::EffectivePolicy::unrestricted();
        policy.cluster_quotas = vec![("root:t".parse().unwrap(), Default::default())];
        let used = l.usage().quotas(&policy, &west, pods(0.0));
        assert_eq!(used[0].used.pods, 2.0);
        assert_eq!(l.forget(&b), [east.clone()].into());
        assert_eq!((l.load(&east), l.allocated(&east).pods), (0, 0.0));
        assert_eq!(l.keys().collect::<Vec<_>>(), [&a]);
    }

    #[test]
    fn unsettled_and_drain_queued_namespaces_are_remembered_until_forgotten() {
        let mut l = Ledger::default();
        let a = key("root:t", "a");
        l.settle(&a, false);
        l.queue_for_drain(&a, true);
        assert_eq!(l.unsettled().count(), 1);
        assert_eq!(l.take_drain_queue().len(), 1);
        assert!(l.take_drain_queue().is_empty());
        l.queue_for_drain(&a, true);
        l.forget(&a);
        assert_eq!(l.unsettled().count(), 0);
        assert!(l.take_drain_queue().is_empty());
    }
}
