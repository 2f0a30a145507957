//! A delete: immediate, or a mark (finalizers; namespaces and workspaces, whose
//! contents a controller removes first).

use bytes::Bytes;
use serde_json::{Value, json};
use sluice_api::LogicalClusterPath;

use super::commit::{self, Writer};
use super::hooks::{Committed, Deletion, HookCx};
use super::steps::*;
use super::stored::stored_type;

use crate::errors::{ApiError, ApiResult};
use crate::object;
use crate::resources::ResourceType;
use crate::state::ApiState;
use crate::storage::{Expect, Key, Op, StorageError, cache::with_resource_version};
use crate::webhooks::{self, matching::Operation};

/// Delete one object: immediately, or by marking it (finalizers; namespaces and
/// workspaces, whose contents a controller removes first).
///
/// Returns the object as stored at the deletion (or as marked), with its resourceVersion.
/// Used by the API's DELETE and by the garbage collector and termination controllers.
pub async fn delete(
    state: &ApiState,
    t: &ResourceType,
    key: &Key,
    name: &str,
    options: &Value,
    dry_run: bool,
    user: Option<&crate::auth::User>,
) -> ApiResult<Bytes> {
    let t = stored_type(t);
    let cluster: LogicalClusterPath = key
        .cluster()
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(LogicalClusterPath::root);
    let cx = HookCx {
        state,
        t,
        cluster: &cluster,
        manager: None,
        user: None,
        warnings: Default::default(),
    };
    for _ in 0..WRITE_RETRIES {
        let (entry, mut obj) = current(state, t, key, name)?;
        for hook in state.hooks.of(t) {
            hook.admit_delete(&cx, name, &obj)?;
        }
        let admission = webhooks::Admission {
            cluster: &cluster,
            t,
            sub: None,
            operation: Operation::Delete,
            name,
            namespace: key.parts().map(|p| p.namespace).filter(|n| !n.is_empty()),
            user,
            manager: None,
            dry_run,
        };
        // A deletion's warnings and audit annotations have no way back to its response yet.
        crate::policies::validate(
            state,
            &admission,
            None,
            Some(&obj),
            &mut Vec::new(),
            &mut Vec::new(),
        )?;
        webhooks::validate(
            state,
            &admission,
            None,
            Some(&obj),
            &mut webhooks::Reports {
                warnings: &mut Vec::new(),
                audit: &mut Vec::new(),
            },
        )
        .await?;
        let pre = &options["preconditions"];
        if let Some(uid) = pre["uid"].as_str()
            && obj["metadata"]["uid"].as_str() != Some(uid)
        {
            return Err(ApiError::Conflict {
                gr: t.gr.clone(),
                name: name.to_string(),
                detail: format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    obj["metadata"]["uid"].as_str().unwrap_or("")
                ),
            });
        }
        if let Some(rv) = pre["resourceVersion"].as_str()
            && rv != entry.revision.to_string()
        {
            return Err(ApiError::Conflict {
                gr: t.gr.clone(),
                name: name.to_string(),
                detail: format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    entry.revision
                ),
            });
        }
        let deletion = state
            .hooks
            .of(t)
            .iter()
            .find_map(|h| h.deletion(&obj, options));
        let container = matches!(deletion, Some(Deletion::Container { .. }));
        let policy = options["propagationPolicy"].as_str().unwrap_or(
            if options["orphanDependents"] == true {
                "Orphan"
            } else {
                "Background"
            },
        );
        let gc_finalizer = match policy {
            "Foreground" => Some(crate::controllers::gc_queue::FOREGROUND),
            "Orphan" => Some(crate::controllers::gc_queue::ORPHAN),
            "Background" => None,
            other => {
                return Err(ApiError::BadRequest(format!(
                    "propagationPolicy: Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
                )));
            }
        };
        if let (Some(f), false) = (gc_finalizer, container || object::is_deleting(&obj)) {
            let list = object::meta_mut(&mut obj)
                .entry("finalizers")
                .or_insert_with(|| json!([]));
            if let Some(l) = list.as_array_mut()
                && !l.iter().any(|x| x == f)
            {
                l.push(json!(f));
            }
        }
        // Marked rather than removed: an object that ends gracefully (a Pod on a node),
        // one with finalizers, or a container of other objects.
        let grace = match deletion {
            Some(Deletion::Graceful { seconds }) => Some(seconds),
            _ => None,
        };
        let marks = grace.is_some() || object::finalizers(&obj) > 0 || container;
        let grace_seconds = grace.unwrap_or(0);
        if marks {
            if object::is_deleting(&obj) {
                return Ok(entry.value.clone());
            }
            let meta = object::meta_mut(&mut obj);
            meta.insert("deletionTimestamp".into(), json!(object::now_rfc3339()));
            meta.insert("deletionGracePeriodSeconds".into(), json!(grace_seconds));
            if matches!(deletion, Some(Deletion::Container { terminating: true })) {
                obj["status"]["phase"] = json!("Terminating");
            }
            if dry_run {
                return Ok(Bytes::from(serde_json::to_vec(&obj).unwrap_or_default()));
            }
            let bytes = Bytes::from(
                serde_json::to_vec(&obj).map_err(|e| ApiError::Internal(e.to_string()))?,
            );
            match commit::commit(
                &state.store,
                Writer::Request,
                Op::Put {
                    key: key.clone(),
                    value: bytes.clone(),
                    expect: Expect::At(entry.revision),
                },
            )
            .await
            {
                Ok(c) => {
                    if gc_finalizer.is_some() {
                        let _ = state
                            .gc
                            .send(crate::controllers::gc_queue::GcTask::Finalize {
                                key: key.clone(),
                            });
                    }
                    return Ok(with_resource_version(&bytes, c.revision));
                }
                Err(StorageError::Conflict { .. }) => continue,
                Err(e) => return Err(ApiError::from_storage(e, &t.gr, name)),
            }
        }
        if dry_run {
            return Ok(entry.value.clone());
        }
        match commit::commit(
            &state.store,
            Writer::Request,
            Op::Delete {
                key: key.clone(),
                expect: Expect::At(entry.revision),
            },
        )
        .await
        {
            Ok(c) => {
                crate::controllers::gc_queue::collect_dependents(&state.gc, key, &obj);
                for hook in state.hooks.of(t) {
                    hook.committed(&cx, Committed::Deleted(&obj)).await?;
                }
                return Ok(with_resource_version(&entry.value, c.revision));
            }
            Err(StorageError::Conflict { .. }) => continue,
            Err(e) => return Err(ApiError::from_storage(e, &t.gr, name)),
        }
    }
    Err(ApiError::conflict(&t.gr, name))
}
