//! Namespaces as kube-apiserver's NamespaceLifecycle admission and namespace controller
//! treat them: deleting one marks it Terminating while its contents go; a physical
//! cluster's API server refuses to delete `default`, `kube-system` and `kube-public`.

use serde_json::Value;

use crate::errors::{ApiError, ApiResult};
use crate::pipeline::hooks::{Deletion, Hook, HookCx};

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
