//! Workspaces: a new one is Ready at once with its child cluster's path and URL, and that
//! cluster gets the system namespaces, and its creator `cluster-admin` of it, before the
//! client hears the workspace exists.

use serde_json::{Value, json};

use crate::errors::{ApiError, ApiResult};
use crate::pipeline::hooks::{Committed, Deletion, Hook, HookCx, HookFuture};

pub struct WorkspaceHook;

impl Hook for WorkspaceHook {
    fn admit_create(&self, cx: &HookCx<'_>, obj: &mut Value) -> ApiResult<()> {
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
            match cx.user.filter(|u| !u.is_admin()) {
                Some(user) => crate::bootstrap::ensure_owner(&cx.state.store, &child, &user.name)
                    .await
                    .map_err(|e| ApiError::Internal(format!("making {child}'s owner admin: {e}")))
                    .map(|()| cx.state.rbac.policies.invalidate(&child)),
                None => Ok(()),
            }
        })
    }
}
