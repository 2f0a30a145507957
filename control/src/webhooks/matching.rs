//! Which webhooks a request is sent to, as kube decides it: a rule matching its operation,
//! group, version, resource (with subresource) and scope; the namespace's labels; the
//! object's (or the old object's) labels. Pure: unit-tested without a server.

use std::collections::BTreeMap;

use serde_json::Value;

use super::config::{CONDITION_VARIABLES, Rule, Scope, Webhook};

/// The operation of an admission request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }

    /// The options kind kube sends with it.
    pub fn options_kind(self) -> &'static str {
        match self {
            Operation::Create => "CreateOptions",
            Operation::Update => "UpdateOptions",
            Operation::Delete => "DeleteOptions",
        }
    }
}

/// What a webhook is matched against: the request's attributes.
pub struct Attributes<'a> {
    pub operation: Operation,
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
    pub subresource: Option<&'a str>,
    /// Whether the resource is namespaced.
    pub namespaced: bool,
    /// The new object (`None` for a deletion).
    pub object: Option<&'a Value>,
    /// The object it replaces (updates and deletions).
    pub old_object: Option<&'a Value>,
    /// The labels of the request's namespace (a Namespace's own for a Namespace), `None`
    /// for cluster-scoped objects that are not Namespaces.
    pub namespace_labels: Option<BTreeMap<String, String>>,
}

pub(crate) fn listed(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == "*" || v == value)
}

/// Whether `pattern` of a rule's `resources` names `resource` with `subresource`.
fn resource_matches(pattern: &str, resource: &str, subresource: Option<&str>) -> bool {
    let (res, sub) = pattern.split_once('/').unwrap_or((pattern, ""));
    let res_ok = res == "*" || res == resource;
    match (sub, subresource) {
        ("", None) => res_ok,
        ("", Some(_)) => false,
        ("*", _) => res_ok,
        (s, Some(want)) => res_ok && s == want,
        (_, None) => false,
    }
}

pub(crate) fn rule_matches(rule: &Rule, a: &Attributes<'_>) -> bool {
    let scope_ok = match rule.scope {
        Scope::All => true,
        Scope::Cluster => !a.namespaced,
        Scope::Namespaced => a.namespaced,
    };
    scope_ok
        && listed(&rule.operations, a.operation.as_str())
        && listed(&rule.groups, a.group)
        && listed(&rule.versions, a.version)
        && rule
            .resources
            .iter()
            .any(|p| resource_matches(p, a.resource, a.subresource))
}

pub fn labels_of(obj: &Value) -> BTreeMap<String, String> {
    obj["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

/// Whether `hook` is called for the request `a`.
pub fn matches(hook: &Webhook, a: &Attributes<'_>) -> bool {
    if !hook.rules.iter().any(|r| rule_matches(r, a)) {
        return false;
    }
    if let Some(labels) = &a.namespace_labels
        && !hook.namespace_selector.matches(labels)
    {
        return false;
    }
    // kube: the object selector is met when the new object or the old one meets it.
    [a.object, a.old_object]
        .into_iter()
        .flatten()
        .any(|o| hook.object_selector.matches(&labels_of(o)))
        || (a.object.is_none() && a.old_object.is_none())
}

/// Whether every match condition of `hook` holds for `request` (the review's
/// `AdmissionRequest`, whose `object` and `oldObject` the conditions also see by name), as
/// kube decides: a false one skips the webhook; otherwise an error is returned (the
/// webhook's `failurePolicy` decides).
pub fn conditions_hold(hook: &Webhook, request: &Value) -> Result<bool, String> {
    if hook.match_conditions.is_empty() {
        return Ok(true);
    }
    let mut cx = cel::Context::with_env(crate::cel::env());
    cx.add_variable_from_value("object", crate::cel::to_cel(&request["object"]));
    cx.add_variable_from_value("oldObject", crate::cel::to_cel(&request["oldObject"]));
    cx.add_variable_from_value("request", crate::cel::to_cel(request));
    let bounds = crate::cel::cost::Bounds::of(&[request]);
    all_hold(&hook.match_conditions, &CONDITION_VARIABLES, &cx, &bounds)
}

/// Whether every one of `conditions` (name, expression compiled with `declared`) holds in
/// `cx` (whose values are within `bounds`): a false one is `Ok(false)` whatever the others
/// do; otherwise the first error (one over the cost limit is an error).
pub fn all_hold(
    conditions: &[(String, String)],
    declared: &[&str],
    cx: &cel::Context<'_, '_>,
    bounds: &crate::cel::cost::Bounds,
) -> Result<bool, String> {
    let mut error = None;
    for (name, expression) in conditions {
        let Some(c) = crate::cel::compiled(expression, declared) else {
            error = Some(format!("matchCondition {name:?} does not compile"));
            continue;
        };
        match crate::cel::execute_bounded(&c, cx, bounds) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => return Ok(false),
            Ok(other) => {
                error = Some(format!(
                    "matchCondition {name:?} evaluated to {:?}, not a bool",
                    other.type_of()
                ));
            }
            Err(e) => error = Some(format!("matchCondition {name:?}: {e}")),
        }
    }
    error.map_or(Ok(true), Err)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::config::{Phase, parse};
    use super::*;

    fn hook(rules: Value, ns: Value, obj: Value) -> Webhook {
        let c = json!({"metadata": {"name": "c"}, "webhooks": [{
            "name": "v.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": {"url": "https://127.0.0.1:1/"},
            "rules": rules, "namespaceSelector": ns, "objectSelector": obj,
        }]});
        parse(&c, Phase::Validating).unwrap().remove(0)
    }

    fn attrs<'a>(
        op: Operation,
        resource: &'a str,
        sub: Option<&'a str>,
        object: &'a Value,
        ns_labels: &[(&str, &str)],
    ) -> Attributes<'a> {
        Attributes {
            operation: op,
            group: "apps",
            version: "v1",
            resource,
            subresource: sub,
            namespaced: true,
            object: Some(object),
            old_object: None,
            namespace_labels: Some(
                ns_labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
        }
    }

    #[test]
    fn rules_match_operation_group_version_resource_and_subresource() {
        let h = hook(
            json!([{"operations": ["CREATE", "UPDATE"], "apiGroups": ["apps"], "apiVersions": ["*"], "resources": ["deployments", "statefulsets/status"]}]),
            json!({}),
            json!({}),
        );
        let o = json!({"metadata": {}});
        assert!(matches(
            &h,
            &attrs(Operation::Create, "deployments", None, &o, &[])
        ));
        assert!(!matches(
            &h,
            &attrs(Operation::Delete, "deployments", None, &o, &[])
        ));
        assert!(!matches(
            &h,
            &attrs(Operation::Update, "deployments", Some("status"), &o, &[])
        ));
        assert!(matches(
            &h,
            &attrs(Operation::Update, "statefulsets", Some("status"), &o, &[])
        ));
        assert!(!matches(
            &h,
            &attrs(Operation::Update, "statefulsets", None, &o, &[])
        ));
        let all = hook(
            json!([{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"], "scope": "Cluster"}]),
            json!({}),
            json!({}),
        );
        assert!(!matches(
            &all,
            &attrs(Operation::Create, "deployments", None, &o, &[])
        ));
        assert!(resource_matches("*", "pods", None));
        assert!(!resource_matches("*", "pods", Some("status")));
        assert!(resource_matches("*/status", "pods", Some("status")));
        assert!(resource_matches("pods/*", "pods", Some("exec")));
    }

    #[test]
    fn match_conditions_skip_or_err_as_kubes_do() {
        let c = json!({"metadata": {"name": "c"}, "webhooks": [{
            "name": "v.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": {"url": "https://127.0.0.1:1/"},
            "matchConditions": [
                {"name": "not-skipped", "expression": "object.metadata.name != 'skip-me'"},
                {"name": "creates", "expression": "request.operation == 'CREATE'"},
            ],
        }]});
        let h = parse(&c, Phase::Validating).unwrap().remove(0);
        let req = |name: &str, op: &str| json!({"operation": op, "object": {"metadata": {"name": name}}, "oldObject": null});
        assert_eq!(conditions_hold(&h, &req("a", "CREATE")), Ok(true));
        assert_eq!(conditions_hold(&h, &req("skip-me", "CREATE")), Ok(false));
        assert_eq!(conditions_hold(&h, &req("a", "UPDATE")), Ok(false));
        let broken = json!({"operation": "CREATE", "object": null, "oldObject": null});
        assert!(conditions_hold(&h, &broken).is_err());
    }

    #[test]
    fn selectors_look_at_the_namespace_and_either_object() {
        let h = hook(
            json!([{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}]),
            json!({"matchLabels": {"webhooks": "on"}}),
            json!({"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]}),
        );
        let plain = json!({"metadata": {"labels": {"app": "a"}}});
        let skipped = json!({"metadata": {"labels": {"skip": "yes"}}});
        assert!(matches(
            &h,
            &attrs(
                Operation::Create,
                "deployments",
                None,
                &plain,
                &[("webhooks", "on")]
            )
        ));
        assert!(!matches(
            &h,
            &attrs(Operation::Create, "deployments", None, &plain, &[])
        ));
        assert!(!matches(
            &h,
            &attrs(
                Operation::Create,
                "deployments",
                None,
                &skipped,
                &[("webhooks", "on")]
            )
        ));
        let mut update = attrs(
            Operation::Update,
            "deployments",
            None,
            &skipped,
            &[("webhooks", "on")],
        );
        update.old_object = Some(&plain);
        assert!(matches(&h, &update));
    }
}
