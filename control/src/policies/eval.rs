//! One policy evaluated against one request and one parameter object, as kube's validator
//! does it: match conditions first (a false one skips the policy), then the variables in
//! order, the validations, their messages, and the audit annotations. Pure: what the
//! failures come to (deny, warn, audit; the failure policy) is the dispatcher's.

use std::collections::HashMap;

use serde_json::Value;

use super::config::{CONDITION_VARIABLES, MAX_MESSAGE_CHARS, Policy, Reason, VARIABLES};

/// kube's bound on an audit annotation's value (longer ones are cut).
pub const MAX_ANNOTATION_BYTES: usize = 10 * 1024;

/// What a policy is evaluated with.
pub struct Input<'a> {
    /// The `AdmissionRequest` (with `object` and `oldObject`), as `request`.
    pub request: &'a Value,
    /// The request's Namespace (null when cluster-scoped), as `namespaceObject`.
    pub namespace_object: &'a Value,
    /// The parameter object (null without one), as `params`.
    pub params: &'a Value,
}

/// A validation that did not pass, or an expression that could not be evaluated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub message: String,
    pub reason: Reason,
    /// The validation's index (`None` for match conditions and audit annotations).
    pub index: Option<usize>,
    /// An evaluation error (the failure policy decides), not a validation that was false.
    pub error: bool,
}

/// What evaluating a policy came to.
#[derive(Debug, Default)]
pub struct Evaluation {
    /// The match conditions held (false: the policy did not apply; nothing else is set).
    pub matched: bool,
    pub failures: Vec<Failure>,
    /// `(<policy>/<key>, value)` of the audit annotations that produced one.
    pub audit: Vec<(String, String)>,
}

fn error(message: String, index: Option<usize>) -> Failure {
    Failure {
        message,
        reason: Reason::Invalid,
        index,
        error: true,
    }
}

/// Evaluate `policy` for `input`.
pub fn evaluate(policy: &Policy, input: &Input<'_>) -> Evaluation {
    let mut cx = cel::Context::with_env(crate::cel::env());
    let request = input.request;
    cx.add_variable_from_value("object", crate::cel::to_cel(&request["object"]));
    cx.add_variable_from_value("oldObject", crate::cel::to_cel(&request["oldObject"]));
    cx.add_variable_from_value("request", crate::cel::to_cel(request));
    cx.add_variable_from_value("params", crate::cel::to_cel(input.params));
    cx.add_variable_from_value(
        "namespaceObject",
        crate::cel::to_cel(input.namespace_object),
    );
    let bounds = crate::cel::cost::Bounds::of(&[request, input.namespace_object, input.params]);
    let bounds = &bounds;
    match crate::webhooks::matching::all_hold(
        &policy.match_conditions,
        &CONDITION_VARIABLES,
        &cx,
        bounds,
    ) {
        Ok(true) => {}
        Ok(false) => return Evaluation::default(),
        Err(why) => {
            return Evaluation {
                matched: true,
                failures: vec![error(why, None)],
                audit: Vec::new(),
            };
        }
    }
    // Variables in order, each seeing the ones before it; one that fails is left out (an
    // expression naming it then fails with the variable's name).
    let mut variables: HashMap<String, cel::Value> = HashMap::new();
    cx.add_variable_from_value("variables", cel::Value::from(variables.clone()));
    for (name, source) in &policy.variables {
        if let Ok(v) = run(source, &cx, bounds) {
            variables.insert(name.clone(), v);
            cx.add_variable_from_value("variables", cel::Value::from(variables.clone()));
        }
    }
    let mut out = Evaluation {
        matched: true,
        ..Default::default()
    };
    for (i, v) in policy.validations.iter().enumerate() {
        match run(&v.expression, &cx, bounds) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => out.failures.push(Failure {
                message: message(v, &cx, bounds),
                reason: v.reason,
                index: Some(i),
                error: false,
            }),
            Ok(other) => out.failures.push(error(
                format!(
                    "expression '{}' resulted in error: must evaluate to bool, not {:?}",
                    v.expression.trim(),
                    other.type_of()
                ),
                Some(i),
            )),
            Err(e) => out.failures.push(error(
                format!(
                    "expression '{}' resulted in error: {e}",
                    v.expression.trim()
                ),
                Some(i),
            )),
        }
    }
    for (key, source) in &policy.audit_annotations {
        match run(source, &cx, bounds) {
            Ok(cel::Value::String(s)) if !s.is_empty() => {
                let mut value = s.to_string();
                if value.len() > MAX_ANNOTATION_BYTES {
                    let mut cut = MAX_ANNOTATION_BYTES;
                    while !value.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    value.truncate(cut);
                }
                out.audit.push((format!("{}/{key}", policy.name), value));
            }
            Ok(cel::Value::String(_) | cel::Value::Null) => {}
            Ok(other) => out.failures.push(error(
                format!(
                    "valueExpression '{}' resulted in error: must evaluate to a string or null, not {:?}",
                    source.trim(),
                    other.type_of()
                ),
                None,
            )),
            Err(e) => out.failures.push(error(
                format!(
                    "valueExpression '{}' resulted in error: {e}",
                    source.trim()
                ),
                None,
            )),
        }
    }
    out
}

/// Run `source` (compiled once per thread) in `cx`, if within the cost limit for values
/// within `bounds`.
fn run(
    source: &str,
    cx: &cel::Context<'_, '_>,
    bounds: &crate::cel::cost::Bounds,
) -> Result<cel::Value, String> {
    let compiled = crate::cel::compiled(source, &VARIABLES)
        .ok_or_else(|| "the expression does not compile".to_string())?;
    crate::cel::execute_bounded(&compiled, cx, bounds)
}

/// A failed validation's message, as kube chooses it: the messageExpression's result when
/// it is a non-blank single line, else `message`, else `failed expression: <expression>`.
fn message(
    v: &super::config::Validation,
    cx: &cel::Context<'_, '_>,
    bounds: &crate::cel::cost::Bounds,
) -> String {
    if let Some(source) = &v.message_expression {
        match run(source, cx, bounds) {
            Ok(cel::Value::String(s)) if !s.trim().is_empty() && !s.contains('\n') => {
                return s.chars().take(MAX_MESSAGE_CHARS).collect();
            }
            Ok(other) => {
                tracing::debug!(expression = %source, result = ?other.type_of(), "messageExpression gave no usable message")
            }
            Err(e) => tracing::debug!(expression = %source, error = %e, "messageExpression failed"),
        }
    }
    match v.message.as_deref().map(str::trim) {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => format!("failed expression: {}", v.expression.trim()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::config::parse_policy;
    use super::*;

    fn policy(spec: Value) -> Policy {
        parse_policy(&json!({"metadata": {"name": "p.example.com"}, "spec": spec})).unwrap()
    }

    const RULES: &str = r#"{"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["*"], "resources": ["deployments"]}]}"#;

    fn rules() -> Value {
        serde_json::from_str(RULES).unwrap()
    }

    fn request(replicas: i64) -> Value {
        json!({"operation": "CREATE", "object": {"metadata": {"name": "web", "labels": {"team": "a"}}, "spec": {"replicas": replicas}}, "oldObject": null})
    }

    #[test]
    fn validations_pass_fail_and_err_with_kubes_messages() {
        let p = policy(json!({
            "matchConstraints": rules(),
            "variables": [{"name": "r", "expression": "object.spec.replicas"}],
            "validations": [
                {"expression": "variables.r <= 5"},
                {"expression": "variables.r <= int(params.max)", "messageExpression": "'at most ' + string(params.max) + ' replicas'", "reason": "Forbidden"},
                {"expression": "object.spec.missing > 1", "message": "never shown"},
                {"expression": "variables.r != 7", "message": "not seven"},
            ],
            "auditAnnotations": [{"key": "replicas", "valueExpression": "string(variables.r)"}],
        }));
        let params = json!({"max": 3});
        let req = request(7);
        let e = evaluate(
            &p,
            &Input {
                request: &req,
                namespace_object: &Value::Null,
                params: &params,
            },
        );
        assert!(e.matched);
        let messages: Vec<(&str, bool)> = e
            .failures
            .iter()
            .map(|f| (f.message.as_str(), f.error))
            .collect();
        assert_eq!(messages[0], ("failed expression: variables.r <= 5", false));
        assert_eq!(messages[1], ("at most 3 replicas", false));
        assert_eq!(e.failures[1].reason, Reason::Forbidden);
        assert!(messages[2].1, "{messages:?}");
        assert!(
            messages[2]
                .0
                .starts_with("expression 'object.spec.missing > 1' resulted in error:")
        );
        assert_eq!(messages[3], ("not seven", false));
        assert_eq!(
            e.audit,
            vec![("p.example.com/replicas".to_string(), "7".to_string())]
        );
        let req = request(2);
        let ok = evaluate(
            &p,
            &Input {
                request: &req,
                namespace_object: &Value::Null,
                params: &params,
            },
        );
        assert_eq!(ok.failures.len(), 1, "{:?}", ok.failures);
        assert!(ok.failures[0].error);
    }

    #[test]
    fn a_false_match_condition_skips_the_policy() {
        let p = policy(json!({
            "matchConstraints": rules(),
            "matchConditions": [{"name": "team-a", "expression": "object.metadata.labels.team == 'a'"},
                                {"name": "ns", "expression": "namespaceObject.metadata.name != 'kube-system'"}],
            "validations": [{"expression": "false"}],
        }));
        let req = request(1);
        let ns = json!({"metadata": {"name": "kube-system"}});
        let skipped = evaluate(
            &p,
            &Input {
                request: &req,
                namespace_object: &ns,
                params: &Value::Null,
            },
        );
        assert!(!skipped.matched && skipped.failures.is_empty());
        let ns = json!({"metadata": {"name": "shop"}});
        let applied = evaluate(
            &p,
            &Input {
                request: &req,
                namespace_object: &ns,
                params: &Value::Null,
            },
        );
        assert!(applied.matched);
        assert_eq!(applied.failures[0].message, "failed expression: false");
        let errs = evaluate(
            &p,
            &Input {
                request: &req,
                namespace_object: &Value::Null,
                params: &Value::Null,
            },
        );
        assert!(errs.failures[0].error, "{:?}", errs.failures);
    }
}
