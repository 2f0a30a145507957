//! CustomResourceDefinitions: accepted (status conditions) on every write of the main
//! resource, validated as structural, and their logical cluster's catalog rebuilt after a
//! commit or a removal.

use serde_json::Value;

use crate::errors::{ApiResult, Cause};
use crate::pipeline::hooks::{Committed, Deletion, Hook, HookCx, HookFuture};
use crate::resources::Subresource;

pub struct CrdHook;

impl Hook for CrdHook {
    fn admit_create(&self, _cx: &HookCx<'_>, obj: &mut Value) -> ApiResult<()> {
        obj["status"] = crate::crd::accepted_status(obj);
        Ok(())
    }

    fn admit_update(
        &self,
        _cx: &HookCx<'_>,
        _old: &Value,
        new: &mut Value,
        sub: Option<Subresource>,
    ) -> ApiResult<()> {
        if sub.is_none() {
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

    fn committed<'a>(&'a self, cx: &'a HookCx<'a>, _what: Committed<'a>) -> HookFuture<'a> {
        cx.state.crds.rebuild(&cx.state.store, cx.cluster);
        Box::pin(async { Ok(()) })
    }
}
