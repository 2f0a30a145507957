//! CustomResourceDefinitions: accepted (status conditions) on every write of the main
//! resource, validated as structural, and their logical cluster's catalog rebuilt after a
//! commit or a removal.

use serde_json::Value;

use crate::errors::{ApiError, ApiResult, Cause};
use crate::pipeline::hooks::{Committed, Deletion, Hook, HookCx, HookFuture};
use crate::resources::Subresource;

pub struct CrdHook;

/// A workspace's conversion webhook is reached through its Service: a `url` would have the
/// control plane connect wherever a tenant names (see [`super::webhook_configs`]).
fn url_outside_root(cx: &HookCx<'_>, crd: &Value) -> ApiResult<()> {
    let url = &crd["spec"]["conversion"]["webhook"]["clientConfig"]["url"];
    if cx.cluster.is_root() || url.is_null() {
        return Ok(());
    }
    Err(ApiError::Invalid {
        gr: cx.t.gr.clone(),
        kind: cx.t.kind.clone(),
        name: crate::object::name(crd).unwrap_or_default().to_string(),
        causes: vec![Cause::forbidden(
            "spec.conversion.webhook.clientConfig.url",
            format!(
                "a conversion webhook of logical cluster {} is reached through its Service (clientConfig.service): the control plane calls no address a workspace names",
                cx.cluster
            ),
        )],
    })
}

impl Hook for CrdHook {
    fn admit_create(&self, cx: &HookCx<'_>, obj: &mut Value) -> ApiResult<()> {
        url_outside_root(cx, obj)?;
        obj["status"] = crate::crd::accepted_status(obj);
        Ok(())
    }

    fn admit_update(
        &self,
        cx: &HookCx<'_>,
        _old: &Value,
        new: &mut Value,
        sub: Option<Subresource>,
    ) -> ApiResult<()> {
        if sub.is_none() {
            url_outside_root(cx, new)?;
            new["status"] = crate::crd::accepted_status(new);
        }
        Ok(())
    }

    fn validate(&self, obj: &Value) -> Vec<Cause> {
        crate::crd::validate_crd(obj)
    }

    /// A CRD's custom resources are removed before it.
    fn deletion(&self, _obj: &Value, _options: &Value) -> Option<Deletion> {
        Some(Deletion::Container { terminating: false })
    }

    fn committed<'a>(&'a self, cx: &'a HookCx<'a>, what: Committed<'a>) -> HookFuture<'a> {
        cx.state.crds.rebuild(&cx.state.store, cx.cluster);
        Box::pin(async move {
            // Newly marked syncable: the objects it already has follow their namespaces.
            let Committed::Written { new, old } = what else {
                return Ok(());
            };
            let syncable = |crd: &Value| sluice_api::synced_kinds::syncable_kind(crd).is_some();
            if cx.state.annotation_for(cx.cluster).is_none()
                || !syncable(new)
                || old.is_some_and(syncable)
            {
                return Ok(());
            }
            let types = crate::crd::types_from_crd(new);
            crate::admission::placement::restamp_objects(cx.state, cx.cluster, &types, None)
                .await
                .map(|_| ())
                .map_err(|e| {
                    ApiError::Internal(format!(
                        "stamping the objects of {} with their placement: {e}",
                        crate::object::name(new).unwrap_or_default()
                    ))
                })
        })
    }
}
