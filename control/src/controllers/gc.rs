//! Garbage collection by ownerReferences, with the three propagation policies:
//! `Background` (the owner goes now, dependents after), `Foreground` (the owner waits,
//! holding the `foregroundDeletion` finalizer, until its dependents are gone) and `Orphan`
//! (dependents lose their reference to the owner, which then goes).
//!
//! Deletions enqueue work here; dependents are found by a scan of the owner's logical
//! cluster (and namespace, for a namespaced owner). Creations naming owners enqueue a
//! check too: a dependent created after its owner went (a controller acting on a stale
//! cache) is collected as kube collects dangling references.

use std::time::Duration;

use serde_json::{Value, json};
use sluice_api::LogicalClusterPath;
use tokio::sync::{mpsc, watch};

use super::gc_queue::{FOREGROUND, GcQueue, GcTask, ORPHAN, collect_dependents, key_parts};
use crate::object;
use crate::pipeline::commit::{Writer, commit, replace_or_remove};
use crate::pipeline::delete as delete_object;
use crate::state::SharedState;
use crate::storage::{Expect, Key, Op};

const RETRY: Duration = Duration::from_millis(200);

/// How many times an owner must be found absent, [`RETRY`] apart, before its dependent
/// goes.
const DANGLING_CHECKS: u8 = 5;

/// The served type of `apiVersion`/`kind` in `cluster` (any version: they share keys).
fn type_of(
    state: &SharedState,
    cluster: &LogicalClusterPath,
    api_version: &str,
    kind: &str,
) -> Option<std::sync::Arc<crate::resources::ResourceType>> {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    state
        .crds
        .catalog(cluster)
        .types()
        .iter()
        .find(|t| t.group == group && t.kind == kind)
        .cloned()
}

/// Whether the owner `r` names is absent from `cluster` (and `namespace`, for a
/// namespaced owner): no such object, or one with another uid. An owner of a kind not
/// served is not judged.
fn owner_absent(
    state: &SharedState,
    cluster: &LogicalClusterPath,
    namespace: Option<&str>,
    r: &Value,
) -> bool {
    let (Some(api_version), Some(kind), Some(name)) = (
        r["apiVersion"].as_str(),
        r["kind"].as_str(),
        r["name"].as_str(),
    ) else {
        return false;
    };
    let Some(t) = type_of(state, cluster, api_version, kind) else {
        return false;
    };
    let ns = if t.namespaced { namespace } else { None };
    if t.namespaced && ns.is_none() {
        return true;
    }
    match state.store.get(&t.prefix.key(cluster, ns, name)) {
        Some(e) => serde_json::from_slice::<Value>(&e.value)
            .ok()
            .is_none_or(|o| o["metadata"]["uid"] != r["uid"]),
        None => true,
    }
}

fn owned_by(obj: &Value, uid: &str) -> bool {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid))
}

/// Every object in `cluster` (and `namespace`) that names `uid` as an owner.
fn dependents(
    state: &SharedState,
    cluster: &LogicalClusterPath,
    namespace: Option<&str>,
    uid: &str,
) -> Vec<(std::sync::Arc<crate::resources::ResourceType>, Key, Value)> {
    let mut out = Vec::new();
    for t in state.crds.catalog(cluster).types() {
        if namespace.is_some() && !t.namespaced {
            continue;
        }
        state
            .store
            .scan(&t.prefix.scope(Some(cluster), namespace), None, |k, e| {
                if let Ok(v) = serde_json::from_slice::<Value>(&e.value)
                    && owned_by(&v, uid)
                {
                    out.push((t.clone(), k.clone(), v));
                }
                true
            });
    }
    out
}

/// Remove `finalizer` from the object at `key`; delete it if that was the last one. False
/// when every try lost a race with another writer (a syncer removing its own finalizer,
/// a status report): the caller retries later, or the object would keep the finalizer
/// and never go.
async fn release(state: &SharedState, key: &Key, finalizer: &str) -> bool {
    for _ in 0..8 {
        let Some(entry) = state.store.get(key) else {
            return true;
        };
        let Ok(mut obj) = serde_json::from_slice::<Value>(&entry.value) else {
            return true;
        };
        if let Some(list) = obj["metadata"]["finalizers"].as_array_mut() {
            list.retain(|f| f != finalizer);
        }
        let Ok(op) = replace_or_remove(key, &obj, entry.revision) else {
            return true;
        };
        let deleting = matches!(op, Op::Delete { .. });
        match commit(&state.store, Writer::GarbageCollector, op).await {
            Ok(_) if deleting => {
                collect_dependents(&state.gc, key, &obj);
                return true;
            }
            Ok(_) => return true,
            Err(e) => {
                tracing::debug!(%key, error = %e, "gc: releasing finalizer raced; trying again")
            }
        }
    }
    false
}

/// Process one task; `Some(task)` asks to be retried later.
async fn process(state: &SharedState, task: GcTask) -> Option<GcTask> {
    match &task {
        GcTask::Deleted {
            cluster,
            namespace,
            uid,
        } => {
            for (t, k, v) in dependents(state, cluster, namespace.as_deref(), uid) {
                let name = object::name(&v).unwrap_or("").to_string();
                // Dependents owned by others too only lose this reference.
                let others = v["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|r| r.iter().any(|r| r["uid"] != *uid));
                if others {
                    drop_reference(state, &k, uid).await;
                } else if let Err(e) = delete_object(
                    state,
                    &t,
                    &k,
                    &name,
                    &json!({"propagationPolicy": "Background"}),
                    false,
                    None,
                )
                .await
                {
                    tracing::debug!(key = %k, error = %e, "gc: deleting dependent failed");
                }
            }
            None
        }
        GcTask::Created { key, checks } => {
            let entry = state.store.get(key)?;
            let obj: Value = serde_json::from_slice(&entry.value).ok()?;
            if object::is_deleting(&obj) {
                return None;
            }
            let (cluster, namespace) = key_parts(key)?;
            let refs = obj["metadata"]["ownerReferences"].as_array()?;
            let dangling = !refs.is_empty()
                && refs
                    .iter()
                    .all(|r| owner_absent(state, &cluster, namespace.as_deref(), r));
            if !dangling {
                return None;
            }
            if checks + 1 < DANGLING_CHECKS {
                return Some(GcTask::Created {
                    key: key.clone(),
                    checks: checks + 1,
                });
            }
            let t = type_of(
                state,
                &cluster,
                obj["apiVersion"].as_str().unwrap_or_default(),
                obj["kind"].as_str().unwrap_or_default(),
            )?;
            let name = object::name(&obj).unwrap_or("").to_string();
            tracing::info!(%key, "gc: every owner is gone; deleting the dependent");
            if let Err(e) = delete_object(
                state,
                &t,
                key,
                &name,
                &json!({"propagationPolicy": "Background"}),
                false,
                None,
            )
            .await
            {
                tracing::debug!(%key, error = %e, "gc: deleting a dangling dependent failed");
            }
            None
        }
        GcTask::Finalize { key } => {
            let entry = state.store.get(key)?;
            let obj: Value = serde_json::from_slice(&entry.value).ok()?;
            let uid = obj["metadata"]["uid"].as_str()?.to_string();
            let (cluster, namespace) = key_parts(key)?;
            let finalizers: Vec<String> = obj["metadata"]["finalizers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect();
            if finalizers.iter().any(|f| f == ORPHAN) {
                for (_, k, _) in dependents(state, &cluster, namespace.as_deref(), &uid) {
                    drop_reference(state, &k, &uid).await;
                }
                return (!release(state, key, ORPHAN).await).then_some(task);
            }
            if finalizers.iter().any(|f| f == FOREGROUND) {
                let deps = dependents(state, &cluster, namespace.as_deref(), &uid);
                if deps.is_empty() {
                    return (!release(state, key, FOREGROUND).await).then_some(task);
                }
                for (t, k, v) in deps {
                    if !object::is_deleting(&v) {
                        let name = object::name(&v).unwrap_or("").to_string();
                        let _ = delete_object(
                            state,
                            &t,
                            &k,
                            &name,
                            &json!({"propagationPolicy": "Foreground"}),
                            false,
                            None,
                        )
                        .await;
                    }
                }
                return Some(task);
            }
            None
        }
    }
}

/// Remove the ownerReference to `uid` from the object at `key`.
async fn drop_reference(state: &SharedState, key: &Key, uid: &str) {
    for _ in 0..8 {
        let Some(entry) = state.store.get(key) else {
            return;
        };
        let Ok(mut obj) = serde_json::from_slice::<Value>(&entry.value) else {
            return;
        };
        if let Some(refs) = obj["metadata"]["ownerReferences"].as_array_mut() {
            refs.retain(|r| r["uid"] != uid);
            if refs.is_empty()
                && let Some(m) = obj["metadata"].as_object_mut()
            {
                m.remove("ownerReferences");
            }
        }
        let Ok(bytes) = serde_json::to_vec(&obj) else {
            return;
        };
        if commit(
            &state.store,
            Writer::GarbageCollector,
            Op::Put {
                key: key.clone(),
                value: bytes.into(),
                expect: Expect::At(entry.revision),
            },
        )
        .await
        .is_ok()
        {
            return;
        }
    }
}

/// Run the collector until `shutdown` flips.
pub async fn run(
    state: SharedState,
    mut rx: mpsc::UnboundedReceiver<GcTask>,
    queue: GcQueue,
    mut shutdown: watch::Receiver<bool>,
) {
    // Owners left mid-finalization by a previous run.
    for t in crate::catalog::Catalog::builtin().types() {
        state.store.scan(t.prefix.as_str(), None, |k, e| {
            if let Ok(v) = serde_json::from_slice::<Value>(&e.value) {
                let held = v["metadata"]["finalizers"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|f| f == FOREGROUND || f == ORPHAN));
                if held && object::is_deleting(&v) {
                    let _ = queue.send(GcTask::Finalize { key: k.clone() });
                }
            }
            true
        });
    }
    loop {
        let task = tokio::select! {
            _ = shutdown.changed() => return,
            t = rx.recv() => match t { Some(t) => t, None => return },
        };
        if let Some(retry) = process(&state, task).await {
            let queue = queue.clone();
            tokio::spawn(async move {
                tokio::time::sleep(RETRY).await;
                let _ = queue.send(retry);
            });
        }
    }
}
