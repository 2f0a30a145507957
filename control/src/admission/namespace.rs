//! Namespaces as kube-apiserver's NamespaceLifecycle admission and namespace controller
//! treat them: deleting one marks it Terminating while its contents go; a physical
//! cluster's API server refuses to delete `default`, `kube-system` and `kube-public`.

use std::collections::BTreeMap;

use serde_json::Value;
use sluice_api::LogicalClusterPath;
use sluice_api::sync::LABEL_CLUSTER;

use crate::errors::{ApiError, ApiResult};
use crate::pipeline::hooks::{Committed, Deletion, Hook, HookCx, HookFuture};
use crate::resources::Subresource;
use crate::storage::ResourcePrefix;

/// A physical cluster's namespaces get their `default` ServiceAccount as they are created
/// (before the client hears of the namespace, so its Pods never wait for one).
pub struct DefaultServiceAccount;

impl Hook for DefaultServiceAccount {
    fn committed<'a>(&'a self, cx: &'a HookCx<'a>, what: Committed<'a>) -> HookFuture<'a> {
        Box::pin(async move {
            let Committed::Written { new: obj, .. } = what else {
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

/// In a workspace, a namespace may be pinned (`sluice.dev/cluster`) only to a physical
/// cluster its workspace's policy lets it use (`spec.policy.clusterSelector`, of it and of
/// every workspace above it); placement applies the same policy to what it chooses.
pub struct AllowedCluster;

impl AllowedCluster {
    fn check(cx: &HookCx<'_>, old: Option<&Value>, new: &Value) -> ApiResult<()> {
        let label = |o: &Value| {
            o["metadata"]["labels"][LABEL_CLUSTER]
                .as_str()
                .map(str::to_string)
        };
        let Some(want) = label(new) else {
            return Ok(());
        };
        if cx.user.is_none() || old.and_then(label).as_deref() == Some(want.as_str()) {
            return Ok(());
        }
        let policy = crate::tenancy::effective(&cx.state.store, cx.cluster);
        if policy.cluster_selectors.is_empty() {
            return Ok(());
        }
        // A cluster that does not exist is placement's to report (ClusterNotFound).
        let key = ResourcePrefix::new(sluice_api::sluice::GROUP, "clusters").key(
            &LogicalClusterPath::root(),
            None,
            &want,
        );
        let Some(cluster) = cx
            .state
            .store
            .get(&key)
            .and_then(|e| serde_json::from_slice::<Value>(&e.value).ok())
        else {
            return Ok(());
        };
        let labels: BTreeMap<String, String> =
            serde_json::from_value(cluster["metadata"]["labels"].clone()).unwrap_or_default();
        if crate::tenancy::cluster_allowed(&policy, &labels) {
            return Ok(());
        }
        Err(ApiError::RbacForbidden {
            gr: cx.t.gr.clone(),
            name: crate::object::name(new).unwrap_or_default().to_string(),
            message: format!(
                "cluster {want:?} is not one that logical cluster {} may use (its workspace's spec.policy.clusterSelector)",
                cx.cluster
            ),
        })
    }
}

impl Hook for AllowedCluster {
    fn admit_create(&self, cx: &HookCx<'_>, obj: &mut Value) -> ApiResult<()> {
        Self::check(cx, None, obj)
    }

    fn admit_update(
        &self,
        cx: &HookCx<'_>,
        old: &Value,
        new: &mut Value,
        _sub: Option<Subresource>,
    ) -> ApiResult<()> {
        Self::check(cx, Some(old), new)
    }
}
