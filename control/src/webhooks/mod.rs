//! Admission webhooks (admissionregistration.k8s.io/v1) of each logical cluster, called by
//! the object pipeline where kube calls them: mutating webhooks after defaults and before
//! validation, one after another (patches applied in turn, `reinvocationPolicy: IfNeeded`
//! honoured once); validating webhooks after validation and the server's own admission, all
//! at once. A webhook's configuration lives in the logical cluster it applies to; its
//! `service` is reached wherever that Service runs ([`transport`]).
//!
//! What webhooks never see, as kube exempts its own: webhook configurations themselves,
//! Leases, Sluice's own kinds, and the writes of Sluice's own parts (placement, syncers,
//! the server's controllers) — a tenant's webhook cannot hold up or read the machinery that
//! moves its namespaces, so a `failurePolicy: Fail` webhook whose pod is moving does not
//! wedge its own move.

pub mod config;
pub mod conversion;
pub mod matching;
pub mod pool;
pub mod review;
pub mod transport;

use std::collections::BTreeMap;
use std::time::Instant;

use bytes::Bytes;
use serde_json::Value;
use sluice_api::LogicalClusterPath;

use config::{FailurePolicy, Phase, Reinvocation, Webhook};
use matching::{Attributes, Operation};

use crate::auth::User;
use crate::errors::{ApiError, ApiResult};
use crate::resources::{ResourceType, Subresource};
use crate::state::ApiState;
use crate::storage::ResourcePrefix;

/// One admission request: what is written, where, by whom.
pub struct Admission<'a> {
    pub cluster: &'a LogicalClusterPath,
    pub t: &'a ResourceType,
    pub sub: Option<Subresource>,
    pub operation: Operation,
    pub name: &'a str,
    pub namespace: Option<&'a str>,
    pub user: Option<&'a User>,
    pub manager: Option<&'a str>,
    pub dry_run: bool,
}

/// Whether no webhook may see this request (see the module's doc).
pub(crate) fn exempt(a: &Admission<'_>) -> bool {
    // Exactly the identities no tenant can take (only system:masters may impersonate them).
    let system = a.user.is_none_or(|u| {
        use crate::rbac::{clusterset, syncer};
        u.is_controller()
            || u.groups
                .iter()
                .any(|g| g == syncer::GROUP || g == clusterset::GROUP)
            || u.name.starts_with(syncer::USER_PREFIX)
            || u.name.starts_with(clusterset::USER_PREFIX)
    });
    system
        || a.t.group == "admissionregistration.k8s.io"
        || (a.t.group == "coordination.k8s.io" && a.t.resource == "leases")
        || a.t.group == sluice_api::sluice::GROUP
}

/// The webhooks of `phase` configured in `cluster`, ordered as kube orders them (by
/// configuration name, then as listed). A configuration that no longer parses (it was
/// checked when written) is skipped.
fn configured(state: &ApiState, cluster: &LogicalClusterPath, phase: Phase) -> Vec<Webhook> {
    let prefix = ResourcePrefix::new("admissionregistration.k8s.io", phase.resource())
        .scope(Some(cluster), None);
    let mut out = Vec::new();
    state.store.scan(&prefix, None, |_, e| {
        if let Ok(obj) = serde_json::from_slice::<Value>(&e.value)
            && let Ok(hooks) = config::parse(&obj, phase)
        {
            out.extend(hooks);
        }
        true
    });
    out
}

/// The labels the namespace selector is checked against.
pub(crate) fn namespace_labels(
    state: &ApiState,
    a: &Admission<'_>,
    object: Option<&Value>,
) -> Option<BTreeMap<String, String>> {
    if a.t.group.is_empty() && a.t.resource == "namespaces" {
        return object.map(matching::labels_of);
    }
    let ns = a.namespace?;
    Some(
        state
            .namespace(a.cluster, ns)
            .map(|stored| matching::labels_of(&stored))
            .unwrap_or_default(),
    )
}

pub(crate) fn attributes<'a>(
    a: &'a Admission<'a>,
    object: Option<&'a Value>,
    old: Option<&'a Value>,
    ns_labels: Option<BTreeMap<String, String>>,
) -> Attributes<'a> {
    Attributes {
        operation: a.operation,
        group: &a.t.group,
        version: &a.t.version,
        resource: &a.t.resource,
        subresource: a.sub.map(Subresource::name),
        namespaced: a.t.namespaced,
        object,
        old_object: old,
        namespace_labels: ns_labels,
    }
}

/// What calling one webhook came to.
enum Outcome {
    Allowed(review::Verdict),
    Denied(ApiError),
    /// Not called or no valid answer: `failurePolicy` decides.
    Failed(String),
}

/// Call `hook` with the review of `attrs`.
async fn call(
    state: &ApiState,
    a: &Admission<'_>,
    hook: &Webhook,
    attrs: &Attributes<'_>,
) -> Outcome {
    let uid = uuid::Uuid::new_v4().to_string();
    let body = match serde_json::to_vec(&review_of(a, attrs, &uid)) {
        Ok(b) => Bytes::from(b),
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let started = Instant::now();
    let span = tracing::info_span!("admission webhook", webhook = %hook.name,
        configuration = %hook.configuration, phase = ?hook.phase, operation = a.operation.as_str(),
        resource = %a.t.resource, name = %a.name, cluster = %a.cluster);
    let answer = tracing::Instrument::instrument(
        transport::call(state, a.cluster, hook.into(), body),
        span.clone(),
    )
    .await;
    let outcome = match answer {
        Err(e) => Outcome::Failed(format!(
            "failed to call webhook: Post \"{}?timeout={}s\": {e}",
            hook.client.describe(),
            hook.timeout.as_secs()
        )),
        Ok(bytes) => match review::response(&bytes, &uid, hook.phase == Phase::Mutating) {
            Err(e) => Outcome::Failed(e.to_string()),
            Ok(v) if v.allowed => Outcome::Allowed(v),
            Ok(v) => Outcome::Denied(denial(&hook.name, &v)),
        },
    };
    let result = match &outcome {
        Outcome::Allowed(_) => "allowed",
        Outcome::Denied(_) => "denied",
        Outcome::Failed(_) => "error",
    };
    state.metrics.record_webhook(
        &hook.name,
        match hook.phase {
            Phase::Mutating => "mutating",
            Phase::Validating => "validating",
        },
        result,
        started.elapsed(),
    );
    if let Outcome::Failed(why) = &outcome {
        tracing::warn!(parent: &span, error = %why, policy = ?hook.failure_policy, "admission webhook failed");
    }
    outcome
}

/// kube's error for a denial (`webhookerrors.ToStatusErr`).
fn denial(name: &str, v: &review::Verdict) -> ApiError {
    let denied_by = format!("admission webhook {name:?} denied the request");
    let message = if !v.message.is_empty() {
        format!("{denied_by}: {}", v.message)
    } else if !v.reason.is_empty() {
        format!("{denied_by}: {}", v.reason)
    } else {
        format!("{denied_by} without explanation")
    };
    ApiError::Denied {
        code: v.code.filter(|c| *c >= 400 && *c < 600).unwrap_or(400),
        reason: v.reason.clone(),
        message,
    }
}

/// What a failed call does under `hook`'s failure policy: kube's error, or nothing.
fn failed(hook: &Webhook, why: String) -> ApiResult<()> {
    match hook.failure_policy {
        FailurePolicy::Fail => Err(ApiError::Internal(format!(
            "failed calling webhook {:?}: {why}",
            hook.name
        ))),
        FailurePolicy::Ignore => Ok(()),
    }
}

/// The `AdmissionReview` of request `a` with `uid`.
fn review_of(a: &Admission<'_>, attrs: &Attributes<'_>, uid: &str) -> Value {
    let groups = a.user.map(|u| u.groups.clone()).unwrap_or_default();
    let user = review::UserInfo {
        name: a.user.map_or("", |u| u.name.as_str()),
        groups: &groups,
    };
    review::request(
        uid,
        attrs,
        &a.t.kind,
        a.name,
        a.namespace,
        &user,
        a.dry_run,
        review::options(a.operation, a.manager, a.dry_run),
    )
}

/// The `AdmissionRequest` the webhook would be sent, as its match conditions see it.
pub(crate) fn request_view(a: &Admission<'_>, attrs: &Attributes<'_>) -> Value {
    review_of(a, attrs, "")["request"].take()
}

/// Whether `hook`'s match conditions let it be called; one that cannot be evaluated fails
/// the request under `Fail` and skips the webhook under `Ignore`.
fn conditions(a: &Admission<'_>, hook: &Webhook, attrs: &Attributes<'_>) -> ApiResult<bool> {
    if hook.match_conditions.is_empty() {
        return Ok(true);
    }
    match matching::conditions_hold(hook, &request_view(a, attrs)) {
        Ok(hold) => Ok(hold),
        Err(why) => {
            failed(hook, format!("failed to evaluate match conditions: {why}")).map(|()| false)
        }
    }
}

/// A dry run may only call webhooks without side effects (kube's refusal otherwise).
fn dry_run_allowed(a: &Admission<'_>, hook: &Webhook) -> ApiResult<()> {
    if a.dry_run && !hook.side_effects.dry_run_safe() {
        return Err(ApiError::BadRequest(format!(
            "admission webhook {:?} does not support dry run",
            hook.name
        )));
    }
    Ok(())
}

/// What admission reports besides its verdict: warnings for the client, and annotations
/// for the request's audit event.
pub struct Reports<'r> {
    pub warnings: &'r mut Vec<String>,
    pub audit: &'r mut Vec<(String, String)>,
}

/// Keep `v`'s warnings, and its audit annotations under `<webhook>/<key>` (kube's keys;
/// the first value of a key stays).
fn keep_reports(reports: &mut Reports<'_>, hook: &Webhook, v: &review::Verdict) {
    for w in &v.warnings {
        if !reports.warnings.contains(w) {
            reports.warnings.push(w.clone());
        }
    }
    for (k, value) in &v.audit_annotations {
        let key = format!("{}/{k}", hook.name);
        if !reports.audit.iter().any(|(have, _)| *have == key) {
            reports.audit.push((key, value.clone()));
        }
    }
}

/// Run the mutating webhooks of `a`'s cluster on `obj` (a create's or update's new object;
/// `old` for updates), applying their patches; their warnings and audit annotations go to
/// `reports`. Returns whether any webhook changed the object.
pub async fn mutate(
    state: &ApiState,
    a: &Admission<'_>,
    obj: &mut Value,
    old: Option<&Value>,
    reports: &mut Reports<'_>,
) -> ApiResult<bool> {
    if exempt(a) {
        return Ok(false);
    }
    let hooks = configured(state, a.cluster, Phase::Mutating);
    if hooks.is_empty() {
        return Ok(false);
    }
    let ns_labels = namespace_labels(state, a, Some(obj));
    // Which webhooks ran, and after which call the object last changed.
    let mut called: Vec<(usize, usize)> = Vec::new();
    let mut last_change: Option<usize> = None;
    let mut step = 0usize;
    for (i, hook) in hooks.iter().enumerate() {
        let attrs = attributes(a, Some(obj), old, ns_labels.clone());
        if !matching::matches(hook, &attrs) || !conditions(a, hook, &attrs)? {
            continue;
        }
        dry_run_allowed(a, hook)?;
        if apply_one(state, a, hook, obj, old, ns_labels.clone(), reports).await? {
            last_change = Some(step);
        }
        called.push((i, step));
        step += 1;
    }
    // kube: a webhook that asked for it is called once more when a later one changed the
    // object after it.
    let again: Vec<usize> = called
        .iter()
        .filter(|(i, at)| {
            hooks[*i].reinvocation == Reinvocation::IfNeeded && last_change.is_some_and(|c| c > *at)
        })
        .map(|(i, _)| *i)
        .collect();
    let mut changed = last_change.is_some();
    for i in again {
        changed |= apply_one(state, a, &hooks[i], obj, old, ns_labels.clone(), reports).await?;
    }
    Ok(changed)
}

/// Call one mutating webhook and apply its patch; returns whether the object changed.
async fn apply_one(
    state: &ApiState,
    a: &Admission<'_>,
    hook: &Webhook,
    obj: &mut Value,
    old: Option<&Value>,
    ns_labels: Option<BTreeMap<String, String>>,
    reports: &mut Reports<'_>,
) -> ApiResult<bool> {
    let attrs = attributes(a, Some(obj), old, ns_labels);
    let outcome = call(state, a, hook, &attrs).await;
    match outcome {
        Outcome::Failed(why) => failed(hook, why).map(|()| false),
        Outcome::Denied(e) => Err(e),
        Outcome::Allowed(v) => {
            keep_reports(reports, hook, &v);
            let Some(patch) = &v.patch else {
                return Ok(false);
            };
            let patched = crate::patch::json_patch(obj, patch).map_err(|e| {
                ApiError::Internal(format!(
                    "admission webhook {:?} returned a patch that does not apply: {e}",
                    hook.name
                ))
            })?;
            if !patched.is_object() {
                return Err(ApiError::Internal(format!(
                    "admission webhook {:?} patched the object into something that is not one",
                    hook.name
                )));
            }
            let changed = patched != *obj;
            *obj = patched;
            Ok(changed)
        }
    }
}

/// Run the validating webhooks of `a`'s cluster (`obj` the new object, `None` for a
/// deletion; `old` what it replaces), all at once; the first denial or failure that its
/// policy does not ignore refuses the write.
pub async fn validate(
    state: &ApiState,
    a: &Admission<'_>,
    obj: Option<&Value>,
    old: Option<&Value>,
    reports: &mut Reports<'_>,
) -> ApiResult<()> {
    if exempt(a) {
        return Ok(());
    }
    let hooks = configured(state, a.cluster, Phase::Validating);
    if hooks.is_empty() {
        return Ok(());
    }
    let ns_labels = namespace_labels(state, a, obj.or(old));
    let attrs = attributes(a, obj, old, ns_labels);
    let mut chosen = Vec::new();
    for hook in hooks.iter().filter(|h| matching::matches(h, &attrs)) {
        if !conditions(a, hook, &attrs)? {
            continue;
        }
        dry_run_allowed(a, hook)?;
        chosen.push(hook);
    }
    let outcomes =
        futures::future::join_all(chosen.iter().map(|hook| call(state, a, hook, &attrs))).await;
    for (hook, outcome) in chosen.iter().zip(outcomes) {
        match outcome {
            Outcome::Allowed(v) => keep_reports(reports, hook, &v),
            Outcome::Denied(e) => return Err(e),
            Outcome::Failed(why) => failed(hook, why)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_audit_annotations_are_keyed_by_the_webhook() {
        let c = serde_json::json!({"metadata": {"name": "c"}, "webhooks": [{
            "name": "image.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": {"url": "https://127.0.0.1:1/"}}]});
        let hook = config::parse(&c, Phase::Validating).unwrap().remove(0);
        let v = review::Verdict {
            allowed: true,
            code: None,
            reason: String::new(),
            message: String::new(),
            patch: None,
            warnings: vec!["careful".into()],
            audit_annotations: vec![("error".into(), "image-blacklisted".into())],
        };
        let (mut warnings, mut audit) = (Vec::new(), Vec::new());
        let mut reports = Reports {
            warnings: &mut warnings,
            audit: &mut audit,
        };
        keep_reports(&mut reports, &hook, &v);
        keep_reports(&mut reports, &hook, &v);
        assert_eq!(warnings, vec!["careful".to_string()]);
        assert_eq!(
            audit,
            vec![(
                "image.example.com/error".to_string(),
                "image-blacklisted".to_string()
            )]
        );
    }

    #[test]
    fn a_denial_reads_as_kubes() {
        let v = review::Verdict {
            allowed: false,
            code: Some(403),
            reason: String::new(),
            message: "team label required".into(),
            patch: None,
            warnings: vec![],
            audit_annotations: vec![],
        };
        let e = denial("policy.example.com", &v);
        assert_eq!(
            e.to_string(),
            "admission webhook \"policy.example.com\" denied the request: team label required"
        );
        assert_eq!(e.code(), 403);
        let bare = review::Verdict {
            code: None,
            message: String::new(),
            ..v
        };
        let e = denial("p.example.com", &bare);
        assert_eq!(e.code(), 400);
        assert!(
            e.to_string()
                .ends_with("denied the request without explanation")
        );
    }
}
