//! A stored `ValidatingWebhookConfiguration` or `MutatingWebhookConfiguration` read into
//! typed webhooks, with kube's defaults and kube's validation: one parse serves both the
//! check when a configuration is written (its causes) and the dispatcher (its webhooks), so
//! what is accepted is what is called.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;
use sluice_kube::selector::Selector;

use crate::errors::Cause;

/// kube's bounds on `timeoutSeconds`, and its default.
pub const MIN_TIMEOUT_SECONDS: i64 = 1;
pub const MAX_TIMEOUT_SECONDS: i64 = 30;
pub const DEFAULT_TIMEOUT_SECONDS: i64 = 10;

/// Webhooks in one configuration, at most (a bound of Sluice's: each is read per write).
pub const MAX_WEBHOOKS: usize = 64;

/// Which admission phase a webhook takes part in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// May change the object (JSONPatch); called one after another, before validation.
    Mutating,
    /// May only allow or deny; called after the object is validated.
    Validating,
}

impl Phase {
    /// The configuration kind of the phase.
    pub fn kind(self) -> &'static str {
        match self {
            Phase::Mutating => "MutatingWebhookConfiguration",
            Phase::Validating => "ValidatingWebhookConfiguration",
        }
    }

    /// Its resource name.
    pub fn resource(self) -> &'static str {
        match self {
            Phase::Mutating => "mutatingwebhookconfigurations",
            Phase::Validating => "validatingwebhookconfigurations",
        }
    }

    pub fn of_kind(kind: &str) -> Option<Phase> {
        match kind {
            "MutatingWebhookConfiguration" => Some(Phase::Mutating),
            "ValidatingWebhookConfiguration" => Some(Phase::Validating),
            _ => None,
        }
    }
}

/// What happens when the webhook cannot be called or answers nonsense.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailurePolicy {
    /// The request fails.
    Fail,
    /// The webhook is skipped.
    Ignore,
}

/// Whether a request of another version of the same resource is sent too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchPolicy {
    Exact,
    Equivalent,
}

/// What calling the webhook does besides answering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SideEffects {
    /// Nothing: it may be called for dry runs.
    None,
    /// Nothing when the request says it is a dry run.
    NoneOnDryRun,
    /// v1beta1 values, refused in v1 (kept to say so).
    Some,
    Unknown,
}

impl SideEffects {
    /// Whether a dry-run request may call it.
    pub fn dry_run_safe(self) -> bool {
        matches!(self, SideEffects::None | SideEffects::NoneOnDryRun)
    }
}

/// Whether a mutating webhook is called again when a later one changed the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reinvocation {
    Never,
    IfNeeded,
}

/// The scope a rule applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    All,
    Cluster,
    Namespaced,
}

/// One `rules` entry: operations × groups × versions × resources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub operations: Vec<String>,
    pub groups: Vec<String>,
    pub versions: Vec<String>,
    pub resources: Vec<String>,
    pub scope: Scope,
}

/// Where the webhook is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Client {
    /// `clientConfig.url`: `https://host[:port][/path]`, called directly.
    Url {
        authority: String,
        host: String,
        path: String,
    },
    /// `clientConfig.service`: a Service of the webhook's own (logical) cluster.
    Service {
        namespace: String,
        name: String,
        port: u16,
        path: String,
    },
}

impl Client {
    /// The address kube puts in its error messages.
    pub fn describe(&self) -> String {
        match self {
            Client::Url {
                authority, path, ..
            } => format!("https://{authority}{path}"),
            Client::Service {
                namespace,
                name,
                port,
                path,
            } => format!("https://{name}.{namespace}.svc:{port}{path}"),
        }
    }

    /// The name the webhook's certificate must carry: the URL's host, or
    /// `<service>.<namespace>.svc` as kube checks it.
    pub fn server_name(&self) -> String {
        match self {
            Client::Url { host, .. } => host.clone(),
            Client::Service {
                namespace, name, ..
            } => format!("{name}.{namespace}.svc"),
        }
    }
}

/// One webhook, as the dispatcher calls it.
#[derive(Clone, Debug)]
pub struct Webhook {
    /// The configuration it came from.
    pub configuration: String,
    pub name: String,
    pub phase: Phase,
    pub client: Client,
    /// PEM certificates that sign the webhook's serving certificate (`caBundle`).
    pub ca_bundle: Vec<u8>,
    pub rules: Vec<Rule>,
    pub failure_policy: FailurePolicy,
    pub match_policy: MatchPolicy,
    pub namespace_selector: Selector,
    pub object_selector: Selector,
    pub side_effects: SideEffects,
    pub timeout: Duration,
    pub reinvocation: Reinvocation,
    /// `matchConditions`: (name, CEL expression), all of which must hold for a call.
    pub match_conditions: Vec<(String, String)>,
}

/// kube's defaults, written into a configuration as it is stored (clients read them back).
pub fn apply_defaults(obj: &mut Value, phase: Phase) {
    let Some(hooks) = obj.get_mut("webhooks").and_then(Value::as_array_mut) else {
        return;
    };
    for h in hooks.iter_mut().filter(|h| h.is_object()) {
        let mut set = |field: &str, value: Value| {
            if h.get(field).is_none_or(Value::is_null) {
                h[field] = value;
            }
        };
        set("failurePolicy", "Fail".into());
        set("matchPolicy", "Equivalent".into());
        set("namespaceSelector", serde_json::json!({}));
        set("objectSelector", serde_json::json!({}));
        set("timeoutSeconds", DEFAULT_TIMEOUT_SECONDS.into());
        if phase == Phase::Mutating {
            set("reinvocationPolicy", "Never".into());
        }
        if let Some(service) = h["clientConfig"]
            .get_mut("service")
            .filter(|s| s.is_object())
            && service.get("port").is_none_or(Value::is_null)
        {
            service["port"] = 443.into();
        }
        if let Some(rules) = h.get_mut("rules").and_then(Value::as_array_mut) {
            for r in rules.iter_mut().filter(|r| r.is_object()) {
                if r.get("scope").is_none_or(Value::is_null) {
                    r["scope"] = "*".into();
                }
            }
        }
    }
}

pub(crate) fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

pub(crate) fn unsupported(field: String, value: &str, supported: &[&str]) -> Cause {
    let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    Cause {
        reason: "FieldValueNotSupported",
        field,
        message: format!(
            "Unsupported value: {value:?}: supported values: {}",
            list.join(", ")
        ),
    }
}

/// A `https://` URL's authority, host and path, or why it is not one kube accepts.
fn parse_url(url: &str) -> Result<(String, String, String), String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("{e}"))?;
    if uri.scheme_str() != Some("https") {
        return Err("'https' is the only allowed URL scheme".into());
    }
    let authority = uri
        .authority()
        .ok_or("host must be specified")?
        .as_str()
        .to_string();
    if authority.contains('@') {
        return Err("user information is not permitted in the URL".into());
    }
    if url.contains('#') {
        return Err("fragments are not permitted in the URL".into());
    }
    if uri.query().is_some() {
        return Err("query parameters are not permitted in the URL".into());
    }
    let host = uri.host().unwrap_or_default().to_string();
    if host.is_empty() {
        return Err("host must be specified".into());
    }
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let path = match uri.path() {
        "" => "/".to_string(),
        p => p.to_string(),
    };
    Ok((authority, host, path))
}

fn check_path(path: &str, field: &str, causes: &mut Vec<Cause>) {
    if !path.starts_with('/') {
        causes.push(Cause::invalid(field, path, "must start with a '/'"));
    } else if path.split('/').skip(1).any(str::is_empty) && path != "/" {
        causes.push(Cause::invalid(field, path, "segment[1]: may not be empty"));
    }
}

pub(crate) fn selector(v: &Value, field: &str, causes: &mut Vec<Cause>) -> Selector {
    if v.is_null() {
        return Selector::default();
    }
    match serde_json::from_value::<LabelSelector>(v.clone()) {
        Ok(s) => Selector::parse(&s).unwrap_or_else(|e| {
            causes.push(Cause::invalid(field, &v.to_string(), e.to_string()));
            Selector::default()
        }),
        Err(e) => {
            causes.push(Cause::invalid(field, &v.to_string(), e.to_string()));
            Selector::default()
        }
    }
}

/// The variables a match condition may name (kube's `authorizer` is not offered).
pub const CONDITION_VARIABLES: [&str; 3] = ["object", "oldObject", "request"];

/// kube's bound on a webhook's match conditions.
pub const MAX_MATCH_CONDITIONS: usize = 64;

/// `matchConditions` (a webhook's or a policy's): each named once with a qualified name,
/// its expression compiled with the variables `declared` (the compiler's message when it
/// does not).
pub(crate) fn match_conditions(
    v: &Value,
    field: &str,
    declared: &[&str],
    causes: &mut Vec<Cause>,
) -> Vec<(String, String)> {
    let list = v.as_array().map(Vec::as_slice).unwrap_or_default();
    if list.len() > MAX_MATCH_CONDITIONS {
        causes.push(Cause {
            reason: "FieldValueTooMany",
            field: field.to_string(),
            message: format!(
                "Too many: {}: must have at most {MAX_MATCH_CONDITIONS} items",
                list.len()
            ),
        });
        return Vec::new();
    }
    let mut out: Vec<(String, String)> = Vec::new();
    for (i, c) in list.iter().enumerate() {
        let name = c["name"].as_str().unwrap_or_default();
        let expression = c["expression"].as_str().unwrap_or_default();
        let problems = crate::validation::check_qualified_name(name);
        if name.is_empty() {
            causes.push(Cause::required(format!("{field}[{i}].name")));
        } else if !problems.is_empty() {
            causes.push(Cause::invalid(
                format!("{field}[{i}].name"),
                name,
                problems.join(", "),
            ));
        } else if out.iter().any(|(n, _)| n == name) {
            causes.push(Cause::duplicate(format!("{field}[{i}].name"), name));
        }
        if expression.is_empty() {
            causes.push(Cause::required(format!("{field}[{i}].expression")));
        } else if crate::cel::compiled(expression, declared).is_none()
            && let Err(e) = crate::cel::compile(expression, declared)
        {
            causes.push(Cause::invalid(
                format!("{field}[{i}].expression"),
                expression,
                e,
            ));
        }
        out.push((name.to_string(), expression.to_string()));
    }
    out
}

/// A `clientConfig` (a webhook's, a CRD's conversion webhook's): where it is reached and
/// the CA bundle that signs its certificate, checked as kube checks them (`field` names a
/// field of the item the config belongs to).
pub(crate) fn client_config(
    cc: &Value,
    field: &dyn Fn(&str) -> String,
    causes: &mut Vec<Cause>,
) -> (Option<Client>, Vec<u8>) {
    let ca_bundle = match cc["caBundle"].as_str() {
        None => Vec::new(),
        Some(b64) => {
            use base64::Engine;
            match base64::engine::general_purpose::STANDARD.decode(b64.trim()) {
                Ok(pem) => {
                    let certs = rustls_pemfile::certs(&mut pem.as_slice())
                        .filter_map(Result::ok)
                        .count();
                    if certs == 0 {
                        causes.push(Cause::invalid(
                            field("clientConfig.caBundle"),
                            "",
                            "no PEM certificates in the bundle",
                        ));
                    }
                    pem
                }
                Err(e) => {
                    causes.push(Cause::invalid(
                        field("clientConfig.caBundle"),
                        "",
                        format!("not base64: {e}"),
                    ));
                    Vec::new()
                }
            }
        }
    };
    let client = match (cc["url"].as_str(), cc["service"].is_object()) {
        (Some(_), true) => {
            causes.push(Cause::forbidden(
                field("clientConfig"),
                "exactly one of url or service is required",
            ));
            None
        }
        (None, false) => {
            causes.push(Cause {
                reason: "FieldValueRequired",
                field: field("clientConfig"),
                message: "Required value: exactly one of url or service is required".into(),
            });
            None
        }
        (Some(url), false) => match parse_url(url) {
            Ok((authority, host, path)) => Some(Client::Url {
                authority,
                host,
                path,
            }),
            Err(m) => {
                causes.push(Cause::invalid(field("clientConfig.url"), url, m));
                None
            }
        },
        (None, true) => {
            let s = &cc["service"];
            let namespace = s["namespace"].as_str().unwrap_or_default().to_string();
            let sname = s["name"].as_str().unwrap_or_default().to_string();
            if namespace.is_empty() {
                causes.push(Cause::required(field("clientConfig.service.namespace")));
            }
            if sname.is_empty() {
                causes.push(Cause::required(field("clientConfig.service.name")));
            }
            let port = match &s["port"] {
                Value::Null => Some(443),
                v => v
                    .as_u64()
                    .and_then(|p| u16::try_from(p).ok())
                    .filter(|p| *p > 0),
            };
            if port.is_none() {
                causes.push(Cause::invalid(
                    field("clientConfig.service.port"),
                    &s["port"].to_string(),
                    "port is not valid: must be between 1 and 65535, inclusive",
                ));
            }
            let path = s["path"].as_str().unwrap_or("/").to_string();
            check_path(&path, &field("clientConfig.service.path"), causes);
            Some(Client::Service {
                namespace,
                name: sname,
                port: port.unwrap_or(443),
                path,
            })
        }
    };
    (client, ca_bundle)
}

const OPERATIONS: [&str; 5] = ["*", "CREATE", "UPDATE", "DELETE", "CONNECT"];

pub(crate) fn rule(r: &Value, field: &str, causes: &mut Vec<Cause>) -> Rule {
    let operations = strings(&r["operations"]);
    if operations.is_empty() {
        causes.push(Cause::required(format!("{field}.operations")));
    }
    for (i, op) in operations.iter().enumerate() {
        if !OPERATIONS.contains(&op.as_str()) {
            causes.push(unsupported(
                format!("{field}.operations[{i}]"),
                op,
                &OPERATIONS,
            ));
        }
    }
    if operations.len() > 1 && operations.iter().any(|o| o == "*") {
        causes.push(Cause::invalid(
            format!("{field}.operations"),
            &operations.join(","),
            "if '*' is present, must not specify other operations",
        ));
    }
    let groups = strings(&r["apiGroups"]);
    let versions = strings(&r["apiVersions"]);
    let resources = strings(&r["resources"]);
    for (list, name) in [(&versions, "apiVersions"), (&resources, "resources")] {
        if list.is_empty() {
            causes.push(Cause::required(format!("{field}.{name}")));
        }
    }
    if r["apiGroups"].is_null() {
        causes.push(Cause::required(format!("{field}.apiGroups")));
    }
    for (i, res) in resources.iter().enumerate() {
        // `*`, `*/*`, `*/<sub>`, `<res>`, `<res>/*`, `<res>/<sub>`.
        let valid = match res.split_once('/') {
            None => !res.is_empty(),
            Some((main, sub)) => !main.is_empty() && !sub.is_empty() && !sub.contains('/'),
        };
        if !valid {
            causes.push(Cause::invalid(
                format!("{field}.resources[{i}]"),
                res,
                "must be a resource, a resource/subresource, '*', '*/*' or '*/<subresource>'",
            ));
        }
    }
    let scope = match r["scope"].as_str().unwrap_or("*") {
        "*" => Scope::All,
        "Cluster" => Scope::Cluster,
        "Namespaced" => Scope::Namespaced,
        other => {
            causes.push(unsupported(
                format!("{field}.scope"),
                other,
                &["*", "Cluster", "Namespaced"],
            ));
            Scope::All
        }
    };
    Rule {
        operations,
        groups,
        versions,
        resources,
        scope,
    }
}

/// The webhooks of configuration `obj` of `phase`, or what is wrong with it (every cause,
/// with kube's field paths and words).
pub fn parse(obj: &Value, phase: Phase) -> Result<Vec<Webhook>, Vec<Cause>> {
    let mut causes = Vec::new();
    let configuration = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    static NONE: Vec<Value> = Vec::new();
    let list = match &obj["webhooks"] {
        Value::Null => &NONE,
        Value::Array(a) => a,
        other => {
            return Err(vec![Cause::invalid(
                "webhooks",
                &other.to_string(),
                "must be a list",
            )]);
        }
    };
    if list.len() > MAX_WEBHOOKS {
        return Err(vec![Cause {
            reason: "FieldValueTooMany",
            field: "webhooks".into(),
            message: format!(
                "Too many: {}: must have at most {MAX_WEBHOOKS} items",
                list.len()
            ),
        }]);
    }
    let mut names = std::collections::HashSet::new();
    let mut hooks = Vec::with_capacity(list.len());
    for (i, h) in list.iter().enumerate() {
        let field = |f: &str| format!("webhooks[{i}].{f}");
        let name = h["name"].as_str().unwrap_or_default().to_string();
        if name.is_empty() {
            causes.push(Cause::required(field("name")));
        } else if !crate::validation::is_dns1123_subdomain(&name) || name.split('.').count() < 3 {
            causes.push(Cause::invalid(
                field("name"),
                &name,
                "should be a domain with at least three segments separated by dots",
            ));
        } else if !names.insert(name.clone()) {
            causes.push(Cause::duplicate(field("name"), &name));
        }
        let versions = strings(&h["admissionReviewVersions"]);
        if versions.is_empty() {
            causes.push(Cause::required(field("admissionReviewVersions")));
        } else if !versions.iter().any(|v| v == "v1") {
            // kube would send v1beta1 to a webhook that lists only it; Sluice speaks v1 only.
            causes.push(Cause::invalid(
                field("admissionReviewVersions"),
                &versions.join(","),
                "must include v1: Sluice sends AdmissionReview v1 only",
            ));
        }
        let side_effects = match h["sideEffects"].as_str() {
            Some("None") => SideEffects::None,
            Some("NoneOnDryRun") => SideEffects::NoneOnDryRun,
            Some(other) => {
                causes.push(unsupported(
                    field("sideEffects"),
                    other,
                    &["None", "NoneOnDryRun"],
                ));
                if other == "Some" {
                    SideEffects::Some
                } else {
                    SideEffects::Unknown
                }
            }
            None => {
                causes.push(unsupported(
                    field("sideEffects"),
                    "",
                    &["None", "NoneOnDryRun"],
                ));
                SideEffects::Unknown
            }
        };
        let failure_policy = match h["failurePolicy"].as_str().unwrap_or("Fail") {
            "Fail" => FailurePolicy::Fail,
            "Ignore" => FailurePolicy::Ignore,
            other => {
                causes.push(unsupported(
                    field("failurePolicy"),
                    other,
                    &["Fail", "Ignore"],
                ));
                FailurePolicy::Fail
            }
        };
        let match_policy = match h["matchPolicy"].as_str().unwrap_or("Equivalent") {
            "Equivalent" => MatchPolicy::Equivalent,
            "Exact" => MatchPolicy::Exact,
            other => {
                causes.push(unsupported(
                    field("matchPolicy"),
                    other,
                    &["Equivalent", "Exact"],
                ));
                MatchPolicy::Equivalent
            }
        };
        let reinvocation = match (phase, h["reinvocationPolicy"].as_str()) {
            (Phase::Mutating, None | Some("Never")) => Reinvocation::Never,
            (Phase::Mutating, Some("IfNeeded")) => Reinvocation::IfNeeded,
            (Phase::Mutating, Some(other)) => {
                causes.push(unsupported(
                    field("reinvocationPolicy"),
                    other,
                    &["IfNeeded", "Never"],
                ));
                Reinvocation::Never
            }
            (Phase::Validating, _) => Reinvocation::Never,
        };
        let timeout = match &h["timeoutSeconds"] {
            Value::Null => DEFAULT_TIMEOUT_SECONDS,
            v => match v.as_i64() {
                Some(t) if (MIN_TIMEOUT_SECONDS..=MAX_TIMEOUT_SECONDS).contains(&t) => t,
                _ => {
                    causes.push(Cause::invalid_value(
                        field("timeoutSeconds"),
                        v,
                        "the timeout value must be between 1 and 30 seconds",
                    ));
                    DEFAULT_TIMEOUT_SECONDS
                }
            },
        };
        let match_conditions = match_conditions(
            &h["matchConditions"],
            &field("matchConditions"),
            &CONDITION_VARIABLES,
            &mut causes,
        );
        let (client, ca_bundle) = client_config(&h["clientConfig"], &field, &mut causes);
        let rules: Vec<Rule> = h["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(j, r)| rule(r, &field(&format!("rules[{j}]")), &mut causes))
            .collect();
        let namespace_selector = selector(
            &h["namespaceSelector"],
            &field("namespaceSelector"),
            &mut causes,
        );
        let object_selector = selector(&h["objectSelector"], &field("objectSelector"), &mut causes);
        if let Some(client) = client {
            hooks.push(Webhook {
                configuration: configuration.clone(),
                name,
                phase,
                client,
                ca_bundle,
                rules,
                failure_policy,
                match_policy,
                namespace_selector,
                object_selector,
                side_effects,
                timeout: Duration::from_secs(timeout.unsigned_abs()),
                reinvocation,
                match_conditions,
            });
        }
    }
    if causes.is_empty() {
        Ok(hooks)
    } else {
        Err(causes)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn config(hook: Value) -> Value {
        json!({"metadata": {"name": "c"}, "webhooks": [hook]})
    }

    #[test]
    fn a_service_webhook_takes_kubes_defaults() {
        let mut obj = config(json!({
            "name": "v.example.com",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "clientConfig": {"service": {"namespace": "hooks", "name": "svc"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
        }));
        apply_defaults(&mut obj, Phase::Mutating);
        let h = &obj["webhooks"][0];
        assert_eq!(h["failurePolicy"], "Fail");
        assert_eq!(h["timeoutSeconds"], 10);
        assert_eq!(h["reinvocationPolicy"], "Never");
        assert_eq!(h["clientConfig"]["service"]["port"], 443);
        assert_eq!(h["rules"][0]["scope"], "*");
        let hooks = parse(&obj, Phase::Mutating).unwrap();
        assert_eq!(hooks[0].client.describe(), "https://svc.hooks.svc:443/");
        assert_eq!(hooks[0].client.server_name(), "svc.hooks.svc");
    }

    #[test]
    fn what_kube_refuses_is_refused_with_its_field() {
        let bad = config(json!({
            "name": "short",
            "admissionReviewVersions": ["v9"],
            "sideEffects": "Some",
            "timeoutSeconds": 31,
            "failurePolicy": "Maybe",
            "matchConditions": [{"name": "x", "expression": "object.metadata.name == "}],
            "clientConfig": {"url": "http://example.com/x?y=1"},
            "rules": [{"operations": ["CREATE", "*"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["a/b/c"]}],
        }));
        let causes = parse(&bad, Phase::Validating).unwrap_err();
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        for f in [
            "webhooks[0].name",
            "webhooks[0].admissionReviewVersions",
            "webhooks[0].sideEffects",
            "webhooks[0].timeoutSeconds",
            "webhooks[0].failurePolicy",
            "webhooks[0].matchConditions[0].expression",
            "webhooks[0].clientConfig.url",
            "webhooks[0].rules[0].operations",
            "webhooks[0].rules[0].resources[0]",
        ] {
            assert!(fields.contains(&f), "{f} not in {fields:?}");
        }
        let both = config(json!({
            "name": "v.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": {"url": "https://a.example/", "service": {"namespace": "n", "name": "s"}},
        }));
        assert_eq!(
            parse(&both, Phase::Validating).unwrap_err()[0].field,
            "webhooks[0].clientConfig"
        );
    }

    #[test]
    fn a_url_keeps_its_host_port_and_path() {
        let obj = config(json!({
            "name": "v.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "NoneOnDryRun",
            "clientConfig": {"url": "https://127.0.0.9:8443/validate"},
        }));
        let hooks = parse(&obj, Phase::Validating).unwrap();
        assert_eq!(
            hooks[0].client,
            Client::Url {
                authority: "127.0.0.9:8443".into(),
                host: "127.0.0.9".into(),
                path: "/validate".into()
            }
        );
        assert!(hooks[0].side_effects.dry_run_safe());
    }
}
