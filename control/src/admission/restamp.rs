//! Re-deciding what admission stamped on stored objects once what it depended on changed
//! (a workspace's policy) or was not recorded yet (objects written before a stamp
//! existed): read the objects of a logical cluster and those below it, write back the ones
//! whose stamp changes — unless written meanwhile, by a write admitted itself.

use bytes::Bytes;
use serde_json::Value;
use sluice_api::LogicalClusterPath;

use crate::controllers::gc_queue::collect_dependents;
use crate::pipeline::commit::{Writer, commit, replace_or_remove};
use crate::state::write_state::WriteState;
use crate::storage::{Expect, Key, Op, ResourcePrefix, Revision, StorageError, Store};

/// A stored object as read for restamping.
pub struct Stored {
    pub key: Key,
    pub revision: Revision,
    /// Its logical cluster.
    pub path: LogicalClusterPath,
    pub obj: Value,
}

/// The objects of `prefix` in `cluster` and in the logical clusters below it (keys
/// `<prefix><cluster>/...` and `<prefix><cluster>:<child>...`), in key order.
pub fn subtree(
    store: &Store,
    prefix: &ResourcePrefix,
    cluster: &LogicalClusterPath,
) -> Vec<Stored> {
    let scope = format!("{}{}", prefix.as_str(), cluster);
    let mut found = Vec::new();
    store.scan(&scope, None, |key, entry| {
        if key.as_str()[scope.len()..].starts_with(['/', ':']) {
            found.push((key.clone(), entry.revision, entry.value.clone()));
        }
        true
    });
    found
        .into_iter()
        .filter_map(|(key, revision, value)| {
            let path = key.cluster()?.parse().ok()?;
            let obj = serde_json::from_slice(&value).ok()?;
            Some(Stored {
                key,
                revision,
                path,
                obj,
            })
        })
        .collect()
}

/// Write `s.obj` back at the revision it was read at; false when it was written or
/// deleted meanwhile (that write was admitted with what held then).
pub async fn write_back(store: &Store, s: &Stored) -> Result<bool, StorageError> {
    let value =
        Bytes::from(serde_json::to_vec(&s.obj).map_err(|e| StorageError::Backend(e.to_string()))?);
    match commit(
        store,
        Writer::Restamp,
        Op::Put {
            key: s.key.clone(),
            value,
            expect: Expect::At(s.revision),
        },
    )
    .await
    {
        Ok(_) => Ok(true),
        Err(StorageError::Conflict { .. } | StorageError::NotFound(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// [`write_back`] for a stamp that may release an object: removed instead when it is being
/// deleted and has no finalizer left, its dependents then collected.
pub async fn settle(state: &WriteState, s: &Stored) -> Result<bool, StorageError> {
    let op = replace_or_remove(&s.key, &s.obj, s.revision)?;
    let removed = matches!(op, Op::Delete { .. });
    match commit(&state.store, Writer::Restamp, op).await {
        Ok(_) => {
            if removed {
                collect_dependents(&state.gc, &s.key, &s.obj);
            }
            Ok(true)
        }
        Err(StorageError::Conflict { .. } | StorageError::NotFound(_)) => Ok(false),
        Err(e) => Err(e),
    }
}
