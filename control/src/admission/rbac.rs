//! RBAC objects: kube-apiserver's escalation prevention (a user may only grant what it
//! holds, unless it may `escalate` roles or `bind` the role it names) and a binding's
//! immutable `roleRef`; and every admitted change drops the logical cluster's indexed
//! policy at once, so the writer's next request sees it.

use serde_json::Value;

use crate::errors::{ApiError, ApiResult, Cause};
use crate::pipeline::hooks::{Committed, Hook, HookCx, HookFuture};
use crate::rbac::{self, Action, Decision, Rule};
use crate::resources::{ResourceType, Subresource};

pub struct RbacHook;

fn rules_of(obj: &Value) -> Vec<Rule> {
    serde_json::from_value(obj["rules"].clone()).unwrap_or_default()
}

fn namespace_of(obj: &Value) -> &str {
    obj["metadata"]["namespace"].as_str().unwrap_or_default()
}

impl RbacHook {
    /// Refuse a Role or binding that would give more than its writer holds.
    fn no_escalation(&self, cx: &HookCx<'_>, obj: &Value) -> ApiResult<()> {
        let Some(user) = cx.user else {
            return Ok(());
        };
        if user.is_admin() {
            return Ok(());
        }
        let t = cx.t;
        let namespace = namespace_of(obj);
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        let may = |verb: &str, resource: &str, name: &str| {
            cx.state.rbac.decide(
                &cx.state.store,
                cx.cluster,
                user,
                &Action::Resource {
                    verb,
                    group: rbac::policy::GROUP,
                    resource,
                    subresource: "",
                    namespace,
                    name,
                },
            ) == Decision::Allow
        };
        let (granted, exempt) = match t.kind.as_str() {
            "Role" | "ClusterRole" => (rules_of(obj), may("escalate", &t.resource, name)),
            _ => {
                let role_ref = &obj["roleRef"];
                let kind = role_ref["kind"].as_str().unwrap_or_default();
                let role = role_ref["name"].as_str().unwrap_or_default();
                let resource = if kind == "Role" {
                    "roles"
                } else {
                    "clusterroles"
                };
                let rules =
                    rbac::policy::role_rules(&cx.state.store, cx.cluster, kind, namespace, role)
                        .unwrap_or_default();
                (rules, may("bind", resource, role))
            }
        };
        if exempt {
            return Ok(());
        }
        let held = cx
            .state
            .rbac
            .rules_of(&cx.state.store, cx.cluster, user, namespace);
        let missing: Vec<&Rule> = granted
            .iter()
            .filter(|r| !rbac::rules::covers(&held, r))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let scope = if namespace.is_empty() {
            String::new()
        } else {
            format!(" in namespace {namespace:?}")
        };
        Err(ApiError::RbacForbidden {
            gr: t.gr.clone(),
            name: name.to_string(),
            message: format!(
                "user {:?} (groups={:?}) is attempting to grant RBAC permissions not currently held{scope}: {}",
                user.name,
                user.groups,
                serde_json::to_string(&missing).unwrap_or_default()
            ),
        })
    }
}

fn is_binding(t: &ResourceType) -> bool {
    t.kind.ends_with("Binding")
}

impl Hook for RbacHook {
    fn admit_create(&self, cx: &HookCx<'_>, obj: &mut Value) -> ApiResult<()> {
        self.no_escalation(cx, obj)
    }

    fn admit_update(
        &self,
        cx: &HookCx<'_>,
        old: &Value,
        new: &mut Value,
        _sub: Option<Subresource>,
    ) -> ApiResult<()> {
        if is_binding(cx.t) && old["roleRef"] != new["roleRef"] {
            return Err(ApiError::Invalid {
                gr: cx.t.gr.clone(),
                kind: cx.t.kind.clone(),
                name: new["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                causes: vec![Cause::invalid(
                    "roleRef",
                    &new["roleRef"].to_string(),
                    "cannot change roleRef",
                )],
            });
        }
        self.no_escalation(cx, new)
    }

    fn validate(&self, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        if obj["kind"].as_str().is_some_and(|k| k.ends_with("Binding")) {
            let kind = obj["roleRef"]["kind"].as_str().unwrap_or_default();
            let cluster_binding = obj["kind"] == "ClusterRoleBinding";
            if cluster_binding && kind == "Role" {
                causes.push(Cause {
                    reason: "FieldValueNotSupported",
                    field: "roleRef.kind".into(),
                    message: "Unsupported value: \"Role\": supported values: \"ClusterRole\""
                        .into(),
                });
            } else if !["Role", "ClusterRole"].contains(&kind) {
                causes.push(Cause {
                    reason: "FieldValueNotSupported",
                    field: "roleRef.kind".into(),
                    message: format!(
                        "Unsupported value: {}: supported values: \"Role\", \"ClusterRole\"",
                        Value::String(kind.into())
                    ),
                });
            }
            if obj["roleRef"]["name"]
                .as_str()
                .unwrap_or_default()
                .is_empty()
            {
                causes.push(Cause::required("roleRef.name"));
            }
        }
        for (i, s) in obj["subjects"].as_array().into_iter().flatten().enumerate() {
            let kind = s["kind"].as_str().unwrap_or_default();
            if !["User", "Group", "ServiceAccount"].contains(&kind) {
                causes.push(Cause {
                    reason: "FieldValueNotSupported",
                    field: format!("subjects[{i}].kind"),
                    message: format!(
                        "Unsupported value: {}: supported values: \"ServiceAccount\", \"User\", \"Group\"",
                        Value::String(kind.into())
                    ),
                });
            }
            if s["name"].as_str().unwrap_or_default().is_empty() {
                causes.push(Cause::required(format!("subjects[{i}].name")));
            }
        }
        causes
    }

    fn committed<'a>(&'a self, cx: &'a HookCx<'a>, _what: Committed<'a>) -> HookFuture<'a> {
        cx.state.rbac.policies.invalidate(cx.cluster);
        Box::pin(async { Ok(()) })
    }
}
