//! Workspaces: a new one is Ready at once with its child cluster's path and URL, and that
//! cluster gets the system namespaces, and its creator `cluster-admin` of it, before the
//! client hears the workspace exists.

use serde_json::{Value, json};

use crate::errors::{ApiError, ApiResult};
use crate::pipeline::hooks::{Committed, Deletion, Hook, HookCx, HookFuture};
use crate::resources::Subresource;

/// Who created a workspace (other than `system:masters`): set by the server at creation
/// and kept as it is by every update, so that only the creator is ever made its admin.
pub const OWNER_ANNOTATION: &str = "sluice.dev/owner";

pub struct WorkspaceHook;

fn set_owner(obj: &mut Value, owner: Option<&Value>) {
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    let meta = &mut obj["metadata"];
    if !meta["annotations"].is_object() {
        meta["annotations"] = json!({});
    }
    match (owner, meta["annotations"].as_object_mut()) {
        (Some(o), Some(a)) => {
            a.insert(OWNER_ANNOTATION.into(), o.clone());
        }
        (None, Some(a)) => {
            a.remove(OWNER_ANNOTATION);
        }
        _ => {}
    }
    if meta["annotations"]
        .as_object()
        .is_some_and(|a| a.is_empty())
        && let Some(m) = meta.as_object_mut()
    {
        m.remove("annotations");
    }
}

impl Hook for WorkspaceHook {
    fn admit_update(
        &self,
        _cx: &HookCx<'_>,
        old: &Value,
        new: &mut Value,
        _sub: Option<Subresource>,
    ) -> ApiResult<()> {
        set_owner(new, old["metadata"]["annotations"].get(OWNER_ANNOTATION));
        Ok(())
    }

    fn admit_create(&self, cx: &HookCx<'_>, obj: &mut Value) -> ApiResult<()> {
        let owner = cx
            .user
            .filter(|u| !u.is_admin())
            .map(|u| Value::String(u.name.clone()));
        set_owner(obj, owner.as_ref());
        if let Some(name) = crate::object::name(obj) {
            let path = cx
                .cluster
                .child(name)
                .map(|p| p.to_string())
                .unwrap_or_default();
            obj["status"] =
                json!({"phase": "Ready", "path": path, "url": format!("/clusters/{path}")});
        }
        Ok(())
    }

    /// A workspace's cluster is emptied before the workspace goes.
    fn deletion(&self, _obj: &Value, _options: &Value) -> Option<Deletion> {
        Some(Deletion::Container { terminating: true })
    }

    fn committed<'a>(&'a self, cx: &'a HookCx<'a>, what: Committed<'a>) -> HookFuture<'a> {
        Box::pin(async move {
            let Committed::Written(obj) = what else {
                return Ok(());
            };
            let Some(child) = crate::object::name(obj).and_then(|n| cx.cluster.child(n).ok())
            else {
                return Ok(());
            };
            crate::bootstrap::ensure_namespaces(&cx.state.store, &child, true)
                .await
                .map_err(|e| {
                    ApiError::Internal(format!("creating the namespaces of {child}: {e}"))
                })?;
            // The creator administers what it created (system:masters needs no binding).
            match obj["metadata"]["annotations"][OWNER_ANNOTATION].as_str() {
                Some(owner) => crate::bootstrap::ensure_owner(&cx.state.store, &child, owner)
                    .await
                    .map_err(|e| ApiError::Internal(format!("making {child}'s owner admin: {e}")))
                    .map(|()| cx.state.rbac.policies.invalidate(&child)),
                None => Ok(()),
            }
        })
    }
}
