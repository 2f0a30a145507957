//! A stored `ValidatingAdmissionPolicy` or `ValidatingAdmissionPolicyBinding` read into a
//! typed policy or binding, with kube's defaults and kube's validation: one parse serves
//! the check when the object is written (its causes, every CEL expression compiled) and the
//! dispatcher, so what is accepted is what is evaluated.

use serde_json::Value;
use sluice_kube::selector::Selector;

use crate::errors::Cause;
use crate::webhooks::config::{
    FailurePolicy, Rule, match_conditions, rule, selector, strings, unsupported,
};

/// The variables a policy's validations, messages, variables and audit annotations see
/// (kube's `authorizer` is not offered: a rule naming it is refused when written).
pub const VARIABLES: [&str; 6] = [
    "object",
    "oldObject",
    "request",
    "params",
    "namespaceObject",
    "variables",
];

/// What a policy's match conditions see: the same, less `variables` (kube evaluates match
/// conditions before the variables).
pub const CONDITION_VARIABLES: [&str; 5] = [
    "object",
    "oldObject",
    "request",
    "params",
    "namespaceObject",
];

/// Items at most in each of a policy's lists (a bound of Sluice's: each is evaluated per
/// matching write).
pub const MAX_ITEMS: usize = 64;

/// kube's bound on a message and on a messageExpression's result.
pub const MAX_MESSAGE_CHARS: usize = 5000;

/// The resource kinds.
pub const POLICY_KIND: &str = "ValidatingAdmissionPolicy";
pub const BINDING_KIND: &str = "ValidatingAdmissionPolicyBinding";

/// A `NamedRuleWithOperations`: a webhook rule, narrowed to objects of these names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedRule {
    pub rule: Rule,
    /// Empty: any name.
    pub names: Vec<String>,
}

/// `MatchResources`: which requests a policy (or a binding) applies to.
#[derive(Clone, Debug)]
pub struct MatchResources {
    pub rules: Vec<NamedRule>,
    /// Whether `rules` constrain at all (a binding without `resourceRules` does not).
    pub rules_set: bool,
    pub exclude: Vec<NamedRule>,
    pub namespace_selector: Selector,
    pub object_selector: Selector,
}

/// The reason (and so the code) of a refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Unauthorized,
    Forbidden,
    Invalid,
    RequestEntityTooLarge,
}

impl Reason {
    const ALL: [&'static str; 4] = [
        "Unauthorized",
        "Forbidden",
        "Invalid",
        "RequestEntityTooLarge",
    ];

    fn parse(s: &str) -> Option<Reason> {
        match s {
            "Unauthorized" => Some(Reason::Unauthorized),
            "Forbidden" => Some(Reason::Forbidden),
            "Invalid" => Some(Reason::Invalid),
            "RequestEntityTooLarge" => Some(Reason::RequestEntityTooLarge),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Unauthorized => "Unauthorized",
            Reason::Forbidden => "Forbidden",
            Reason::Invalid => "Invalid",
            Reason::RequestEntityTooLarge => "RequestEntityTooLarge",
        }
    }

    /// The HTTP code kube answers with.
    pub fn code(self) -> u16 {
        match self {
            Reason::Unauthorized => 401,
            Reason::Forbidden => 403,
            Reason::Invalid => 422,
            Reason::RequestEntityTooLarge => 413,
        }
    }
}

/// One `validations` entry.
#[derive(Clone, Debug)]
pub struct Validation {
    pub expression: String,
    pub message: Option<String>,
    pub message_expression: Option<String>,
    pub reason: Reason,
}

/// `paramKind`: the group/version and kind of the policy's parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamKind {
    pub group: String,
    pub version: String,
    pub kind: String,
}

/// A typed `ValidatingAdmissionPolicy`.
#[derive(Clone, Debug)]
pub struct Policy {
    pub name: String,
    pub param_kind: Option<ParamKind>,
    pub constraints: MatchResources,
    pub validations: Vec<Validation>,
    pub failure_policy: FailurePolicy,
    /// `(key, valueExpression)`.
    pub audit_annotations: Vec<(String, String)>,
    pub match_conditions: Vec<(String, String)>,
    /// `(name, expression)`, in order: each may name the ones before it.
    pub variables: Vec<(String, String)>,
}

/// What a binding does with a failed validation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Refuse the request.
    Deny,
    /// Admit it with a warning to the client.
    Warn,
    /// Admit it, recording the failure in the audit log.
    Audit,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Deny => "Deny",
            Action::Warn => "Warn",
            Action::Audit => "Audit",
        }
    }
}

/// What a binding does when its parameters are not there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotFound {
    /// Treat as passing.
    Allow,
    /// Fail under the policy's `failurePolicy`.
    Deny,
}

/// A binding's `paramRef`.
#[derive(Clone, Debug)]
pub enum ParamSource {
    /// One object by name.
    Name(String),
    /// Every object the selector matches.
    Selector(Selector),
}

/// `paramRef`: where the parameters are.
#[derive(Clone, Debug)]
pub struct ParamRef {
    pub source: ParamSource,
    /// `None`: the request's own namespace (for a namespaced `paramKind`).
    pub namespace: Option<String>,
    pub not_found: NotFound,
}

/// A typed `ValidatingAdmissionPolicyBinding`.
#[derive(Clone, Debug)]
pub struct Binding {
    pub name: String,
    pub policy: String,
    pub param_ref: Option<ParamRef>,
    /// Narrows the policy's own constraints; `None` for all it matches.
    pub resources: Option<MatchResources>,
    pub actions: Vec<Action>,
}

/// kube's defaults for `MatchResources` at `v`.
fn default_match(v: &mut Value) {
    if !v.is_object() {
        return;
    }
    for (field, value) in [
        ("matchPolicy", Value::from("Equivalent")),
        ("namespaceSelector", serde_json::json!({})),
        ("objectSelector", serde_json::json!({})),
    ] {
        if v.get(field).is_none_or(Value::is_null) {
            v[field] = value;
        }
    }
    for list in ["resourceRules", "excludeResourceRules"] {
        if let Some(rules) = v.get_mut(list).and_then(Value::as_array_mut) {
            for r in rules.iter_mut().filter(|r| r.is_object()) {
                if r.get("scope").is_none_or(Value::is_null) {
                    r["scope"] = "*".into();
                }
            }
        }
    }
}

/// kube's defaults, written into a policy or binding as it is stored.
pub fn apply_defaults(kind: &str, obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) else {
        return;
    };
    match kind {
        POLICY_KIND => {
            if spec.get("failurePolicy").is_none_or(Value::is_null) {
                spec["failurePolicy"] = "Fail".into();
            }
            if let Some(m) = spec.get_mut("matchConstraints") {
                default_match(m);
            }
        }
        BINDING_KIND => {
            if let Some(m) = spec.get_mut("matchResources") {
                default_match(m);
            }
        }
        _ => {}
    }
}

fn too_many(field: &str, n: usize) -> Cause {
    Cause {
        reason: "FieldValueTooMany",
        field: field.to_string(),
        message: format!("Too many: {n}: must have at most {MAX_ITEMS} items"),
    }
}

/// The items of list `v` at `field`, bounded.
fn items<'v>(v: &'v Value, field: &str, causes: &mut Vec<Cause>) -> &'v [Value] {
    let list = v.as_array().map(Vec::as_slice).unwrap_or_default();
    if list.len() > MAX_ITEMS {
        causes.push(too_many(field, list.len()));
        return &[];
    }
    list
}

/// Compile `expression` at `field` (required), with the policy's variables.
fn expression(v: &Value, field: String, declared: &[&str], causes: &mut Vec<Cause>) -> String {
    let source = v.as_str().unwrap_or_default();
    if source.trim().is_empty() {
        causes.push(Cause::required(field));
    } else if crate::cel::compiled(source, declared).is_none()
        && let Err(e) = crate::cel::compile(source, declared)
    {
        causes.push(Cause::invalid(field, source, e));
    }
    source.to_string()
}

fn named_rules(v: &Value, field: &str, causes: &mut Vec<Cause>) -> Vec<NamedRule> {
    items(v, field, causes)
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let at = format!("{field}[{i}]");
            let names = strings(&r["resourceNames"]);
            for (j, n) in names.iter().enumerate() {
                if n.is_empty() {
                    causes.push(Cause::required(format!("{at}.resourceNames[{j}]")));
                }
            }
            NamedRule {
                rule: rule(r, &at, causes),
                names,
            }
        })
        .collect()
}

/// A `MatchResources` at `field`; `rules_required` for a policy's `matchConstraints`.
fn match_resources(
    v: &Value,
    field: &str,
    rules_required: bool,
    causes: &mut Vec<Cause>,
) -> MatchResources {
    let rules_set = v["resourceRules"].as_array().is_some_and(|r| !r.is_empty());
    if rules_required && !rules_set {
        causes.push(Cause::required(format!("{field}.resourceRules")));
    }
    match v["matchPolicy"].as_str().unwrap_or("Equivalent") {
        "Equivalent" | "Exact" => {}
        other => causes.push(unsupported(
            format!("{field}.matchPolicy"),
            other,
            &["Equivalent", "Exact"],
        )),
    }
    MatchResources {
        rules: named_rules(
            &v["resourceRules"],
            &format!("{field}.resourceRules"),
            causes,
        ),
        rules_set,
        exclude: named_rules(
            &v["excludeResourceRules"],
            &format!("{field}.excludeResourceRules"),
            causes,
        ),
        namespace_selector: selector(
            &v["namespaceSelector"],
            &format!("{field}.namespaceSelector"),
            causes,
        ),
        object_selector: selector(
            &v["objectSelector"],
            &format!("{field}.objectSelector"),
            causes,
        ),
    }
}

/// Whether `s` is a CEL identifier that is not a reserved word.
fn is_cel_identifier(s: &str) -> bool {
    const RESERVED: [&str; 20] = [
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
    ];
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        && !RESERVED.contains(&s)
}

fn param_kind(v: &Value, causes: &mut Vec<Cause>) -> Option<ParamKind> {
    if v.is_null() {
        return None;
    }
    let api_version = v["apiVersion"].as_str().unwrap_or_default();
    let kind = v["kind"].as_str().unwrap_or_default();
    if api_version.is_empty() {
        causes.push(Cause::required("spec.paramKind.apiVersion"));
    }
    if kind.is_empty() {
        causes.push(Cause::required("spec.paramKind.kind"));
    }
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    if version.is_empty() || version.contains('/') {
        causes.push(Cause::invalid(
            "spec.paramKind.apiVersion",
            api_version,
            "must be a valid group/version",
        ));
    }
    Some(ParamKind {
        group: group.to_string(),
        version: version.to_string(),
        kind: kind.to_string(),
    })
}

fn validations(v: &Value, causes: &mut Vec<Cause>) -> Vec<Validation> {
    items(v, "spec.validations", causes)
        .iter()
        .enumerate()
        .map(|(i, val)| {
            let at = |f: &str| format!("spec.validations[{i}].{f}");
            let expression = expression(&val["expression"], at("expression"), &VARIABLES, causes);
            let message = val["message"].as_str().map(str::to_string);
            if let Some(m) = &message {
                if m.contains('\n') {
                    causes.push(Cause::invalid(
                        at("message"),
                        m,
                        "message must not contain line breaks",
                    ));
                } else if m.chars().count() > MAX_MESSAGE_CHARS {
                    causes.push(Cause::invalid(
                        at("message"),
                        "",
                        format!("must be no more than {MAX_MESSAGE_CHARS} characters"),
                    ));
                }
            } else if expression.contains('\n') {
                causes.push(Cause::required(at("message")));
            }
            let message_expression = match &val["messageExpression"] {
                Value::Null => None,
                m => Some(self::expression(
                    m,
                    at("messageExpression"),
                    &VARIABLES,
                    causes,
                )),
            };
            let reason = match val["reason"].as_str() {
                None => Reason::Invalid,
                Some(r) => Reason::parse(r).unwrap_or_else(|| {
                    causes.push(unsupported(at("reason"), r, &Reason::ALL));
                    Reason::Invalid
                }),
            };
            Validation {
                expression,
                message,
                message_expression,
                reason,
            }
        })
        .collect()
}

/// The typed policy of `obj`, or every cause kube would give.
pub fn parse_policy(obj: &Value) -> Result<Policy, Vec<Cause>> {
    let mut causes = Vec::new();
    let spec = &obj["spec"];
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let param_kind = param_kind(&spec["paramKind"], &mut causes);
    let constraints = if spec["matchConstraints"].is_object() {
        match_resources(
            &spec["matchConstraints"],
            "spec.matchConstraints",
            true,
            &mut causes,
        )
    } else {
        causes.push(Cause::required("spec.matchConstraints"));
        match_resources(&Value::Null, "spec.matchConstraints", false, &mut causes)
    };
    let failure_policy = match spec["failurePolicy"].as_str().unwrap_or("Fail") {
        "Fail" => FailurePolicy::Fail,
        "Ignore" => FailurePolicy::Ignore,
        other => {
            causes.push(unsupported(
                "spec.failurePolicy".into(),
                other,
                &["Fail", "Ignore"],
            ));
            FailurePolicy::Fail
        }
    };
    let mut variables: Vec<(String, String)> = Vec::new();
    for (i, v) in items(&spec["variables"], "spec.variables", &mut causes)
        .iter()
        .enumerate()
    {
        let vname = v["name"].as_str().unwrap_or_default().to_string();
        if vname.is_empty() {
            causes.push(Cause::required(format!("spec.variables[{i}].name")));
        } else if !is_cel_identifier(&vname) {
            causes.push(Cause::invalid(
                format!("spec.variables[{i}].name"),
                &vname,
                "name is not a valid CEL identifier",
            ));
        } else if variables.iter().any(|(n, _)| *n == vname) {
            causes.push(Cause::duplicate(
                format!("spec.variables[{i}].name"),
                &vname,
            ));
        }
        let source = expression(
            &v["expression"],
            format!("spec.variables[{i}].expression"),
            &VARIABLES,
            &mut causes,
        );
        variables.push((vname, source));
    }
    let validations = validations(&spec["validations"], &mut causes);
    let mut audit_annotations: Vec<(String, String)> = Vec::new();
    for (i, a) in items(
        &spec["auditAnnotations"],
        "spec.auditAnnotations",
        &mut causes,
    )
    .iter()
    .enumerate()
    {
        let key = a["key"].as_str().unwrap_or_default().to_string();
        let field = format!("spec.auditAnnotations[{i}].key");
        if key.is_empty() {
            causes.push(Cause::required(field));
        } else {
            let problems = crate::validation::check_qualified_name(&format!("{name}/{key}"));
            if !problems.is_empty() || key.contains('/') || key.len() > 63 {
                causes.push(Cause::invalid(
                    field,
                    &key,
                    "must be a qualified name of at most 63 characters that, joined to the policy's name with '/', is a valid annotation key",
                ));
            } else if audit_annotations.iter().any(|(k, _)| *k == key) {
                causes.push(Cause::duplicate(field, &key));
            }
        }
        let source = expression(
            &a["valueExpression"],
            format!("spec.auditAnnotations[{i}].valueExpression"),
            &VARIABLES,
            &mut causes,
        );
        audit_annotations.push((key, source));
    }
    if validations.is_empty() && audit_annotations.is_empty() {
        causes.push(Cause {
            reason: "FieldValueRequired",
            field: "spec.validations".into(),
            message:
                "Required value: validations or auditAnnotations must contain at least one item"
                    .into(),
        });
    }
    let match_conditions = match_conditions(
        &spec["matchConditions"],
        "spec.matchConditions",
        &CONDITION_VARIABLES,
        &mut causes,
    );
    if causes.is_empty() {
        Ok(Policy {
            name,
            param_kind,
            constraints,
            validations,
            failure_policy,
            audit_annotations,
            match_conditions,
            variables,
        })
    } else {
        Err(causes)
    }
}

fn param_ref(v: &Value, causes: &mut Vec<Cause>) -> Option<ParamRef> {
    if v.is_null() {
        return None;
    }
    let name = v["name"].as_str().filter(|n| !n.is_empty());
    let has_selector = !v["selector"].is_null();
    let source = match (name, has_selector) {
        (Some(_), true) => {
            causes.push(Cause::forbidden(
                "spec.paramRef.name",
                "name and selector are mutually exclusive",
            ));
            None
        }
        (None, false) => {
            causes.push(Cause {
                reason: "FieldValueRequired",
                field: "spec.paramRef".into(),
                message: "Required value: one of name or selector must be specified".into(),
            });
            None
        }
        (Some(n), false) => Some(ParamSource::Name(n.to_string())),
        (None, true) => Some(ParamSource::Selector(selector(
            &v["selector"],
            "spec.paramRef.selector",
            causes,
        ))),
    };
    let namespace = v["namespace"]
        .as_str()
        .filter(|n| !n.is_empty())
        .map(str::to_string);
    let not_found = match v["parameterNotFoundAction"].as_str() {
        Some("Allow") => NotFound::Allow,
        Some("Deny") => NotFound::Deny,
        Some(other) => {
            causes.push(unsupported(
                "spec.paramRef.parameterNotFoundAction".into(),
                other,
                &["Allow", "Deny"],
            ));
            NotFound::Deny
        }
        None => {
            causes.push(Cause::required("spec.paramRef.parameterNotFoundAction"));
            NotFound::Deny
        }
    };
    Some(ParamRef {
        source: source?,
        namespace,
        not_found,
    })
}

/// The typed binding of `obj`, or every cause kube would give.
pub fn parse_binding(obj: &Value) -> Result<Binding, Vec<Cause>> {
    let mut causes = Vec::new();
    let spec = &obj["spec"];
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let policy = spec["policyName"].as_str().unwrap_or_default().to_string();
    if policy.is_empty() {
        causes.push(Cause::required("spec.policyName"));
    }
    let param_ref = param_ref(&spec["paramRef"], &mut causes);
    let resources = spec["matchResources"].is_object().then(|| {
        match_resources(
            &spec["matchResources"],
            "spec.matchResources",
            false,
            &mut causes,
        )
    });
    let mut actions = Vec::new();
    let listed = strings(&spec["validationActions"]);
    if listed.is_empty() {
        causes.push(Cause {
            reason: "FieldValueRequired",
            field: "spec.validationActions".into(),
            message: "Required value: at least one validation action is required".into(),
        });
    }
    for (i, a) in listed.iter().enumerate() {
        let action = match a.as_str() {
            "Deny" => Action::Deny,
            "Warn" => Action::Warn,
            "Audit" => Action::Audit,
            other => {
                causes.push(unsupported(
                    format!("spec.validationActions[{i}]"),
                    other,
                    &["Audit", "Deny", "Warn"],
                ));
                continue;
            }
        };
        if actions.contains(&action) {
            causes.push(Cause::duplicate(format!("spec.validationActions[{i}]"), a));
        }
        actions.push(action);
    }
    if actions.contains(&Action::Deny) && actions.contains(&Action::Warn) {
        causes.push(Cause::invalid(
            "spec.validationActions",
            &listed.join(","),
            "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        ));
    }
    if causes.is_empty() {
        Ok(Binding {
            name,
            policy,
            param_ref,
            resources,
            actions,
        })
    } else {
        Err(causes)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn policy(spec: Value) -> Value {
        json!({"kind": POLICY_KIND, "metadata": {"name": "replicas.example.com"}, "spec": spec})
    }

    #[test]
    fn a_policy_takes_kubes_defaults_and_parses() {
        let mut obj = policy(json!({
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "variables": [{"name": "replicas", "expression": "object.spec.replicas"}],
            "validations": [{"expression": "variables.replicas <= int(params.data.max)", "messageExpression": "'at most ' + params.data.max", "reason": "Forbidden"}],
            "auditAnnotations": [{"key": "replicas", "valueExpression": "string(object.spec.replicas)"}],
        }));
        apply_defaults(POLICY_KIND, &mut obj);
        assert_eq!(obj["spec"]["failurePolicy"], "Fail");
        assert_eq!(obj["spec"]["matchConstraints"]["matchPolicy"], "Equivalent");
        assert_eq!(
            obj["spec"]["matchConstraints"]["resourceRules"][0]["scope"],
            "*"
        );
        let p = parse_policy(&obj).unwrap();
        assert_eq!(
            p.param_kind,
            Some(ParamKind {
                group: String::new(),
                version: "v1".into(),
                kind: "ConfigMap".into()
            })
        );
        assert_eq!(p.validations[0].reason.code(), 403);
        assert_eq!(p.variables[0].0, "replicas");
    }

    #[test]
    fn what_kube_refuses_in_a_policy_is_refused_with_its_field() {
        let bad = policy(json!({
            "paramKind": {"kind": "ConfigMap"},
            "matchConstraints": {"matchPolicy": "Sometimes"},
            "failurePolicy": "Maybe",
            "variables": [{"name": "1x", "expression": "object."}],
            "validations": [{"expression": "authorizer.allowed()", "message": "a\nb", "reason": "Teapot"}],
            "auditAnnotations": [{"key": "", "valueExpression": ""}],
            "matchConditions": [{"name": "c", "expression": "variables.x"}],
        }));
        let causes = parse_policy(&bad).unwrap_err();
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        for f in [
            "spec.paramKind.apiVersion",
            "spec.matchConstraints.resourceRules",
            "spec.matchConstraints.matchPolicy",
            "spec.failurePolicy",
            "spec.variables[0].name",
            "spec.variables[0].expression",
            "spec.validations[0].expression",
            "spec.validations[0].message",
            "spec.validations[0].reason",
            "spec.auditAnnotations[0].key",
            "spec.auditAnnotations[0].valueExpression",
            "spec.matchConditions[0].expression",
        ] {
            assert!(fields.contains(&f), "{f} not in {fields:?}");
        }
        let undeclared = causes
            .iter()
            .find(|c| c.field == "spec.validations[0].expression")
            .unwrap();
        assert!(
            undeclared
                .message
                .contains("undeclared reference to 'authorizer'"),
            "{}",
            undeclared.message
        );
        let empty = parse_policy(&policy(json!({"matchConstraints": {"resourceRules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["pods"]}]}})))
        .unwrap_err();
        assert_eq!(empty[0].field, "spec.validations");
    }

    #[test]
    fn a_binding_is_checked_as_kube_checks_it() {
        let ok = json!({"metadata": {"name": "b"}, "spec": {
            "policyName": "p", "validationActions": ["Warn", "Audit"],
            "paramRef": {"selector": {"matchLabels": {"env": "prod"}}, "parameterNotFoundAction": "Allow"},
            "matchResources": {"namespaceSelector": {"matchLabels": {"team": "a"}}},
        }});
        let b = parse_binding(&ok).unwrap();
        assert_eq!(b.actions, vec![Action::Warn, Action::Audit]);
        assert!(b.resources.as_ref().is_some_and(|r| !r.rules_set));
        assert!(matches!(
            b.param_ref.as_ref().map(|p| &p.source),
            Some(ParamSource::Selector(_))
        ));
        let bad = json!({"metadata": {"name": "b"}, "spec": {
            "validationActions": ["Deny", "Warn", "Deny", "Shout"],
            "paramRef": {"name": "x", "selector": {}},
        }});
        let causes = parse_binding(&bad).unwrap_err();
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        for f in [
            "spec.policyName",
            "spec.paramRef.name",
            "spec.paramRef.parameterNotFoundAction",
            "spec.validationActions[2]",
            "spec.validationActions[3]",
            "spec.validationActions",
        ] {
            assert!(fields.contains(&f), "{f} not in {fields:?}");
        }
    }
}
