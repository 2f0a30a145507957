//! Whether a policy's `matchConstraints` (or a binding's `matchResources`) take in a
//! request, as kube decides it: the namespace's labels, the object's (or old object's)
//! labels, no exclude rule, and some resource rule — with its names, when it lists any.
//! Pure: unit-tested without a server.

use super::config::{MatchResources, NamedRule};
use crate::webhooks::matching::{Attributes, labels_of, rule_matches};

fn named_matches(r: &NamedRule, a: &Attributes<'_>, name: &str) -> bool {
    rule_matches(&r.rule, a) && (r.names.is_empty() || r.names.iter().any(|n| n == name))
}

/// Whether `m` takes in the request `a` on the object called `name`.
pub fn matches(m: &MatchResources, a: &Attributes<'_>, name: &str) -> bool {
    if let Some(labels) = &a.namespace_labels
        && !m.namespace_selector.matches(labels)
    {
        return false;
    }
    let object_ok = [a.object, a.old_object]
        .into_iter()
        .flatten()
        .any(|o| m.object_selector.matches(&labels_of(o)));
    if !object_ok {
        return false;
    }
    if m.exclude.iter().any(|r| named_matches(r, a, name)) {
        return false;
    }
    !m.rules_set || m.rules.iter().any(|r| named_matches(r, a, name))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::config::parse_binding;
    use super::*;
    use crate::webhooks::matching::Operation;

    fn resources(m: Value) -> MatchResources {
        parse_binding(&json!({"metadata": {"name": "b"}, "spec": {
            "policyName": "p", "validationActions": ["Deny"], "matchResources": m}}))
        .unwrap()
        .resources
        .unwrap()
    }

    fn attrs<'a>(object: &'a Value, ns: &[(&str, &str)]) -> Attributes<'a> {
        Attributes {
            operation: Operation::Create,
            group: "",
            version: "v1",
            resource: "configmaps",
            subresource: None,
            namespaced: true,
            object: Some(object),
            old_object: None,
            namespace_labels: Some(
                ns.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
        }
    }

    #[test]
    fn names_excludes_and_selectors_narrow_the_match() {
        let m = resources(json!({
            "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"], "resourceNames": ["settings"]}],
            "excludeResourceRules": [{"apiGroups": [""], "apiVersions": ["*"], "operations": ["*"], "resources": ["secrets"]}],
            "namespaceSelector": {"matchLabels": {"env": "prod"}},
        }));
        let o = json!({"metadata": {"name": "settings"}});
        assert!(matches(&m, &attrs(&o, &[("env", "prod")]), "settings"));
        assert!(!matches(&m, &attrs(&o, &[("env", "prod")]), "other"));
        assert!(!matches(&m, &attrs(&o, &[]), "settings"));
        let mut secret = attrs(&o, &[("env", "prod")]);
        secret.resource = "secrets";
        assert!(!matches(&m, &secret, "settings"));
        // A binding without resource rules narrows by its selectors only.
        let open = resources(json!({"objectSelector": {"matchLabels": {"checked": "yes"}}}));
        let labelled = json!({"metadata": {"labels": {"checked": "yes"}}});
        assert!(matches(&open, &attrs(&labelled, &[]), "x"));
        assert!(!matches(&open, &attrs(&o, &[]), "x"));
    }
}
