//! Objects of the kinds that travel follow their namespace: they carry its downstream name
//! (`sluice.dev/downstream-namespace`) and its state labels (`state.sluice.dev/<cluster>`),
//! and keep no sync finalizer nor status report of a cluster it is not placed on. The API
//! server owns these fields alone: [`StateLabels`] stamps every object created or replaced,
//! [`FollowingObjects`] restamps a namespace's objects once a change of its placement
//! commits, and [`restamp_objects`] does it for a custom kind newly marked syncable. So a
//! syncer never sees an object of a placed namespace without its placement, nor one that
//! claims a placement of its own, and the placement controller watches only what it
//! decides on (workloads, Services, namespaces), not every object it places.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use sluice_api::sync::{
    ANNOTATION_DOWNSTREAM_NAMESPACE, STATE_LABEL_PREFIX, STATE_SYNC, STATUS_ANNOTATION_PREFIX,
    SYNC_FINALIZER_PREFIX, placed_clusters, state_label,
};
use sluice_api::synced_kinds::SyncedKind;
use sluice_api::{ClusterName, LogicalClusterPath};

use crate::admission::downstream_names;
use crate::admission::restamp::{Stored, settle};
use crate::errors::{ApiError, ApiResult};
use crate::pipeline::hooks::{Committed, Hook, HookCx, HookFuture};
use crate::resources::{ResourceType, Subresource};
use crate::state::write_state::WriteState;
use crate::storage::{Key, Revision, StorageError};

/// How often one object is read again when a write raced its restamp.
const RETRIES: usize = 8;

/// What a namespace's objects carry of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Follows {
    /// Its name in every physical cluster.
    pub downstream: String,
    /// The clusters it is placed on.
    pub clusters: Vec<ClusterName>,
}

impl Follows {
    /// Of namespace `namespace` of `cluster`, as stored now.
    fn of(state: &WriteState, cluster: &LogicalClusterPath, namespace: &str) -> Self {
        let stored = state.namespace(cluster, namespace);
        Self {
            downstream: downstream_names::of_stored(state, cluster, namespace, stored.as_deref()),
            clusters: placement_of(stored.as_deref()),
        }
    }
}

/// The clusters namespace `ns` (as stored, if it is) is placed on: its state labels. (Of
/// any object, the clusters its state labels name.)
fn placement_of(ns: Option<&Value>) -> Vec<ClusterName> {
    let labels = ns.and_then(|v| v["metadata"]["labels"].as_object());
    placed_clusters(labels.into_iter().flatten().filter_map(|(k, v)| match v {
        Value::String(v) => Some((k, v)),
        _ => None,
    }))
}

/// Whether objects of `t` travel with their namespace (and so follow it).
pub fn travels(t: &ResourceType) -> bool {
    SyncedKind::find(&t.group, &t.resource).is_some() || t.custom().is_some_and(|c| c.syncable)
}

/// Whether `obj`, of `t`, is a Pod a syncer mirrored up: it runs where it runs and has no
/// placement of its own.
fn is_mirror(t: &ResourceType, obj: &Value) -> bool {
    SyncedKind::find(&t.group, &t.resource).is_some_and(|k| {
        k.is_mirror(
            obj["metadata"]["labels"]
                .as_object()
                .into_iter()
                .flat_map(|l| l.keys()),
        )
    })
}

/// Make `obj` follow its namespace: its downstream name; unless it is a mirror, the state
/// labels of `follows.clusters` and no others, and no sync finalizer nor status report of
/// another cluster. True when it changed.
pub fn follow(obj: &mut Value, follows: &Follows, mirror: bool) -> bool {
    if !obj.is_object() {
        return false;
    }
    // Only the metadata changes: compare that, not a copy of the whole object (a Secret's
    // or ConfigMap's data may be large, and admission runs this on every write).
    let before = obj.get("metadata").cloned();
    crate::object::set_annotation(obj, ANNOTATION_DOWNSTREAM_NAMESPACE, &follows.downstream);
    if mirror {
        return obj.get("metadata") != before.as_ref();
    }
    let placed = |c: &str| follows.clusters.iter().any(|p| p.as_str() == c);
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return obj.get("metadata") != before.as_ref();
    };
    let labels = meta
        .entry("labels")
        .or_insert_with(|| Value::Object(Default::default()));
    if let Some(labels) = labels.as_object_mut() {
        labels.retain(|k, _| !k.starts_with(STATE_LABEL_PREFIX));
        for c in &follows.clusters {
            labels.insert(state_label(c), Value::from(STATE_SYNC));
        }
        if labels.is_empty() {
            meta.remove("labels");
        }
    }
    if let Some(list) = meta.get_mut("finalizers").and_then(Value::as_array_mut) {
        list.retain(|f| {
            f.as_str()
                .and_then(|f| f.strip_prefix(SYNC_FINALIZER_PREFIX))
                .is_none_or(placed)
        });
    }
    if let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
        annotations.retain(|k, _| k.strip_prefix(STATUS_ANNOTATION_PREFIX).is_none_or(placed));
    }
    obj.get("metadata") != before.as_ref()
}

/// Stamps each object of a kind that travels, as it is created or replaced, with what its
/// namespace holds now.
pub struct StateLabels;

impl StateLabels {
    fn follow_namespace(cx: &HookCx<'_>, obj: &mut Value) {
        let Some(ns) = obj["metadata"]["namespace"].as_str().map(str::to_string) else {
            return;
        };
        let follows = Follows::of(cx.state, cx.cluster, &ns);
        let mirror = is_mirror(cx.t, obj);
        follow(obj, &follows, mirror);
    }
}

impl Hook for StateLabels {
    fn admit_create(&self, cx: &HookCx<'_>, obj: &mut Value) -> ApiResult<()> {
        Self::follow_namespace(cx, obj);
        Ok(())
    }

    fn admit_update(
        &self,
        cx: &HookCx<'_>,
        _old: &Value,
        new: &mut Value,
        sub: Option<Subresource>,
    ) -> ApiResult<()> {
        if sub.is_none() {
            Self::follow_namespace(cx, new);
        }
        Ok(())
    }

    /// The write was admitted with what its namespace held then; if the namespace's
    /// placement changed before the write committed, its restamp may have missed this
    /// object, so it is looked at again. (One of the two always sees the other: this check
    /// runs after the object's commit, the namespace's restamp after the namespace's.)
    fn committed<'a>(&'a self, cx: &'a HookCx<'a>, what: Committed<'a>) -> HookFuture<'a> {
        Box::pin(async move {
            let Committed::Written { new, .. } = what else {
                return Ok(());
            };
            let (Some(ns), Some(name)) = (
                new["metadata"]["namespace"].as_str(),
                crate::object::name(new),
            ) else {
                return Ok(());
            };
            let follows = Follows::of(cx.state, cx.cluster, ns);
            let current = new["metadata"]["annotations"][ANNOTATION_DOWNSTREAM_NAMESPACE].as_str()
                == Some(follows.downstream.as_str())
                && (is_mirror(cx.t, new) || placement_of(Some(new)) == follows.clusters);
            if current {
                return Ok(());
            }
            let key = cx.t.prefix.key(cx.cluster, Some(ns), name);
            let Some(entry) = cx.state.store.get(&key) else {
                return Ok(());
            };
            let mut namespaces = BTreeMap::from([(ns.to_string(), follows)]);
            restamp_one(
                cx.state,
                cx.t,
                cx.cluster,
                key,
                entry.revision,
                entry.value.clone(),
                &mut namespaces,
            )
            .await
            .map(|_| ())
            .map_err(|e| ApiError::Internal(format!("restamping {name}: {e}")))
        })
    }
}

/// Restamps a namespace's objects once a change of its placement (its state labels) or of
/// its downstream name is committed.
pub struct FollowingObjects;

/// What of namespace `ns` its objects follow, apart from the server's key.
fn followed(ns: &Value) -> (Vec<ClusterName>, Option<&str>) {
    (
        placement_of(Some(ns)),
        ns["metadata"]["annotations"][ANNOTATION_DOWNSTREAM_NAMESPACE].as_str(),
    )
}

impl Hook for FollowingObjects {
    fn committed<'a>(&'a self, cx: &'a HookCx<'a>, what: Committed<'a>) -> HookFuture<'a> {
        Box::pin(async move {
            // A new namespace has no objects yet.
            let Committed::Written {
                new,
                old: Some(old),
            } = what
            else {
                return Ok(());
            };
            if followed(new) == followed(old) {
                return Ok(());
            }
            let Some(ns) = crate::object::name(new) else {
                return Ok(());
            };
            let types: Vec<Arc<ResourceType>> = cx
                .state
                .crds
                .catalog(cx.cluster)
                .types()
                .iter()
                .filter(|t| t.namespaced && travels(t))
                .cloned()
                .collect();
            let n = restamp_objects(cx.state, cx.cluster, &types, Some(ns))
                .await
                .map_err(|e| {
                    ApiError::Internal(format!("restamping the objects of namespace {ns}: {e}"))
                })?;
            tracing::debug!(logical_cluster = %cx.cluster, namespace = ns, restamped = n,
                "objects follow their namespace");
            Ok(())
        })
    }
}

/// Make the stored objects of `types` in `cluster` — in `namespace`, or in every namespace
/// when `None` — follow their namespace as it is stored now. Returns how many were written.
/// An object written meanwhile is read again: that write may have been admitted with what
/// its namespace held before.
pub async fn restamp_objects(
    state: &WriteState,
    cluster: &LogicalClusterPath,
    types: &[Arc<ResourceType>],
    namespace: Option<&str>,
) -> Result<usize, StorageError> {
    let mut namespaces: BTreeMap<String, Follows> = BTreeMap::new();
    let mut written = 0;
    let mut seen = std::collections::BTreeSet::new();
    for t in types {
        if !seen.insert(t.prefix.as_str().to_string()) {
            continue;
        }
        let mut found: Vec<(Key, Revision, bytes::Bytes)> = Vec::new();
        state
            .store
            .scan(&t.prefix.scope(Some(cluster), namespace), None, |k, e| {
                found.push((k.clone(), e.revision, e.value.clone()));
                true
            });
        for (key, revision, value) in found {
            if restamp_one(state, t, cluster, key, revision, value, &mut namespaces).await? {
                written += 1;
            }
        }
    }
    Ok(written)
}

/// Make the object stored at `key` (read at `revision` as `value`) follow its namespace,
/// reading it again while writes race; true when it was written. `namespaces` caches what
/// each namespace holds.
async fn restamp_one(
    state: &WriteState,
    t: &ResourceType,
    cluster: &LogicalClusterPath,
    key: Key,
    mut revision: Revision,
    mut value: bytes::Bytes,
    namespaces: &mut BTreeMap<String, Follows>,
) -> Result<bool, StorageError> {
    for _ in 0..RETRIES {
        let Ok(mut obj) = serde_json::from_slice::<Value>(&value) else {
            return Ok(false);
        };
        let Some(ns) = obj["metadata"]["namespace"].as_str().map(str::to_string) else {
            return Ok(false);
        };
        let follows = namespaces
            .entry(ns.clone())
            .or_insert_with(|| Follows::of(state, cluster, &ns));
        let mirror = is_mirror(t, &obj);
        if !follow(&mut obj, follows, mirror) {
            return Ok(false);
        }
        let s = Stored {
            key: key.clone(),
            revision,
            path: cluster.clone(),
            obj,
        };
        if settle(state, &s).await? {
            return Ok(true);
        }
        match state.store.get(&key) {
            Some(e) => (revision, value) = (e.revision, e.value.clone()),
            None => return Ok(false),
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn follows(clusters: &[&str]) -> Follows {
        Follows {
            downstream: "down".into(),
            clusters: clusters.iter().map(|c| ClusterName::new(*c)).collect(),
        }
    }

    #[test]
    fn objects_follow_their_namespace_and_drop_what_clusters_they_left_held() {
        let mut obj = json!({"metadata": {
            "name": "web",
            "labels": {"app": "web", "state.sluice.dev/east": "Sync"},
            "annotations": {"status.sluice.dev/east": "{}", "status.sluice.dev/west": "{}",
                "other": "kept"},
            "finalizers": ["syncer.sluice.dev/east", "syncer.sluice.dev/west", "example.com/mine"],
        }});
        assert!(follow(&mut obj, &follows(&["west"]), false));
        let meta = &obj["metadata"];
        assert_eq!(
            meta["labels"],
            json!({"app": "web", "state.sluice.dev/west": "Sync"})
        );
        assert_eq!(
            meta["finalizers"],
            json!(["syncer.sluice.dev/west", "example.com/mine"])
        );
        assert_eq!(
            meta["annotations"],
            json!({"status.sluice.dev/west": "{}", "other": "kept",
                "sluice.dev/downstream-namespace": "down"})
        );
        // Right already: nothing to write.
        assert!(!follow(&mut obj, &follows(&["west"]), false));
    }

    #[test]
    fn unplaced_objects_lose_every_state_label_and_mirrors_keep_theirs() {
        let mut obj = json!({"metadata": {"name": "a",
            "labels": {"state.sluice.dev/east": "Sync"},
            "annotations": {"sluice.dev/downstream-namespace": "down"}}});
        assert!(follow(&mut obj, &follows(&[]), false));
        assert!(obj["metadata"].get("labels").is_none());
        let mut mirror = json!({"metadata": {"name": "p",
            "labels": {"sluice.dev/cluster": "east"},
            "annotations": {"status.sluice.dev/east": "{}",
                "sluice.dev/downstream-namespace": "down"}}});
        assert!(!follow(&mut mirror, &follows(&["west"]), true));
    }

    #[test]
    fn any_text_is_safe() {
        for odd in [
            json!(null),
            json!([]),
            json!({"metadata": 3}),
            json!({"metadata": {"labels": "x", "finalizers": {}, "annotations": []}}),
        ] {
            let mut v = odd.clone();
            follow(&mut v, &follows(&["east"]), false);
        }
    }
}
