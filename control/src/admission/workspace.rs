//! Workspaces: a new one is Ready at once with its child cluster's path and URL, and that
//! cluster gets the system namespaces, and its creator `cluster-admin` of it, before the
//! client hears the workspace exists. Its `spec.policy` (what its tenants may do on the
//! shared clusters) is set or changed only by identities that may `update` the
//! `workspaces/policy` subresource here — the platform admin, not the tenant who created
//! it — and is validated field by field.

use serde_json::{Value, json};
use sluice_api::tenancy::PodSecurityLevel;

use crate::errors::{ApiError, ApiResult, Cause};
use crate::pipeline::hooks::{Committed, Deletion, Hook, HookCx, HookFuture};
use crate::rbac::{Action, Decision};
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

/// Refuse a change of `spec.policy` by a user who may not `update` `workspaces/policy` in
/// the workspace's parent (kube's 403 wording).
fn may_set_policy(cx: &HookCx<'_>, old: Option<&Value>, new: &Value) -> ApiResult<()> {
    let unchanged = old.map_or(&Value::Null, |o| &o["spec"]["policy"]) == &new["spec"]["policy"];
    let Some(user) = cx.user else { return Ok(()) };
    if unchanged {
        return Ok(());
    }
    let name = crate::object::name(new).unwrap_or_default();
    let action = Action::Resource {
        verb: "update",
        group: sluice_api::sluice::GROUP,
        resource: "workspaces",
        subresource: "policy",
        namespace: "",
        name,
    };
    match cx
        .state
        .rbac
        .decide(&cx.state.store, cx.cluster, user, &action)
    {
        Decision::Allow => Ok(()),
        Decision::NoOpinion => Err(crate::rbac::forbidden(user, &action)),
    }
}

/// The causes of an invalid `spec.policy`.
fn policy_causes(policy: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if policy.is_null() {
        return causes;
    }
    if !policy.is_object() {
        return vec![Cause::invalid(
            "spec.policy",
            &policy.to_string(),
            "must be an object",
        )];
    }
    let ps = &policy["podSecurity"];
    if !ps.is_null() && ps.as_str().and_then(PodSecurityLevel::parse).is_none() {
        causes.push(Cause {
            reason: "FieldValueNotSupported",
            field: "spec.policy.podSecurity".into(),
            message: format!(
                "Unsupported value: {ps}: supported values: \"privileged\", \"baseline\", \"restricted\""
            ),
        });
    }
    let ext = &policy["allowExternalIPs"];
    if !(ext.is_null() || ext.is_boolean()) {
        causes.push(Cause::invalid(
            "spec.policy.allowExternalIPs",
            &ext.to_string(),
            "must be true or false",
        ));
    }
    let selector = &policy["clusterSelector"];
    if !selector.is_null()
        && serde_json::from_value::<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>(
            selector.clone(),
        )
        .ok()
        .and_then(|s| sluice_kube::selector::Selector::parse(&s).ok())
        .is_none()
    {
        causes.push(Cause::invalid(
            "spec.policy.clusterSelector",
            &selector.to_string(),
            "must be a valid label selector",
        ));
    }
    causes.extend(crate::admission::sluice_kinds::capacity_causes(
        &policy["clusterQuota"],
        "spec.policy.clusterQuota",
    ));
    let domains = &policy["ingressDomains"];
    if !domains.is_null() {
        match domains.as_array() {
            None => causes.push(Cause::invalid(
                "spec.policy.ingressDomains",
                &domains.to_string(),
                "must be a list of DNS domains",
            )),
            Some(list) => {
                for (i, d) in list.iter().enumerate() {
                    let ok = d.as_str().is_some_and(|d| {
                        let d = d.strip_suffix('.').unwrap_or(d);
                        !d.is_empty()
                            && d.len() <= 253
                            && d.split('.').all(sluice_api::logical_cluster::is_dns_label)
                    });
                    if !ok {
                        causes.push(Cause::invalid(
                            format!("spec.policy.ingressDomains[{i}]"),
                            &d.to_string(),
                            "a lowercase RFC 1123 subdomain (no wildcard): the domain and its subdomains are delegated",
                        ));
                    }
                }
            }
        }
    }
    causes
}

impl Hook for WorkspaceHook {
    fn validate(&self, obj: &Value) -> Vec<Cause> {
        policy_causes(&obj["spec"]["policy"])
    }

    fn admit_update(
        &self,
        cx: &HookCx<'_>,
        old: &Value,
        new: &mut Value,
        _sub: Option<Subresource>,
    ) -> ApiResult<()> {
        may_set_policy(cx, Some(old), new)?;
        set_owner(new, old["metadata"]["annotations"].get(OWNER_ANNOTATION));
        Ok(())
    }

    fn admit_create(&self, cx: &HookCx<'_>, obj: &mut Value) -> ApiResult<()> {
        may_set_policy(cx, None, obj)?;
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
            let Committed::Written { new: obj, .. } = what else {
                return Ok(());
            };
            let Some(child) = crate::object::name(obj).and_then(|n| cx.cluster.child(n).ok())
            else {
                return Ok(());
            };
            crate::bootstrap::ensure_namespaces(
                &cx.state.store,
                &child,
                Some(&cx.state.downstream_names),
            )
            .await
            .map_err(|e| ApiError::Internal(format!("creating the namespaces of {child}: {e}")))?;
            // Its policy may have changed: the levels its namespaces (and those of the
            // workspaces below it) enforce follow.
            crate::admission::pod_security::restamp_namespaces(cx.state, &child)
                .await
                .map_err(|e| {
                    ApiError::Internal(format!("recording the pod security of {child}: {e}"))
                })?;
            // And the hosts its Ingresses may keep.
            crate::admission::ingress_hosts::restamp_ingresses(cx.state, &child)
                .await
                .map_err(|e| {
                    ApiError::Internal(format!("re-admitting the Ingress hosts of {child}: {e}"))
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
