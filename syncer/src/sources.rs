//! Which upstream namespace each downstream namespace holds. The control plane stamps on
//! every namespace of a logical cluster the name it has downstream
//! ([`ANNOTATION_DOWNSTREAM_NAMESPACE`]), and on the objects of the kinds that travel their
//! namespace's; the syncer learns the pairs from the events that name them and never
//! computes a name from what a tenant chose. A downstream namespace belongs to the first
//! upstream namespace that holds it: a second claim (names that collide) is refused —
//! counted, logged, and reported on the claimant upstream ([`Conflict`]) — never synced.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use prometheus_client::metrics::counter::Counter;
use sluice_api::sync::{
    ANNOTATION_LOGICAL_CLUSTER, ANNOTATION_UPSTREAM_NAMESPACE, downstream_namespace_of,
    stamped_downstream_namespace,
};
use sluice_api::{LOGICAL_CLUSTER_ANNOTATION, LogicalClusterPath};

/// A namespace of a logical cluster.
pub type Upstream = (LogicalClusterPath, String);

/// A second upstream namespace that names a downstream namespace already held.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Conflict {
    pub downstream: String,
    pub holder: Upstream,
    pub claimant: Upstream,
}

#[derive(Default)]
struct Known {
    /// Downstream namespace → the upstream namespace it holds.
    holders: HashMap<String, Upstream>,
    /// Upstream namespace → its stamped downstream name.
    names: HashMap<Upstream, String>,
    /// Claims refused, each reported once.
    conflicts: BTreeSet<Conflict>,
    reported: BTreeSet<Conflict>,
}

/// The syncer's map between downstream and upstream namespaces (shared by its informers'
/// event handlers and its rounds).
#[derive(Clone)]
pub struct Sources {
    known: Arc<Mutex<Known>>,
    conflicts: Counter,
}

impl Sources {
    /// `conflicts` counts refused claims.
    pub fn new(conflicts: Counter) -> Self {
        Self {
            known: Arc::default(),
            conflicts,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record that `up` names `down`: the key of the round it affects.
    fn claim(&self, up: Upstream, down: String) -> String {
        let holder = {
            let mut known = self.lock();
            match known.holders.get(&down) {
                Some(holder) if *holder != up => Some(holder.clone()),
                Some(_) => None,
                None => {
                    known.holders.insert(down.clone(), up.clone());
                    None
                }
            }
        };
        if let Some(holder) = holder {
            self.refuse(Conflict {
                downstream: down.clone(),
                holder,
                claimant: up,
            });
        }
        down
    }

    /// Refuse a claim on a downstream namespace another holds (counted and logged once).
    pub fn refuse(&self, conflict: Conflict) {
        if !self.lock().conflicts.insert(conflict.clone()) {
            return;
        }
        self.conflicts.inc();
        let Conflict {
            downstream,
            holder,
            claimant,
        } = &conflict;
        tracing::warn!(
            %downstream,
            holder = %format_args!("{}/{}", holder.0, holder.1),
            claimant = %format_args!("{}/{}", claimant.0, claimant.1),
            "a downstream namespace is named by a second upstream namespace: it is not synced"
        );
    }

    /// An upstream object read through the wildcard: its namespace's stamp (or its own),
    /// once either is known.
    pub fn learn(&self, meta: &ObjectMeta) -> Option<String> {
        let up = (logical_cluster_of(meta)?, meta.namespace.clone()?);
        let down = match self.lock().names.get(&up) {
            Some(d) => d.clone(),
            None => stamped_downstream_namespace(meta.annotations.as_ref())?.to_string(),
        };
        Some(self.claim(up, down))
    }

    /// An upstream namespace read through the wildcard: its stamp (a namespace without one
    /// predates stamps, and lives under the legacy name).
    pub fn learn_namespace(&self, meta: &ObjectMeta) -> Option<String> {
        let path = logical_cluster_of(meta)?;
        let name = meta.name.clone()?;
        let down = downstream_namespace_of(meta.annotations.as_ref(), &path, &name);
        let up = (path, name);
        self.lock().names.insert(up.clone(), down.clone());
        Some(self.claim(up, down))
    }

    /// Objects listed in upstream namespace `up` (no event of their own): its name when
    /// its namespace was seen.
    pub fn learn_listed(&self, up: Upstream) -> Option<String> {
        let down = self.lock().names.get(&up)?.clone();
        Some(self.claim(up, down))
    }

    /// A downstream namespace, and from its annotations what it holds.
    pub fn learn_downstream(&self, meta: &ObjectMeta) -> Option<String> {
        let name = meta.name.clone()?;
        if let Some(up) = owner_of(meta) {
            self.claim(up, name.clone());
        }
        Some(name)
    }

    /// Every downstream namespace known to hold something.
    pub fn downstream(&self) -> Vec<String> {
        self.lock().holders.keys().cloned().collect()
    }

    /// What downstream namespace `down` holds, when known.
    pub fn holder(&self, down: &str) -> Option<Upstream> {
        self.lock().holders.get(down).cloned()
    }

    /// Refused claims not reported yet; `reported` marks them so once told.
    pub fn unreported(&self) -> Vec<Conflict> {
        let known = self.lock();
        known
            .conflicts
            .difference(&known.reported)
            .cloned()
            .collect()
    }

    /// `c` was reported upstream.
    pub fn reported(&self, c: Conflict) {
        self.lock().reported.insert(c);
    }
}

/// The upstream namespace a downstream namespace says it holds (the syncer annotated it
/// when it made it).
pub fn owner_of(meta: &ObjectMeta) -> Option<Upstream> {
    let a = meta.annotations.as_ref()?;
    let path = a.get(ANNOTATION_LOGICAL_CLUSTER)?.parse().ok()?;
    Some((path, a.get(ANNOTATION_UPSTREAM_NAMESPACE)?.clone()))
}

/// The logical cluster of an object read through the wildcard.
pub fn logical_cluster_of(meta: &ObjectMeta) -> Option<LogicalClusterPath> {
    meta.annotations
        .as_ref()?
        .get(LOGICAL_CLUSTER_ANNOTATION)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_api::sync::{ANNOTATION_DOWNSTREAM_NAMESPACE, legacy_downstream_namespace};

    fn meta(path: &str, ns: Option<&str>, name: &str, stamp: Option<&str>) -> ObjectMeta {
        let mut a = std::collections::BTreeMap::new();
        a.insert(LOGICAL_CLUSTER_ANNOTATION.to_string(), path.to_string());
        if let Some(s) = stamp {
            a.insert(ANNOTATION_DOWNSTREAM_NAMESPACE.to_string(), s.to_string());
        }
        ObjectMeta {
            name: Some(name.into()),
            namespace: ns.map(str::to_string),
            annotations: Some(a),
            ..Default::default()
        }
    }

    #[test]
    fn names_come_from_stamps_and_a_second_claim_is_refused() {
        let counter = Counter::default();
        let s = Sources::new(counter.clone());
        // An object of an unseen namespace with no stamp of its own: nothing yet.
        assert_eq!(s.learn(&meta("root:a", Some("shop"), "web", None)), None);
        assert_eq!(
            s.learn_listed(("root:a".parse().unwrap(), "shop".into())),
            None
        );
        // Its namespace's stamp names it, for its objects too.
        let ns = meta("root:a", None, "shop", Some("shop-k3y3dk3y3dk3y3d"));
        assert_eq!(
            s.learn_namespace(&ns).as_deref(),
            Some("shop-k3y3dk3y3dk3y3d")
        );
        assert_eq!(
            s.learn(&meta("root:a", Some("shop"), "web", None))
                .as_deref(),
            Some("shop-k3y3dk3y3dk3y3d")
        );
        // A namespace without a stamp predates them: the legacy name.
        let old = meta("root:a", None, "old", None);
        assert_eq!(
            s.learn_namespace(&old),
            Some(legacy_downstream_namespace(
                &"root:a".parse().unwrap(),
                "old"
            ))
        );
        // Another tenant's namespace stamped with the same name (a collision): refused,
        // counted once, reported once.
        let thief = meta("root:b", None, "x", Some("shop-k3y3dk3y3dk3y3d"));
        s.learn_namespace(&thief);
        s.learn_namespace(&thief);
        assert_eq!(counter.get(), 1);
        let holder = s.holder("shop-k3y3dk3y3dk3y3d");
        assert_eq!(holder, Some(("root:a".parse().unwrap(), "shop".into())));
        let conflicts = s.unreported();
        assert_eq!(conflicts.len(), 1);
        assert_eq!(conflicts[0].claimant.1, "x");
        s.reported(conflicts[0].clone());
        assert!(s.unreported().is_empty());
    }
}
