//! Downstream namespace names, chosen by the server: each Namespace of a logical cluster
//! is stamped, when it is created, with the name it has in every physical cluster — its
//! own name and 80 bits of an HMAC keyed with a secret of the installation — and keeps it
//! for life; the objects of the kinds that travel carry their namespace's stamp. A tenant
//! who picks namespace names cannot search offline for one that lands in another tenant's
//! namespace on a shared cluster, and nothing downstream recomputes a name from what a
//! tenant chose.
//!
//! Namespaces created before names were keyed keep the (unkeyed) name they were synced
//! under: at startup [`restamp_namespaces`] stamps it on them, so nothing moves.

use serde_json::Value;
use sluice_api::LogicalClusterPath;
use sluice_api::sync::{ANNOTATION_DOWNSTREAM_NAMESPACE, legacy_downstream_namespace};

use crate::errors::ApiResult;
use crate::pipeline::hooks::{Hook, HookCx};
use crate::resources::Subresource;
use crate::state::write_state::WriteState;
use crate::storage::{ResourcePrefix, StorageError, Store};

/// The stamp on stored object `obj`, if any.
fn stamp_of(obj: &Value) -> Option<&str> {
    obj["metadata"]["annotations"][ANNOTATION_DOWNSTREAM_NAMESPACE].as_str()
}

/// The downstream name of namespace `namespace` of `cluster`: its stamp when the namespace
/// is stored, else the name it will get when created.
pub fn of_namespace(state: &WriteState, cluster: &LogicalClusterPath, namespace: &str) -> String {
    of_stored(
        state,
        cluster,
        namespace,
        state.namespace(cluster, namespace).as_deref(),
    )
}

/// [`of_namespace`] when the namespace was read already (`stored`: `None` if it is not).
pub fn of_stored(
    state: &WriteState,
    cluster: &LogicalClusterPath,
    namespace: &str,
    stored: Option<&Value>,
) -> String {
    stored
        .and_then(stamp_of)
        .map(str::to_string)
        .unwrap_or_else(|| state.downstream_names.name(cluster, namespace))
}

/// Stamps each Namespace of a logical cluster with its downstream name on create and keeps
/// it on every update, whatever the client sent.
pub struct StampNamespaces;

impl Hook for StampNamespaces {
    fn admit_create(&self, cx: &HookCx<'_>, obj: &mut Value) -> ApiResult<()> {
        if let Some(name) = crate::object::name(obj).map(str::to_string) {
            let down = cx.state.downstream_names.name(cx.cluster, &name);
            crate::object::set_annotation(obj, ANNOTATION_DOWNSTREAM_NAMESPACE, &down);
        }
        Ok(())
    }

    fn admit_update(
        &self,
        cx: &HookCx<'_>,
        old: &Value,
        new: &mut Value,
        _sub: Option<Subresource>,
    ) -> ApiResult<()> {
        let down = match stamp_of(old) {
            Some(s) => s.to_string(),
            // Not stamped yet (startup stamps every namespace before serving): the name it
            // was synced under.
            None => legacy_downstream_namespace(
                cx.cluster,
                crate::object::name(old).unwrap_or_default(),
            ),
        };
        crate::object::set_annotation(new, ANNOTATION_DOWNSTREAM_NAMESPACE, &down);
        Ok(())
    }
}

/// Stamp the namespaces of `cluster` and below that have no downstream name yet with the
/// one they were synced under before names were keyed.
pub async fn restamp_namespaces(
    store: &Store,
    cluster: &LogicalClusterPath,
) -> Result<usize, StorageError> {
    let namespaces = ResourcePrefix::new("", "namespaces");
    let mut stamped = 0;
    for mut ns in crate::admission::restamp::subtree(store, &namespaces, cluster) {
        if stamp_of(&ns.obj).is_some() {
            continue;
        }
        let Some(name) = crate::object::name(&ns.obj).map(str::to_string) else {
            continue;
        };
        let legacy = legacy_downstream_namespace(&ns.path, &name);
        crate::object::set_annotation(&mut ns.obj, ANNOTATION_DOWNSTREAM_NAMESPACE, &legacy);
        if crate::admission::restamp::write_back(store, &ns).await? {
            stamped += 1;
        }
    }
    Ok(stamped)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use serde_json::json;

    use super::*;
    use crate::storage::{Expect, Op, RedbBackend};

    async fn put(store: &Store, cluster: &LogicalClusterPath, obj: Value) {
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        store
            .write(Op::Put {
                key: ResourcePrefix::new("", "namespaces").key(cluster, None, &name),
                value: Bytes::from(serde_json::to_vec(&obj).unwrap_or_default()),
                expect: Expect::Absent,
            })
            .await
            .expect("put");
    }

    fn stamp(store: &Store, cluster: &LogicalClusterPath, name: &str) -> Option<String> {
        let key = ResourcePrefix::new("", "namespaces").key(cluster, None, name);
        let v: Value = serde_json::from_slice(&store.get(&key)?.value).ok()?;
        stamp_of(&v).map(str::to_string)
    }

    #[tokio::test]
    async fn namespaces_synced_before_keys_keep_their_names() {
        let dir = tempfile::tempdir().expect("dir");
        let store =
            Store::open(RedbBackend::open(&dir.path().join("db")).expect("db"), 10).expect("store");
        let (root, team): (LogicalClusterPath, LogicalClusterPath) = (
            "root".parse().expect("root"),
            "root:team".parse().expect("team"),
        );
        put(&store, &root, json!({"metadata": {"name": "old"}})).await;
        put(&store, &team, json!({"metadata": {"name": "shop"}})).await;
        put(
            &store,
            &root,
            json!({"metadata": {"name": "new", "annotations": {ANNOTATION_DOWNSTREAM_NAMESPACE: "new-k3y3dk3y3dk3y3d"}}}),
        )
        .await;
        assert_eq!(restamp_namespaces(&store, &root).await.expect("restamp"), 2);
        assert_eq!(
            stamp(&store, &root, "old"),
            Some(legacy_downstream_namespace(&root, "old"))
        );
        assert_eq!(
            stamp(&store, &team, "shop"),
            Some(legacy_downstream_namespace(&team, "shop"))
        );
        assert_eq!(
            stamp(&store, &root, "new").as_deref(),
            Some("new-k3y3dk3y3dk3y3d")
        );
        // Once stamped, a restart changes nothing.
        assert_eq!(restamp_namespaces(&store, &root).await.expect("again"), 0);
    }
}
