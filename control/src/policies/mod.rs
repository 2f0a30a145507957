//! ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1) of each logical cluster:
//! CEL rules the API server evaluates itself, before the validating webhooks, as kube's
//! `ValidatingAdmissionPolicy` plugin does. A policy says what to check and on which
//! requests; each of its bindings says where it applies, with which parameters, and what a
//! failed check does (`Deny` the request, `Warn` the client, `Audit` in the audit log).
//!
//! Both live in the logical cluster they govern, so a tenant's policy sees and reads only
//! its own objects; what webhooks never see ([`crate::webhooks::exempt`]) policies never
//! see either.

pub mod config;
pub mod eval;
pub mod matching;
pub mod params;

use std::collections::HashMap;

use serde_json::Value;

use config::{Action, Binding, NotFound, Policy};
use eval::{Evaluation, Failure, Input};

use crate::errors::{ApiError, ApiResult};
use crate::state::ApiState;
use crate::storage::ResourcePrefix;
use crate::webhooks::config::FailurePolicy;
use crate::webhooks::{self, Admission};

/// The audit annotation kube records failures of `Audit` bindings under.
pub const VALIDATION_FAILURE_ANNOTATION: &str =
    "validation.policy.admission.k8s.io/validation_failure";

/// Every object of `resource` in `cluster` that parses (each was checked when written).
fn stored<T>(
    state: &ApiState,
    cluster: &sluice_api::LogicalClusterPath,
    resource: &str,
    parse: impl Fn(&Value) -> Result<T, Vec<crate::errors::Cause>>,
) -> Vec<T> {
    let prefix =
        ResourcePrefix::new("admissionregistration.k8s.io", resource).scope(Some(cluster), None);
    let mut out = Vec::new();
    state.store.scan(&prefix, None, |_, e| {
        if let Ok(obj) = serde_json::from_slice::<Value>(&e.value)
            && let Ok(t) = parse(&obj)
        {
            out.push(t);
        }
        true
    });
    out
}

/// One failure that a binding's actions apply to.
struct Decision<'p> {
    policy: &'p Policy,
    binding: &'p Binding,
    failure: Failure,
}

/// Evaluate the policies of `a`'s cluster on the request (`obj` the new object, `None` for
/// a deletion; `old` what it replaces). A failure under a `Deny` binding refuses the
/// request with kube's error. Warnings for the client (`Warn` bindings) go to `warnings`,
/// annotations for the request's audit event (`Audit` bindings, `auditAnnotations`) to
/// `audit` — refused or not.
pub fn validate(
    state: &ApiState,
    a: &Admission<'_>,
    obj: Option<&Value>,
    old: Option<&Value>,
    warnings: &mut Vec<String>,
    audit: &mut Vec<(String, String)>,
) -> ApiResult<()> {
    if webhooks::exempt(a) {
        return Ok(());
    }
    let bindings = stored(
        state,
        a.cluster,
        "validatingadmissionpolicybindings",
        config::parse_binding,
    );
    if bindings.is_empty() {
        return Ok(());
    }
    let policies: HashMap<String, Policy> = stored(
        state,
        a.cluster,
        "validatingadmissionpolicies",
        config::parse_policy,
    )
    .into_iter()
    .map(|p| (p.name.clone(), p))
    .collect();
    let ns_labels = webhooks::namespace_labels(state, a, obj.or(old));
    let attrs = webhooks::attributes(a, obj, old, ns_labels);
    let request = webhooks::request_view(a, &attrs);
    let namespace_object = namespace_object(state, a, obj.or(old));
    let mut decisions = Vec::new();
    for binding in &bindings {
        // A binding naming no policy is ignored, as kube ignores it.
        let Some(policy) = policies.get(&binding.policy) else {
            continue;
        };
        if !matching::matches(&policy.constraints, &attrs, a.name)
            || binding
                .resources
                .as_ref()
                .is_some_and(|m| !matching::matches(m, &attrs, a.name))
        {
            continue;
        }
        let started = std::time::Instant::now();
        let span = tracing::debug_span!("admission policy", policy = %policy.name,
            binding = %binding.name, resource = %a.t.resource, name = %a.name, cluster = %a.cluster);
        let _entered = span.enter();
        let mut failures = Vec::new();
        match parameters(state, a, policy, binding) {
            Err(why) => failures.push(Failure {
                message: why,
                reason: config::Reason::Invalid,
                index: None,
                error: true,
            }),
            Ok(list) => {
                for params in &list {
                    let e: Evaluation = eval::evaluate(
                        policy,
                        &Input {
                            request: &request,
                            namespace_object: &namespace_object,
                            params,
                        },
                    );
                    failures.extend(e.failures);
                    for (k, v) in e.audit {
                        if !audit.iter().any(|(have, _)| *have == k) {
                            audit.push((k, v));
                        }
                    }
                }
            }
        }
        // Errors count only under `failurePolicy: Fail`.
        failures.retain(|f| !f.error || policy.failure_policy == FailurePolicy::Fail);
        let result = if failures.is_empty() {
            "admit"
        } else if binding.actions.contains(&Action::Deny) {
            "deny"
        } else {
            "warn_or_audit"
        };
        state
            .metrics
            .record_policy(&policy.name, result, started.elapsed());
        decisions.extend(failures.into_iter().map(|failure| Decision {
            policy,
            binding,
            failure,
        }));
    }
    let mut audit_failures = Vec::new();
    let mut denied = None;
    for d in &decisions {
        for action in &d.binding.actions {
            match action {
                Action::Deny => {
                    denied.get_or_insert(d);
                }
                Action::Warn => {
                    let w = format!(
                        "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{}': {}",
                        d.policy.name, d.binding.name, d.failure.message
                    );
                    if !warnings.contains(&w) {
                        warnings.push(w);
                    }
                }
                Action::Audit => audit_failures.push(serde_json::json!({
                    "message": d.failure.message,
                    "policy": d.policy.name,
                    "binding": d.binding.name,
                    "expressionIndex": d.failure.index,
                    "validationActions": d.binding.actions.iter().map(|a| a.as_str()).collect::<Vec<_>>(),
                })),
            }
        }
    }
    if !audit_failures.is_empty() {
        audit.push((
            VALIDATION_FAILURE_ANNOTATION.to_string(),
            Value::Array(audit_failures).to_string(),
        ));
    }
    if let Some(d) = denied {
        tracing::info!(policy = %d.policy.name, binding = %d.binding.name,
            resource = %a.t.resource, name = %a.name, cluster = %a.cluster,
            message = %d.failure.message, "admission policy denied the request");
        let message = format!(
            "ValidatingAdmissionPolicy '{}' with binding '{}' denied request: {}",
            d.policy.name, d.binding.name, d.failure.message
        );
        return Err(ApiError::PolicyDenied {
            gr: a.t.gr.clone(),
            name: a.name.to_string(),
            code: d.failure.reason.code(),
            reason: d.failure.reason.as_str(),
            message,
        });
    }
    Ok(())
}

/// The request's Namespace as `namespaceObject` sees it (null when cluster-scoped).
fn namespace_object(state: &ApiState, a: &Admission<'_>, object: Option<&Value>) -> Value {
    if a.t.group.is_empty() && a.t.resource == "namespaces" {
        return object.cloned().unwrap_or_default();
    }
    a.namespace
        .and_then(|ns| state.namespace(a.cluster, ns))
        .map(|ns| (*ns).clone())
        .unwrap_or_default()
}

/// The parameter objects the policy is evaluated with under `binding`: one null without a
/// `paramKind` or a `paramRef` (as kube), none when they are missing and the binding
/// allows it; an error for a misconfiguration or missing parameters it denies.
fn parameters(
    state: &ApiState,
    a: &Admission<'_>,
    policy: &Policy,
    binding: &Binding,
) -> Result<Vec<Value>, String> {
    let (Some(kind), Some(param_ref)) = (&policy.param_kind, &binding.param_ref) else {
        return Ok(vec![Value::Null]);
    };
    let found =
        params::find(state, a.cluster, kind, param_ref, a.namespace).map_err(|e| e.to_string())?;
    if found.is_empty() && param_ref.not_found == NotFound::Deny {
        return Err(
            "no params found for policy binding with `Deny` parameterNotFoundAction".into(),
        );
    }
    Ok(found)
}
