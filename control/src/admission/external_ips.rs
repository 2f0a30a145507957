//! `Service.spec.externalIPs` refused in workspaces whose policy does not allow them, as
//! kube's `DenyServiceExternalIPs` admission refuses them: a Service's external IPs make
//! every node of the shared cluster intercept traffic to those addresses (CVE-2020-8554).
//! An update may keep or drop the addresses it had; it may not add any.

use serde_json::Value;

use crate::errors::{ApiError, ApiResult};
use crate::pipeline::hooks::{Hook, HookCx};
use crate::resources::Subresource;

pub struct ExternalIps;

fn ips(obj: &Value) -> impl Iterator<Item = &Value> {
    obj["spec"]["externalIPs"].as_array().into_iter().flatten()
}

impl ExternalIps {
    fn check(cx: &HookCx<'_>, old: Option<&Value>, new: &Value) -> ApiResult<()> {
        if cx.user.is_none() {
            return Ok(());
        }
        let added = ips(new).any(|ip| old.is_none_or(|o| !ips(o).any(|had| had == ip)));
        if !added || crate::tenancy::effective(&cx.state.store, cx.cluster).allow_external_ips {
            return Ok(());
        }
        Err(ApiError::RbacForbidden {
            gr: cx.t.gr.clone(),
            name: crate::object::name(new).unwrap_or_default().to_string(),
            message: "Use of external IPs is denied by admission control".into(),
        })
    }
}

impl Hook for ExternalIps {
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
