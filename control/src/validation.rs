//! Object-metadata validation with kube-apiserver's rules and messages.

use serde_json::Value;

use crate::errors::Cause;

const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const QUALIFIED_NAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
/// kube-apiserver's limit on the total size of annotations.
const TOTAL_ANNOTATION_SIZE: usize = 256 * 1024;

/// How a resource's names are checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    Dns1123Subdomain,
    Dns1123Label,
    Dns1035Label,
    /// Any name that is one URL path segment (RBAC's rule: `system:kube-dns-autoscaler`).
    PathSegment,
}

impl NameRule {
    /// The rule kube validates names of `group`/`resource` by.
    pub fn for_resource(group: &str, resource: &str) -> Self {
        match (group, resource) {
            (
                crate::rbac::policy::GROUP,
                "roles" | "rolebindings" | "clusterroles" | "clusterrolebindings",
            ) => NameRule::PathSegment,
            (_, "namespaces" | "workspaces") => NameRule::Dns1123Label,
            ("", "services") => NameRule::Dns1035Label,
            _ => NameRule::Dns1123Subdomain,
        }
    }

    /// Problems with `name`, as kube words them.
    pub fn check(self, name: &str) -> Vec<String> {
        let mut out = Vec::new();
        match self {
            // apimachinery's `IsValidPathSegmentName`, word for word.
            NameRule::PathSegment => {
                if name == "." || name == ".." {
                    out.push(format!("may not be '{name}'"));
                } else {
                    for bad in ["/", "%"] {
                        if name.contains(bad) {
                            out.push(format!("may not contain '{bad}'"));
                        }
                    }
                }
            }
            NameRule::Dns1123Subdomain => {
                if name.len() > 253 {
                    out.push("must be no more than 253 characters".to_string());
                }
                if !is_dns1123_subdomain(name) {
                    out.push(DNS1123_SUBDOMAIN_MSG.to_string());
                }
            }
            NameRule::Dns1123Label | NameRule::Dns1035Label => {
                if name.len() > 63 {
                    out.push("must be no more than 63 characters".to_string());
                }
                // The characters are judged apart from the length (reported above), so a long
                // name gets both messages, as from kube; never slice: the name may be any UTF-8.
                let ok = is_dns_label_chars(name);
                if self == NameRule::Dns1035Label {
                    if !ok || !name.starts_with(|c: char| c.is_ascii_lowercase()) {
                        out.push(DNS1035_LABEL_MSG.to_string());
                    }
                } else if !ok {
                    out.push(DNS1123_LABEL_MSG.to_string());
                }
            }
        }
        out
    }
}

pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

/// A DNS-1123 label's characters, whatever its length.
fn is_dns_label_chars(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// A qualified name part's (or label value's) characters, whatever its length.
fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Problems with a label or annotation key (`[prefix/]name`).
pub fn check_qualified_name(key: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            out.push("prefix part must be non-empty".into());
        } else if !is_dns1123_subdomain(p) {
            out.push(format!("prefix part {DNS1123_SUBDOMAIN_MSG}"));
        }
    }
    if name.is_empty() {
        out.push("name part must be non-empty".into());
    } else if name.len() > 63 {
        out.push("name part must be no more than 63 characters".into());
    } else if !is_qualified_name_part(name) {
        out.push(QUALIFIED_NAME_MSG.into());
    }
    out
}

pub fn check_label_value(v: &str) -> Vec<String> {
    let mut out = Vec::new();
    if v.len() > 63 {
        out.push("must be no more than 63 characters".into());
    }
    if !v.is_empty() && !is_qualified_name_part(v) {
        out.push(LABEL_VALUE_MSG.into());
    }
    out
}

/// Validate `metadata` of an object: name, namespace, labels, annotations.
pub fn check_metadata(obj: &Value, rule: NameRule, namespaced: bool) -> Vec<Cause> {
    let mut causes = Vec::new();
    let meta = &obj["metadata"];
    match meta["name"].as_str() {
        None | Some("") => causes.push(Cause::required("metadata.name")),
        Some(name) => {
            for msg in rule.check(name) {
                causes.push(Cause::invalid("metadata.name", name, msg));
            }
        }
    }
    if namespaced && let Some(ns) = meta["namespace"].as_str() {
        for msg in NameRule::Dns1123Label.check(ns) {
            causes.push(Cause::invalid("metadata.namespace", ns, msg));
        }
    }
    if let Some(labels) = meta["labels"].as_object() {
        for (k, v) in labels {
            for msg in check_qualified_name(k) {
                causes.push(Cause::invalid("metadata.labels", k, msg));
            }
            match v.as_str() {
                Some(v) => {
                    for msg in check_label_value(v) {
                        causes.push(Cause::invalid(format!("metadata.labels.{k}"), v, msg));
                    }
                }
                None => causes.push(Cause::invalid(
                    format!("metadata.labels.{k}"),
                    &v.to_string(),
                    "must be a string",
                )),
            }
        }
    }
    if let Some(annotations) = meta["annotations"].as_object() {
        let mut total = 0;
        for (k, v) in annotations {
            total += k.len() + v.as_str().map(str::len).unwrap_or(0);
            for msg in check_qualified_name(k) {
                causes.push(Cause::invalid("metadata.annotations", k, msg));
            }
        }
        if total > TOTAL_ANNOTATION_SIZE {
            causes.push(Cause {
                reason: "FieldValueTooLong",
                field: "metadata.annotations".into(),
                message: format!("Too long: must have at most {TOTAL_ANNOTATION_SIZE} bytes"),
            });
        }
    }
    causes
}

fn selector_matches_labels(selector: &Value, labels: &Value) -> bool {
    let ml = selector["matchLabels"].as_object();
    ml.is_none_or(|ml| ml.iter().all(|(k, v)| labels.get(k) == Some(v)))
}

/// Type-specific checks kube-apiserver makes that clients depend on.
pub fn check_spec(kind: &str, obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    match kind {
        // kube-aggregator: an APIService is named `<version>.<group>`.
        "APIService" => {
            let spec = &obj["spec"];
            let (group, version) = (
                spec["group"].as_str().unwrap_or_default(),
                spec["version"].as_str().unwrap_or_default(),
            );
            if version.is_empty() {
                causes.push(Cause::required("spec.version"));
            }
            let want = format!("{version}.{group}");
            let name = obj["metadata"]["name"].as_str().unwrap_or_default();
            if !version.is_empty() && name != want {
                causes.push(Cause::invalid(
                    "metadata.name",
                    name,
                    format!("must be `spec.version+\".\"+spec.group`: {want:?}"),
                ));
            }
            for field in ["groupPriorityMinimum", "versionPriority"] {
                if spec[field].as_i64().is_none_or(|p| p <= 0) {
                    causes.push(Cause::invalid(
                        format!("spec.{field}"),
                        &spec[field].to_string(),
                        "must be positive and less than 1000000",
                    ));
                }
            }
        }
        "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet" => {
            let spec = &obj["spec"];
            let selector = &spec["selector"];
            if !selector.is_object() {
                causes.push(Cause::required("spec.selector"));
            } else if selector["matchLabels"]
                .as_object()
                .is_none_or(|m| m.is_empty())
                && selector["matchExpressions"]
                    .as_array()
                    .is_none_or(|m| m.is_empty())
            {
                causes.push(Cause::invalid(
                    "spec.selector",
                    &selector.to_string(),
                    "empty selector is invalid for deployment",
                ));
            } else if !selector_matches_labels(selector, &spec["template"]["metadata"]["labels"]) {
                causes.push(Cause::invalid(
                    "spec.template.metadata.labels",
                    &spec["template"]["metadata"]["labels"].to_string(),
                    "`selector` does not match template `labels`",
                ));
            }
            check_pod_spec(&spec["template"]["spec"], "spec.template.spec", &mut causes);
            if spec["replicas"].as_i64().is_some_and(|r| r < 0) {
                causes.push(Cause::invalid(
                    "spec.replicas",
                    &spec["replicas"].to_string(),
                    "must be greater than or equal to 0",
                ));
            }
        }
        "Pod" => check_pod_spec(&obj["spec"], "spec", &mut causes),
        "ReplicationController" => check_pod_spec(
            &obj["spec"]["template"]["spec"],
            "spec.template.spec",
            &mut causes,
        ),
        "PodTemplate" => check_pod_spec(&obj["template"]["spec"], "template.spec", &mut causes),
        "Job" => check_job_spec(&obj["spec"], "spec", &mut causes),
        "CronJob" => {
            match obj["spec"]["schedule"].as_str() {
                None | Some("") => causes.push(Cause::required("spec.schedule")),
                Some(s) => {
                    if let Err(e) = sluice_api::cron::CronSchedule::parse(s) {
                        causes.push(Cause::invalid("spec.schedule", s, e.to_string()));
                    }
                }
            }
            if let Some(tz) = obj["spec"]["timeZone"].as_str()
                && let Err(e) = sluice_api::cron::time_zone(tz)
            {
                causes.push(Cause::invalid("spec.timeZone", tz, e.to_string()));
            }
            check_job_spec(
                &obj["spec"]["jobTemplate"]["spec"],
                "spec.jobTemplate.spec",
                &mut causes,
            );
        }
        "Service" => {
            let ty = obj["spec"]["type"].as_str().unwrap_or("ClusterIP");
            let headless = obj["spec"]["clusterIP"].as_str() == Some("None");
            if !matches!(
                ty,
                "ClusterIP" | "NodePort" | "LoadBalancer" | "ExternalName"
            ) {
                causes.push(Cause {
                    reason: "FieldValueNotSupported",
                    field: "spec.type".into(),
                    message: format!("Unsupported value: \"{ty}\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\""),
                });
            }
            if ty != "ExternalName"
                && !headless
                && obj["spec"]["ports"].as_array().is_none_or(|p| p.is_empty())
            {
                causes.push(Cause::required("spec.ports"));
            }
        }
        _ => {}
    }
    causes
}

/// A Job's pod template: a pod spec whose pods end (restartPolicy `OnFailure` or `Never`).
fn check_job_spec(spec: &Value, path: &str, causes: &mut Vec<Cause>) {
    let pod = &spec["template"]["spec"];
    let pod_path = format!("{path}.template.spec");
    check_pod_spec(pod, &pod_path, causes);
    let policy = pod["restartPolicy"].as_str().unwrap_or("Always");
    if !matches!(policy, "OnFailure" | "Never") {
        causes.push(Cause {
            reason: "FieldValueNotSupported",
            field: format!("{pod_path}.restartPolicy"),
            message: format!(
                "Unsupported value: \"{policy}\": supported values: \"OnFailure\", \"Never\""
            ),
        });
    }
}

/// A pod spec's containers: at least one, each named by a unique DNS-1123 label (the name
/// becomes part of log paths and of `kubectl logs -c`, so it is checked before anything
/// stores it); ephemeral containers as kube checks them, in a Pod only.
fn check_pod_spec(spec: &Value, path: &str, causes: &mut Vec<Cause>) {
    let containers = spec["containers"].as_array();
    if containers.is_none_or(|c| c.is_empty()) {
        causes.push(Cause::required(format!("{path}.containers")));
    }
    let mut seen = std::collections::HashSet::new();
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for (i, c) in spec[list].as_array().into_iter().flatten().enumerate() {
            let field = format!("{path}.{list}[{i}].name");
            match c["name"].as_str() {
                None | Some("") => causes.push(Cause::required(field)),
                Some(name) => {
                    for msg in NameRule::Dns1123Label.check(name) {
                        causes.push(Cause::invalid(field.clone(), name, msg));
                    }
                    if !seen.insert(name) {
                        causes.push(Cause::duplicate(field, name));
                    }
                }
            }
        }
    }
    if path == "spec" {
        check_ephemeral_containers(spec, causes);
    } else if spec["ephemeralContainers"]
        .as_array()
        .is_some_and(|e| !e.is_empty())
    {
        causes.push(Cause::forbidden(
            format!("{path}.ephemeralContainers"),
            "ephemeral containers not allowed in pod template",
        ));
    }
}

/// Fields an ephemeral container may not have: it is never restarted, probed, served or
/// given resources of its own (kube's `validateEphemeralContainers`).
const NOT_EPHEMERAL: [&str; 9] = [
    "ports",
    "lifecycle",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "resources",
    "resizePolicy",
    "restartPolicy",
    "restartPolicyRules",
];

/// A Pod's ephemeral containers: an image each, none of [`NOT_EPHEMERAL`], and a target
/// that names one of the Pod's containers.
fn check_ephemeral_containers(spec: &Value, causes: &mut Vec<Cause>) {
    let named = |list: &str, name: &str| {
        spec[list]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["name"].as_str() == Some(name))
    };
    for (i, c) in spec["ephemeralContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("spec.ephemeralContainers[{i}]");
        if c["image"].as_str().is_none_or(|i| i.trim().is_empty()) {
            causes.push(Cause::required(format!("{at}.image")));
        }
        for field in NOT_EPHEMERAL {
            let set = match &c[field] {
                Value::Null => false,
                Value::Array(a) => !a.is_empty(),
                Value::Object(o) => !o.is_empty(),
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if set {
                causes.push(Cause::forbidden(
                    format!("{at}.{field}"),
                    "cannot be set for an Ephemeral Container",
                ));
            }
        }
        if let Some(target) = c["targetContainerName"].as_str().filter(|t| !t.is_empty())
            && !named("containers", target)
            && !named("initContainers", target)
        {
            causes.push(Cause {
                reason: "FieldValueNotFound",
                field: format!("{at}.targetContainerName"),
                message: format!("Not found: \"{target}\""),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_checks() {
        let ok = serde_json::json!({"spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c"}]}}}});
        assert!(check_spec("Deployment", &ok).is_empty());
        let bad = serde_json::json!({"spec": {"selector": {"matchLabels": {"a": "x"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c"}]}}}});
        assert_eq!(
            check_spec("Deployment", &bad)[0].field,
            "spec.template.metadata.labels"
        );
        assert_eq!(
            check_spec("Service", &serde_json::json!({"spec": {}}))[0].field,
            "spec.ports"
        );
    }

    #[test]
    fn cron_schedules_and_time_zones_are_checked() {
        let cj = |schedule: &str, tz: Option<&str>| {
            let mut v = serde_json::json!({"spec": {"schedule": schedule, "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c"}]}}}}}});
            if let Some(tz) = tz {
                v["spec"]["timeZone"] = serde_json::json!(tz);
            }
            check_spec("CronJob", &v)
                .into_iter()
                .map(|c| c.field)
                .collect::<Vec<_>>()
        };
        assert!(cj("*/5 * * * *", Some("Europe/Berlin")).is_empty());
        assert_eq!(cj("61 * * * *", None), ["spec.schedule"]);
        assert_eq!(cj("@daily", Some("Nowhere/Special")), ["spec.timeZone"]);
    }

    #[test]
    fn names() {
        assert!(NameRule::Dns1123Subdomain.check("web.v1").is_empty());
        let rbac = NameRule::for_resource("rbac.authorization.k8s.io", "clusterroles");
        assert!(rbac.check("system:kube-dns-autoscaler").is_empty());
        assert!(rbac.check("Ünïcode Name").is_empty());
        assert_eq!(rbac.check(".."), vec!["may not be '..'"]);
        assert_eq!(
            rbac.check("a/b%c"),
            vec!["may not contain '/'", "may not contain '%'"]
        );
        assert_eq!(
            NameRule::for_resource("example.com", "roles"),
            NameRule::Dns1123Subdomain
        );
        assert!(!NameRule::Dns1123Subdomain.check("Web").is_empty());
        assert!(
            !NameRule::Dns1123Subdomain
                .check(&"a".repeat(254))
                .is_empty()
        );
        assert!(
            NameRule::Dns1123Subdomain
                .check(&"a".repeat(253))
                .is_empty()
        );
        assert!(!NameRule::Dns1123Label.check("a.b").is_empty());
        assert!(!NameRule::Dns1035Label.check("1abc").is_empty());
        assert!(NameRule::Dns1035Label.check("abc-1").is_empty());
    }

    #[test]
    fn multibyte_characters_across_the_length_limit_are_refused_not_panicked_on() {
        // 62 ASCII bytes then a 2-byte character: byte 63 falls inside it.
        let long = format!("{}é", "a".repeat(62));
        assert!(!check_label_value(&long).is_empty());
        assert!(!NameRule::Dns1123Label.check(&long).is_empty());
        assert!(!NameRule::Dns1035Label.check(&long).is_empty());
        assert!(!check_qualified_name(&long).is_empty());
        let obj = serde_json::json!({"metadata": {"name": long, "labels": {"a": long}}});
        assert!(!check_metadata(&obj, NameRule::Dns1123Label, true).is_empty());
    }

    #[test]
    fn container_names_are_dns_labels_and_unique() {
        let pod = |names: &[&str]| {
            let cs: Vec<Value> = names
                .iter()
                .map(|n| serde_json::json!({"name": n}))
                .collect();
            serde_json::json!({"spec": {"containers": cs}})
        };
        assert!(check_spec("Pod", &pod(&["web", "sidecar"])).is_empty());
        for bad in ["../../etc", "a/b", "Web", "", "é"] {
            let causes = check_spec("Pod", &pod(&[bad]));
            assert_eq!(causes.len(), 1, "{bad}: {causes:?}");
            assert_eq!(causes[0].field, "spec.containers[0].name");
        }
        assert_eq!(
            check_spec("Pod", &pod(&["a", "a"]))[0].reason,
            "FieldValueDuplicate"
        );
    }

    #[test]
    fn ephemeral_containers_are_checked_as_kube_checks_them() {
        let pod = |ephemeral: Value| serde_json::json!({"spec": {"containers": [{"name": "main"}], "ephemeralContainers": [ephemeral]}});
        let ok = pod(
            serde_json::json!({"name": "debugger", "image": "busybox", "targetContainerName": "main"}),
        );
        assert!(check_spec("Pod", &ok).is_empty());
        let fields = |v: Value| -> Vec<String> {
            check_spec("Pod", &pod(v))
                .into_iter()
                .map(|c| format!("{}: {}", c.field, c.message))
                .collect()
        };
        assert_eq!(
            fields(
                serde_json::json!({"name": "main", "image": "b", "ports": [{"containerPort": 80}], "targetContainerName": "nope"})
            ),
            vec![
                "spec.ephemeralContainers[0].name: Duplicate value: \"main\"",
                "spec.ephemeralContainers[0].ports: Forbidden: cannot be set for an Ephemeral Container",
                "spec.ephemeralContainers[0].targetContainerName: Not found: \"nope\"",
            ]
        );
        assert_eq!(
            fields(serde_json::json!({"name": "d"})),
            vec!["spec.ephemeralContainers[0].image: Required value"]
        );
        let template = serde_json::json!({"template": {"spec": {"containers": [{"name": "c"}], "ephemeralContainers": [{"name": "d", "image": "b"}]}}});
        assert_eq!(
            check_spec("PodTemplate", &template)[0].message,
            "Forbidden: ephemeral containers not allowed in pod template"
        );
    }

    #[test]
    fn labels() {
        assert!(check_qualified_name("app.kubernetes.io/name").is_empty());
        assert!(!check_qualified_name("bad key").is_empty());
        assert!(!check_qualified_name("/x").is_empty());
        assert!(check_label_value("").is_empty());
        assert!(!check_label_value("-x").is_empty());
        let obj = serde_json::json!({"metadata": {"name": "x", "labels": {"a": "b c"}}});
        assert_eq!(
            check_metadata(&obj, NameRule::Dns1123Subdomain, true).len(),
            1
        );
    }
}
