//! Pod Security Standards, as kube's PodSecurity admission applies them, with one change
//! for logical clusters: their Pods run on shared physical clusters, so the level is
//! enforced on every kind that carries a pod template (a Deployment that would make
//! privileged Pods is refused before it is synced), not only on Pods.
//!
//! The level enforced in a namespace is the stricter of its workspace's ceiling
//! (`Workspace.spec.policy.podSecurity`, default `baseline`; the root is `privileged`) and
//! the namespace's own `pod-security.kubernetes.io/enforce` label: a tenant can tighten,
//! never loosen. The namespace records the level enforced in the server-owned annotation
//! [`ANNOTATION`], which the syncer turns into the downstream namespace's PodSecurity
//! labels, so a real cluster's own PodSecurity admission enforces it too. In single-cluster
//! mode (a local physical cluster) the labels alone decide, and templates only warn, as in
//! kube.

mod checks;

use serde_json::Value;
use sluice_api::tenancy::{POD_SECURITY_ANNOTATION as ANNOTATION, PodSecurityLevel as Level};

use sluice_api::LogicalClusterPath;

use crate::errors::{ApiError, ApiResult, Cause};
use crate::pipeline::hooks::{Hook, HookCx};
use crate::resources::Subresource;
use crate::state::write_state::WriteState;
use crate::storage::{ResourcePrefix, StorageError};

pub use checks::{PodView, Violation, evaluate};

/// The namespace labels kube's PodSecurity admission reads.
pub const LABEL_PREFIX: &str = "pod-security.kubernetes.io/";
const MODES: [&str; 3] = ["enforce", "audit", "warn"];

/// Every (group, resource) whose objects are or carry a pod spec.
pub const POD_KINDS: &[(&str, &str)] = &[
    ("", "pods"),
    ("", "podtemplates"),
    ("", "replicationcontrollers"),
    ("apps", "replicasets"),
    ("apps", "deployments"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("batch", "jobs"),
    ("batch", "cronjobs"),
];

/// The pod metadata and spec of an object of `resource`.
fn pod_of<'a>(resource: &str, obj: &'a Value) -> Option<PodView<'a>> {
    let template = match resource {
        "pods" => obj,
        "podtemplates" => &obj["template"],
        "cronjobs" => &obj["spec"]["jobTemplate"]["spec"]["template"],
        _ => &obj["spec"]["template"],
    };
    template["spec"].is_object().then(|| PodView {
        metadata: &template["metadata"],
        spec: &template["spec"],
    })
}

/// A namespace label's level: `None` when absent, `Err` with the bad value.
fn label_level(labels: &Value, mode: &str) -> Option<Result<Level, String>> {
    let v = labels.get(format!("{LABEL_PREFIX}{mode}"))?;
    let s = v.as_str().unwrap_or_default();
    Some(Level::parse(s).ok_or_else(|| s.to_string()))
}

/// What a namespace asks for: the level it enforces and the one it warns at. An invalid
/// enforce label counts as `restricted` (kube fails closed), an invalid warn label as
/// none; without a warn label, warnings follow enforce.
fn namespace_levels(labels: &Value) -> (Level, Level) {
    let enforce = match label_level(labels, "enforce") {
        None => Level::Privileged,
        Some(Ok(l)) => l,
        Some(Err(_)) => Level::Restricted,
    };
    let warn = match label_level(labels, "warn") {
        None => enforce,
        Some(Ok(l)) => l,
        Some(Err(_)) => Level::Privileged,
    };
    (enforce, warn)
}

/// The labels of namespace `ns` of the write's cluster.
fn namespace_labels(cx: &HookCx<'_>, ns: &str) -> Value {
    cx.state
        .namespace(cx.cluster, ns)
        .map(|o| o["metadata"]["labels"].clone())
        .unwrap_or(Value::Null)
}

/// The levels that apply in namespace `labels` of a cluster whose ceiling is `ceiling`.
fn levels(ceiling: Level, labels: &Value) -> (Level, Level) {
    let (enforce, warn) = namespace_levels(labels);
    (enforce.max(ceiling), warn.max(ceiling))
}

/// kube's wording: `violates PodSecurity "baseline:latest": privileged (...), ...`.
fn describe(level: Level, violations: &[Violation]) -> String {
    let details: Vec<String> = violations.iter().map(ToString::to_string).collect();
    format!(
        "violates PodSecurity \"{}:latest\": {}",
        level.as_str(),
        details.join(", ")
    )
}

/// Where a logical cluster's pods run on shared clusters, or a physical cluster's own API
/// server (kube's behaviour).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Every pod-carrying kind is refused when it violates the enforced level.
    EveryTemplate,
    /// Pods are refused; pod templates get warnings only (kube-apiserver's PodSecurity).
    PodsOnly,
}

pub struct PodSecurity(pub Mode);

impl PodSecurity {
    /// Refuse `obj` (kube's wording) when it violates the level its namespace enforces.
    pub fn check(&self, cx: &HookCx<'_>, obj: &Value) -> ApiResult<()> {
        // The syncers' mirrors copy Pods their cluster already admitted; the server's own
        // writes are not requests.
        let Some(user) = cx.user else { return Ok(()) };
        if crate::rbac::syncer::cluster_of(user).is_some() {
            return Ok(());
        }
        let Some(pod) = pod_of(&cx.t.resource, obj) else {
            return Ok(());
        };
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default();
        let ceiling = match self.0 {
            Mode::EveryTemplate => {
                crate::tenancy::effective(&cx.state.store, cx.cluster).pod_security
            }
            Mode::PodsOnly => Level::Privileged,
        };
        let (enforce, warn) = levels(ceiling, &namespace_labels(cx, ns));
        let enforced = self.0 == Mode::EveryTemplate || cx.t.resource == "pods";
        if enforced {
            let violations = evaluate(enforce, pod);
            if !violations.is_empty() {
                return Err(ApiError::RbacForbidden {
                    gr: cx.t.gr.clone(),
                    name: crate::object::name(obj).unwrap_or_default().to_string(),
                    message: describe(enforce, &violations),
                });
            }
        }
        // A warning at the warn level, where it asks for more than what was enforced.
        let floor = if enforced { enforce } else { Level::Privileged };
        if warn > floor {
            let violations = evaluate(warn, pod);
            if !violations.is_empty() {
                cx.warn(format!("would {}", describe(warn, &violations)));
            }
        }
        Ok(())
    }
}

/// Whether an update changes what the pod runs (kube evaluates only those): its containers
/// of any kind, or, for a template, anything of the pod spec or its metadata.
fn pod_changed(resource: &str, old: &Value, new: &Value) -> bool {
    match (pod_of(resource, old), pod_of(resource, new)) {
        (Some(o), Some(n)) if resource == "pods" => {
            ["containers", "initContainers", "ephemeralContainers"]
                .iter()
                .any(|k| o.spec[k] != n.spec[k])
        }
        (Some(o), Some(n)) => o.spec != n.spec || o.metadata != n.metadata,
        (None, None) => false,
        _ => true,
    }
}

impl Hook for PodSecurity {
    fn admit_create(&self, cx: &HookCx<'_>, obj: &mut Value) -> ApiResult<()> {
        self.check(cx, obj)
    }

    fn admit_update(
        &self,
        cx: &HookCx<'_>,
        old: &Value,
        new: &mut Value,
        sub: Option<Subresource>,
    ) -> ApiResult<()> {
        // Status and scale change nothing a pod runs; an ephemeral container is checked
        // with the whole pod it joins.
        if matches!(sub, None | Some(Subresource::EphemeralContainers))
            && pod_changed(&cx.t.resource, old, new)
        {
            self.check(cx, new)?;
        }
        Ok(())
    }
}

/// Namespaces: their PodSecurity labels are checked as kube checks them (422), and, in a
/// logical cluster, the level enforced is recorded in [`ANNOTATION`] for the syncers.
pub struct PodSecurityNamespaces {
    /// Stamp the enforced level (logical clusters).
    pub stamp: bool,
}

impl PodSecurityNamespaces {
    fn stamp(&self, cx: &HookCx<'_>, obj: &mut Value) {
        if !self.stamp {
            return;
        }
        let ceiling = crate::tenancy::effective(&cx.state.store, cx.cluster).pod_security;
        let (enforce, _) = levels(ceiling, &obj["metadata"]["labels"]);
        if let Some(requested) =
            label_level(&obj["metadata"]["labels"], "enforce").and_then(Result::ok)
            && requested < ceiling
        {
            cx.warn(format!(
                "{LABEL_PREFIX}enforce={requested} is looser than this workspace's level: {ceiling} is enforced"
            ));
        }
        stamp_level(obj, enforce);
    }
}

/// Record `level` as the one enforced in namespace `obj`.
pub fn stamp_level(obj: &mut Value, level: Level) {
    crate::object::set_annotation(obj, ANNOTATION, level.as_str());
}

/// Record anew the level enforced in every namespace of `cluster` and of the workspaces
/// below it: after a workspace's policy changed, and at start (namespaces written before
/// the level was recorded). Nothing in single-cluster mode.
pub async fn restamp_namespaces(
    state: &WriteState,
    cluster: &LogicalClusterPath,
) -> Result<(), StorageError> {
    if state.annotation_for(cluster).is_none() {
        return Ok(());
    }
    let namespaces = ResourcePrefix::new("", "namespaces");
    for mut ns in crate::admission::restamp::subtree(&state.store, &namespaces, cluster) {
        let ceiling = crate::tenancy::effective(&state.store, &ns.path).pod_security;
        let (enforce, _) = levels(ceiling, &ns.obj["metadata"]["labels"]);
        if ns.obj["metadata"]["annotations"][ANNOTATION].as_str() == Some(enforce.as_str()) {
            continue;
        }
        stamp_level(&mut ns.obj, enforce);
        // Written meanwhile: that write recorded the level.
        crate::admission::restamp::write_back(&state.store, &ns).await?;
    }
    Ok(())
}

impl Hook for PodSecurityNamespaces {
    fn validate(&self, obj: &Value) -> Vec<Cause> {
        let labels = &obj["metadata"]["labels"];
        let mut causes = Vec::new();
        for mode in MODES {
            if let Some(Err(bad)) = label_level(labels, mode) {
                causes.push(Cause::invalid(
                    format!("metadata.labels[{LABEL_PREFIX}{mode}]"),
                    &bad,
                    "must be one of privileged, baseline, restricted",
                ));
            }
            let version = format!("{LABEL_PREFIX}{mode}-version");
            if let Some(v) = labels.get(&version) {
                let v = v.as_str().unwrap_or_default();
                if !valid_version(v) {
                    causes.push(Cause::invalid(
                        format!("metadata.labels[{version}]"),
                        v,
                        "must be \"latest\" or \"v1.x\"",
                    ));
                }
            }
        }
        causes
    }

    fn admit_create(&self, cx: &HookCx<'_>, obj: &mut Value) -> ApiResult<()> {
        self.stamp(cx, obj);
        Ok(())
    }

    fn admit_update(
        &self,
        cx: &HookCx<'_>,
        _old: &Value,
        new: &mut Value,
        _sub: Option<Subresource>,
    ) -> ApiResult<()> {
        self.stamp(cx, new);
        Ok(())
    }
}

/// `latest` or `v1.<n>` (kube's version labels; Sluice evaluates the latest standard).
fn valid_version(v: &str) -> bool {
    v == "latest"
        || v.strip_prefix("v1.").is_some_and(|n| {
            !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_digit())
                && (n == "0" || !n.starts_with('0'))
                && n.parse::<i32>().is_ok()
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_namespace_tightens_but_never_loosens() {
        let labels = json!({"pod-security.kubernetes.io/enforce": "privileged"});
        assert_eq!(levels(Level::Baseline, &labels).0, Level::Baseline);
        let labels = json!({"pod-security.kubernetes.io/enforce": "restricted"});
        assert_eq!(
            levels(Level::Baseline, &labels),
            (Level::Restricted, Level::Restricted)
        );
        let labels = json!({"pod-security.kubernetes.io/enforce": "nonsense"});
        assert_eq!(levels(Level::Privileged, &labels).0, Level::Restricted);
        let labels = json!({"pod-security.kubernetes.io/warn": "restricted"});
        assert_eq!(
            levels(Level::Baseline, &labels),
            (Level::Baseline, Level::Restricted)
        );
        assert_eq!(
            levels(Level::Baseline, &Value::Null),
            (Level::Baseline, Level::Baseline)
        );
    }

    #[test]
    fn versions_are_kubes() {
        for ok in ["latest", "v1.0", "v1.25", "v1.99"] {
            assert!(valid_version(ok), "{ok}");
        }
        for bad in [
            "",
            "Latest",
            "1.25",
            "v1.",
            "v1.01",
            "v2.0",
            "v1.x",
            "v1.99999999999",
        ] {
            assert!(!valid_version(bad), "{bad}");
        }
    }

    #[test]
    fn templates_are_found_where_each_kind_keeps_them() {
        let t = json!({"metadata": {"labels": {"a": "b"}}, "spec": {"containers": []}});
        for (resource, obj) in [
            ("pods", t.clone()),
            ("podtemplates", json!({"template": t})),
            ("deployments", json!({"spec": {"template": t}})),
            (
                "cronjobs",
                json!({"spec": {"jobTemplate": {"spec": {"template": t}}}}),
            ),
        ] {
            let pod = pod_of(resource, &obj).unwrap_or_else(|| panic!("{resource}"));
            assert_eq!(pod.metadata["labels"]["a"], "b");
        }
        assert!(pod_of("deployments", &json!({"spec": {}})).is_none());
    }

    #[test]
    fn only_changes_to_what_runs_are_evaluated() {
        let old = json!({"metadata": {"labels": {}}, "spec": {"containers": [{"name": "c", "image": "a"}], "nodeName": ""}});
        let mut new = old.clone();
        new["metadata"]["labels"]["x"] = json!("y");
        new["spec"]["nodeName"] = json!("n");
        assert!(!pod_changed("pods", &old, &new));
        new["spec"]["containers"][0]["image"] = json!("b");
        assert!(pod_changed("pods", &old, &new));
        let d = |image: &str| json!({"metadata": {"labels": {"l": "1"}}, "spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}}});
        let mut relabelled = d("a");
        relabelled["metadata"]["labels"]["l"] = json!("2");
        assert!(!pod_changed("deployments", &d("a"), &relabelled));
        assert!(pod_changed("deployments", &d("a"), &d("b")));
    }
}
