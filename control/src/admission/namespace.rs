//! Namespaces as kube-apiserver's NamespaceLifecycle admission and namespace controller
//! treat them: deleting one marks it Terminating while its contents go; a physical
//! cluster's API server refuses to delete `default`, `kube-system` and `kube-public`.

use serde_json::Value;

use crate::errors::{ApiError, ApiResult};
use crate::pipeline::hooks::{Committed, Deletion, Hook, HookCx, HookFuture};

/// A physical cluster's namespaces get their `default` ServiceAccount as they are created
/// (before the client hears of the namespace, so its Pods never wait for one).
pub struct DefaultServiceAccount;

impl Hook for DefaultServiceAccount {
    fn committed<'a>(&'a self, cx: &'a HookCx<'a>, what: Committed<'a>) -> HookFuture<'a> {
        Box::pin(async move {
            let Committed::Written(obj) = what else {
                return Ok(());
            };
            if !obj["metadata"]["deletionTimestamp"].is_null() {
                return Ok(());
            }
            let Some(ns) = crate::object::name(obj) else {
                return Ok(());
            };
            crate::bootstrap::ensure_default_service_account(&cx.state.store, cx.cluster, ns)
                .await
                .map_err(|e| {
                    ApiError::Internal(format!("creating the default ServiceAccount of {ns}: {e}"))
                })
        })
    }
}

pub struct ProtectedNamespaces;

impl Hook for ProtectedNamespaces {
    fn admit_delete(&self, _cx: &HookCx<'_>, name: &str, _obj: &Value) -> ApiResult<()> {
        if crate::bootstrap::PROTECTED_NAMESPACES.contains(&name) {
            return Err(ApiError::Forbidden(format!(
                "namespaces \"{name}\" is forbidden: this namespace may not be deleted"
            )));
        }
        Ok(())
    }
}

pub struct NamespaceLifecycle;

impl Hook for NamespaceLifecycle {
    fn deletion(&self, _obj: &Value, _options: &Value) -> Option<Deletion> {
        Some(Deletion::Container { terminating: true })
    }
}
