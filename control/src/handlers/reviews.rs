//! The access reviews, answered from the RBAC policy and never stored:
//! SelfSubjectAccessReview and SelfSubjectRulesReview (`kubectl auth can-i`, `--list`),
//! SubjectAccessReview and LocalSubjectAccessReview (asking about someone else), and
//! authentication's SelfSubjectReview (`kubectl auth whoami`).

use http::StatusCode;
use serde_json::{Value, json};
use sluice_api::LogicalClusterPath;

use super::respond::{Ctx, Resp, json_value};
use super::scope::Scope;
use crate::auth::User;
use crate::errors::{ApiError, ApiResult, Cause};
use crate::pipeline::{self, FieldValidation, Write};
use crate::rbac::{Action, Decision, Rule};
use crate::state::ApiState;

/// Answer a review of type `scope.t`, posted as `body`.
pub fn serve(state: &ApiState, ctx: &mut Ctx, scope: &Scope<'_>, body: &[u8]) -> ApiResult<Resp> {
    let cluster = scope.cluster.as_ref().ok_or(ApiError::MethodNotAllowed)?;
    let mut w = Write {
        manager: String::new(),
        dry_run: true,
        field_validation: FieldValidation::parse(ctx.query.get("fieldValidation")),
        warnings: Vec::new(),
        user: None,
        audit_annotations: Vec::new(),
    };
    let mut review = pipeline::decode_body(state, scope.t, ctx.content_type(), body, &mut w)?;
    ctx.warnings.append(&mut w.warnings);
    let status = match scope.t.resource.as_str() {
        "selfsubjectaccessreviews" => access(state, cluster, &ctx.user, &review["spec"], None)?,
        "localsubjectaccessreviews" => {
            let subject = subject_of(&review["spec"]);
            access(
                state,
                cluster,
                &subject,
                &review["spec"],
                scope.namespace.as_deref(),
            )?
        }
        "subjectaccessreviews" => {
            let subject = subject_of(&review["spec"]);
            access(state, cluster, &subject, &review["spec"], None)?
        }
        "selfsubjectrulesreviews" => {
            let namespace = review["spec"]["namespace"].as_str().unwrap_or_default();
            rules_review(state, cluster, &ctx.user, namespace)
        }
        "selfsubjectreviews" => json!({"userInfo": {
            "username": ctx.user.name,
            "groups": ctx.user.groups.iter().map(String::as_str)
                .chain(std::iter::once(crate::rbac::bootstrap::AUTHENTICATED))
                .collect::<Vec<_>>(),
        }}),
        _ => return Err(ApiError::PathNotFound),
    };
    review["status"] = status;
    if !review["metadata"].is_object() {
        review["metadata"] = json!({});
    }
    review["metadata"]["creationTimestamp"] = Value::Null;
    Ok(json_value(StatusCode::CREATED, &review))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// The user a SubjectAccessReview asks about.
fn subject_of(spec: &Value) -> User {
    User {
        name: spec["user"].as_str().unwrap_or_default().to_string(),
        groups: strings(&spec["groups"]),
        binding: None,
    }
}

fn invalid(kind: &str, causes: Vec<Cause>) -> ApiError {
    ApiError::Invalid {
        gr: Default::default(),
        kind: kind.to_string(),
        name: String::new(),
        causes,
    }
}

/// `status` of an access review of `spec` for `user`; `namespace` is the namespace of a
/// LocalSubjectAccessReview, which its attributes must match.
fn access(
    state: &ApiState,
    cluster: &LogicalClusterPath,
    user: &User,
    spec: &Value,
    namespace: Option<&str>,
) -> ApiResult<Value> {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let resource = &spec["resourceAttributes"];
    let non_resource = &spec["nonResourceAttributes"];
    let (verb, group, res, sub, ns, name, path);
    let action = match (resource.is_object(), non_resource.is_object()) {
        (true, false) => {
            (verb, group, res, sub, ns, name) = (
                s(&resource["verb"]),
                s(&resource["group"]),
                s(&resource["resource"]),
                s(&resource["subresource"]),
                s(&resource["namespace"]),
                s(&resource["name"]),
            );
            if let Some(expected) = namespace
                && ns != expected
            {
                return Err(invalid(
                    "LocalSubjectAccessReview",
                    vec![Cause::invalid(
                        "spec.resourceAttributes.namespace",
                        &ns,
                        "must match metadata.namespace",
                    )],
                ));
            }
            Action::Resource {
                verb: &verb,
                group: &group,
                resource: &res,
                subresource: &sub,
                namespace: &ns,
                name: &name,
            }
        }
        (false, true) => {
            (verb, path) = (s(&non_resource["verb"]), s(&non_resource["path"]));
            Action::NonResource {
                verb: &verb,
                path: &path,
            }
        }
        _ => {
            return Err(invalid(
                "SubjectAccessReview",
                vec![Cause {
                    reason: "FieldValueRequired",
                    field: "spec.resourceAttributes".into(),
                    message: "Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified".into(),
                }],
            ));
        }
    };
    let allowed = state.rbac.decide(&state.store, cluster, user, &action) == Decision::Allow;
    Ok(if allowed {
        json!({"allowed": true, "reason": "RBAC: allowed"})
    } else {
        json!({"allowed": false})
    })
}

/// `status` of a SelfSubjectRulesReview: what `user` may do in `namespace`.
fn rules_review(
    state: &ApiState,
    cluster: &LogicalClusterPath,
    user: &User,
    namespace: &str,
) -> Value {
    let rules = state.rbac.rules_of(&state.store, cluster, user, namespace);
    let (urls, resources): (Vec<&Rule>, Vec<&Rule>) =
        rules.iter().partition(|r| !r.non_resource_urls.is_empty());
    json!({
        "resourceRules": resources.iter().map(|r| json!({
            "verbs": r.verbs,
            "apiGroups": r.api_groups,
            "resources": r.resources,
            "resourceNames": r.resource_names,
        })).collect::<Vec<_>>(),
        "nonResourceRules": urls.iter().map(|r| json!({
            "verbs": r.verbs,
            "nonResourceURLs": r.non_resource_urls,
        })).collect::<Vec<_>>(),
        "incomplete": false,
    })
}
