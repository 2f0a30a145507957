//! CustomResourceDefinitions: accepted (status conditions) on every write of the main
//! resource, validated as structural, and their logical cluster's catalog rebuilt after a
//! commit or a removal.

use serde_json::Value;

use crate::errors::{ApiError, ApiResult, Cause};
use crate::pipeline::hooks::{Committed, Deletion, Hook, HookCx, HookFuture};
use crate::resources::Subresource;

pub struct CrdHook;

/// Conversion webhooks are not called: a CRD that asks for one is told, in a warning, that
/// its versions convert as with strategy `None` (only `apiVersion` changes).
fn warn_conversion(cx: &HookCx<'_>, crd: &Value) {
    let served = crd["spec"]["versions"]
        .as_array()
        .map_or(0, |v| v.iter().filter(|v| v["served"] == true).count());
    if crd["spec"]["conversion"]["strategy"] == "Webhook" && served > 1 {
        cx.warn(
            "spec.conversion.strategy: Webhook is not called by Sluice: objects are converted between versions as with strategy None (apiVersion only)".into(),
        );
    }
}

impl Hook for CrdHook {
    fn admit_create(&self, cx: &HookCx<'_>, obj: &mut Value) -> ApiResult<()> {
        obj["status"] = crate::crd::accepted_status(obj);
        warn_conversion(cx, obj);
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
            new["status"] = crate::crd::accepted_status(new);
            warn_conversion(cx, new);
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
