//! Read-modify-write of one object (replace, patch, apply's merge) with optimistic
//! concurrency, retried on races unless the client pinned a resourceVersion.

use serde_json::Value;

use super::commit::{self, Writer};
use super::decode::check_decoded;
use super::hooks::{Committed, HookCx};
use super::params::Write;
use super::steps::*;

use crate::errors::{ApiError, ApiResult, Cause};
use crate::object;
use crate::patch::{self, PatchError, PatchType};
use crate::resources::{ResourceType, Subresource};
use crate::state::ApiState;
use crate::storage::{Expect, Op, StorageError};
use crate::webhooks::{self, matching::Operation};

/// What a write does to the current object.
pub enum Change<'a> {
    /// PUT of the main resource or of `status`.
    Replace {
        new: Value,
        sub: Option<Subresource>,
    },
    /// PATCH of the main resource or of `status`.
    Patch {
        pt: PatchType,
        body: &'a [u8],
        sub: Option<Subresource>,
    },
    /// Server-side apply of a configuration.
    Apply {
        applied: Value,
        manager: String,
        force: bool,
    },
}

/// The resourceVersion a write asks to update (a precondition: a conflict if the object
/// moved on), as kube-apiserver reads it: the one a replacement or applied configuration
/// carries, or the one a patch sets. A patch that does not mention it is applied to
/// whatever is current, retried when a concurrent write wins.
fn requested_version(change: &Change<'_>, old: &Value, new: &Value) -> Option<String> {
    let rv = |v: &Value| {
        v["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_string)
    };
    match change {
        Change::Replace { new, .. } => rv(new),
        Change::Apply { applied, .. } => rv(applied),
        Change::Patch { pt, body, .. } => {
            let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
            let mentioned = match pt {
                PatchType::Json => body.as_array().is_some_and(|ops| {
                    ops.iter()
                        .any(|op| op["path"] == "/metadata/resourceVersion")
                }),
                _ => body["metadata"].get("resourceVersion").is_some(),
            };
            (mentioned || rv(new) != rv(old)).then(|| rv(new)).flatten()
        }
    }
}

pub fn apply_patch(
    state: &ApiState,
    t: &ResourceType,
    current: &Value,
    pt: PatchType,
    body: &[u8],
) -> ApiResult<Value> {
    let result = match pt {
        PatchType::Json => patch::json_patch(current, body),
        PatchType::Merge => patch::merge_patch(current, body),
        PatchType::Strategic if t.custom().is_some() => {
            return Err(ApiError::UnsupportedMediaType(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".into(),
            ));
        }
        PatchType::Strategic => patch::strategic_patch(state.schemas, &t.definition, current, body),
        PatchType::Apply => {
            return Err(ApiError::Internal(
                "apply patches are handled by server-side apply".into(),
            ));
        }
    };
    result.map_err(|e| match e {
        PatchError::Malformed(m) => ApiError::BadRequest(m),
        PatchError::TooLarge(m) => ApiError::RequestEntityTooLarge(m),
        PatchError::Apply(m) => invalid(
            t,
            object::name(current).unwrap_or(""),
            vec![Cause::invalid("patch", "", m)],
        ),
    })
}

/// Read-modify-write with optimistic concurrency; retried on races unless the client
/// pinned a resourceVersion.
pub async fn modify(
    state: &ApiState,
    target: &Target,
    name: &str,
    change: Change<'_>,
    w: &mut Write,
) -> ApiResult<Written> {
    // A change is read in the version it was sent in; what is written is the stored form.
    let view = target.t.clone();
    let converted = stored_target(state, target)?;
    let (target, conversion) = match &converted {
        Some((stored, via)) => (stored, Some(via)),
        None => (target, None),
    };
    let t = &*target.t;
    let cluster = target.cluster.clone();
    let key = target.key(name);
    let manager = w.manager.clone();
    let user = w.user.clone();
    let cx = HookCx {
        state,
        t,
        cluster: &cluster,
        manager: Some(&manager),
        user: user.as_ref(),
        warnings: Default::default(),
    };
    let hooks = state.hooks.of(t);
    for _ in 0..WRITE_RETRIES {
        let (entry, old) = current(state, t, &key, name)?;
        let old_view = match conversion {
            Some(via) => {
                std::borrow::Cow::Owned(via.view_form(state, &cluster, old.clone()).await?)
            }
            None => std::borrow::Cow::Borrowed(&old),
        };
        let (mut new, sub) = match &change {
            Change::Replace { new, sub } => (new.clone(), *sub),
            Change::Patch { pt, body, sub } => {
                let mut patched = apply_patch(state, &view, &old_view, *pt, body)?;
                check_decoded(state, &view, &mut patched, w)?;
                (patched, *sub)
            }
            Change::Apply {
                applied,
                manager,
                force,
            } => {
                let merged = crate::apply::apply(
                    &ownership_schema(state, &view),
                    Some(&old_view),
                    applied,
                    manager,
                    &view.api_version(),
                    *force,
                )
                .map_err(|c| apply_conflict(&view, name, &c))?;
                (merged, None)
            }
        };
        if let Some(via) = conversion {
            new = via.stored_form(state, &cluster, new).await?;
        }
        let pinned = requested_version(&change, &old, &new);
        if let Some(rv) = &pinned
            && *rv != entry.revision.to_string()
        {
            return Err(ApiError::conflict(&t.gr, name));
        }
        if object::name(&new).is_some_and(|n| n != name) {
            return Err(ApiError::BadRequest(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                object::name(&new).unwrap_or("")
            )));
        }
        let admission = webhooks::Admission {
            cluster: &cluster,
            t,
            sub,
            operation: Operation::Update,
            name,
            namespace: target.namespace.as_deref(),
            user: user.as_ref(),
            manager: Some(&manager),
            dry_run: w.dry_run,
        };
        if webhooks::mutate(state, &admission, &mut new, Some(&old), &mut reports(w)).await? {
            unchanged_identity(t, name, target.namespace.as_deref(), &new)?;
        }
        if sub == Some(Subresource::EphemeralContainers) {
            new = object::ephemeral_update(&old, &new);
            crate::defaults::apply(&t.kind, &mut new);
        } else if sub == Some(Subresource::Status) {
            let mut merged = old.clone();
            merged["status"] = new.get("status").cloned().unwrap_or(Value::Null);
            if merged["status"].is_null()
                && let Some(o) = merged.as_object_mut()
            {
                o.remove("status");
            }
            new = merged;
        } else {
            crate::defaults::apply(&t.kind, &mut new);
        }
        object::prepare_update(
            &mut new,
            &old,
            t,
            state.annotation_for(&cluster),
            t.has(Subresource::Status) && sub.is_none(),
        );
        if !matches!(change, Change::Apply { .. }) {
            let subresource = sub.map(Subresource::name);
            crate::apply::record_update(
                &ownership_schema(state, t),
                Some(&old),
                &mut new,
                &w.manager,
                &t.api_version(),
                subresource,
            );
        }
        if sub.is_none() {
            let causes = crate::immutable::check(&t.group, &t.kind, &old, &mut new);
            if !causes.is_empty() {
                return Err(invalid(t, name, causes));
            }
        }
        validate(state, t, &new, Some(&old))?;
        check_reserved(state, t, &cluster, user.as_ref(), Some(&old), &new)?;
        if let Some(synced) = user.as_ref().and_then(crate::rbac::syncer::cluster_of) {
            crate::rbac::syncer::may_change(&synced, &t.group, &t.resource, &old, &new).map_err(
                |message| ApiError::RbacForbidden {
                    gr: t.gr.clone(),
                    name: name.to_string(),
                    message,
                },
            )?;
        }
        for hook in hooks {
            hook.admit_update(&cx, &old, &mut new, sub)?;
        }
        add_warnings(w, &cx);
        validating_admission(state, &admission, Some(&new), Some(&old), w).await?;
        if object::spec_changed(&new, &old)
            || new["metadata"] != old["metadata"]
            || new.get("status") != old.get("status")
        {
            // fallthrough to write
        } else {
            return Ok(Written::Unchanged(entry.value.clone()));
        }
        if w.dry_run {
            encode(state, &new)?;
            return Ok(Written::Object {
                object: new,
                revision: entry.revision,
            });
        }
        let op = if object::is_deleting(&new) && object::finalizers(&new) == 0 {
            Op::Delete {
                key: key.clone(),
                expect: Expect::At(entry.revision),
            }
        } else {
            let bytes = encode(state, &new)?;
            Op::Put {
                key: key.clone(),
                value: bytes,
                expect: Expect::At(entry.revision),
            }
        };
        let deleting = matches!(op, Op::Delete { .. });
        match commit::commit(&state.store, Writer::Request, op).await {
            Ok(c) => {
                let what = if deleting {
                    crate::controllers::gc_queue::collect_dependents(&state.gc, &key, &new);
                    Committed::Deleted(&new)
                } else {
                    Committed::Written {
                        new: &new,
                        old: Some(&old),
                    }
                };
                for hook in hooks {
                    hook.committed(&cx, what).await?;
                }
                return Ok(Written::Object {
                    object: new,
                    revision: c.revision,
                });
            }
            Err(StorageError::Conflict { .. }) if pinned.is_none() => continue,
            Err(e) => return Err(ApiError::from_storage(e, &t.gr, name)),
        }
    }
    Err(ApiError::conflict(&t.gr, name))
}

pub fn apply_conflict(
    t: &ResourceType,
    name: &str,
    conflicts: &[crate::apply::Conflict],
) -> ApiError {
    ApiError::ApplyConflict {
        gr: t.gr.clone(),
        name: name.to_string(),
        message: crate::apply::conflict_message(conflicts),
        causes: conflicts
            .iter()
            .map(|c| Cause {
                reason: "FieldManagerConflict",
                field: c.path.clone(),
                message: format!("conflict with \"{}\" using {}", c.manager, c.api_version),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_a_version_the_request_names_is_a_precondition() {
        let old = json!({"metadata": {"name": "a", "resourceVersion": "5"}});
        let new = old.clone();
        let merge = |body: &'static [u8]| Change::Patch {
            pt: PatchType::Merge,
            body,
            sub: None,
        };
        // A patch that does not mention it: applied to whatever is current.
        assert_eq!(
            requested_version(&merge(br#"{"metadata":{"labels":{"x":"y"}}}"#), &old, &new),
            None
        );
        assert_eq!(
            requested_version(
                &merge(br#"{"metadata":{"resourceVersion":"5"}}"#),
                &old,
                &new
            ),
            Some("5".into())
        );
        let json_patch = Change::Patch {
            pt: PatchType::Json,
            body: br#"[{"op":"replace","path":"/metadata/resourceVersion","value":"4"}]"#,
            sub: None,
        };
        let moved = json!({"metadata": {"name": "a", "resourceVersion": "4"}});
        assert_eq!(
            requested_version(&json_patch, &old, &moved),
            Some("4".into())
        );
        let replace = Change::Replace {
            new: json!({"metadata": {"resourceVersion": "3"}}),
            sub: None,
        };
        assert_eq!(requested_version(&replace, &old, &new), Some("3".into()));
        let apply = Change::Apply {
            applied: json!({"metadata": {"name": "a"}}),
            manager: "m".into(),
            force: false,
        };
        assert_eq!(requested_version(&apply, &old, &new), None);
    }
}
