//! The steps every kind of write shares: where it goes, the object it reads, encoding,
//! reserved and immutable fields, validation, webhooks' admission and warnings, the
//! namespace check, field ownership. The write kinds (create, apply, modify, scale,
//! delete) are built from these.

use bytes::Bytes;
use serde_json::Value;
use sluice_api::LogicalClusterPath;
use std::sync::Arc;

use super::hooks::HookCx;
use super::params::Write;
use super::reserved;
use super::stored::{Via, stored_as, stored_by_webhook};

use crate::errors::{ApiError, ApiResult, Cause};
use crate::object;
use crate::resources::ResourceType;
use crate::state::ApiState;
use crate::storage::{Key, Revision, cache::with_resource_version};
use crate::validation::{self, NameRule};
use crate::webhooks;

/// How many times an unconditional update or a patch is retried on a write race.
pub(super) const WRITE_RETRIES: usize = 16;

/// Where a write goes: a resource type in one logical cluster (and namespace).
pub struct Target {
    pub t: Arc<ResourceType>,
    pub cluster: LogicalClusterPath,
    pub namespace: Option<String>,
}

impl Target {
    pub fn key(&self, name: &str) -> Key {
        self.t
            .prefix
            .key(&self.cluster, self.namespace.as_deref(), name)
    }
}

/// Where a write to `target` goes: itself, or for a converted view the type it is stored
/// as in the same cluster and namespace, with the conversion.
pub(super) fn stored_target(state: &ApiState, target: &Target) -> ApiResult<Option<(Target, Via)>> {
    let stored = match stored_as(&target.t)? {
        Some((t, c)) => Some((t, Via::Builtin(c))),
        None => stored_by_webhook(state, &target.cluster, &target.t)?,
    };
    Ok(stored.map(|(t, via)| {
        (
            Target {
                t,
                cluster: target.cluster.clone(),
                namespace: target.namespace.clone(),
            },
            via,
        )
    }))
}

/// The outcome of a write.
pub enum Written {
    /// Committed at `revision` (or, in a dry run, what would have been).
    Object { object: Value, revision: Revision },
    /// Nothing changed: the stored bytes, as they are.
    Unchanged(Bytes),
}

impl Written {
    /// The object as stored, with its resourceVersion.
    pub fn into_bytes(self) -> ApiResult<Bytes> {
        match self {
            Self::Object { object, revision } => {
                let bytes =
                    serde_json::to_vec(&object).map_err(|e| ApiError::Internal(e.to_string()))?;
                Ok(with_resource_version(&bytes, revision))
            }
            Self::Unchanged(bytes) => Ok(bytes),
        }
    }
}

/// The stored entry under `key` and its object; NotFound names `name`.
pub(super) fn current(
    state: &ApiState,
    t: &ResourceType,
    key: &Key,
    name: &str,
) -> ApiResult<(Arc<crate::storage::cache::Entry>, Value)> {
    let entry = state
        .store
        .get(key)
        .ok_or_else(|| ApiError::not_found(&t.gr, name))?;
    let obj =
        serde_json::from_slice(&entry.value).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok((entry, obj))
}

/// The stored form of `obj`, refused (413, as kube refuses what etcd would not take) when it
/// is larger than a request may be: a patch or a server-side apply can grow an object past
/// what any one client could have sent.
pub(super) fn encode(state: &ApiState, obj: &Value) -> ApiResult<Bytes> {
    let bytes = serde_json::to_vec(obj).map_err(|e| ApiError::Internal(e.to_string()))?;
    if bytes.len() > state.limits.max_body {
        return Err(ApiError::too_large(state.limits.max_body));
    }
    Ok(Bytes::from(bytes))
}

/// Refuse a client's change to a label or annotation Sluice's parts own (in a logical
/// cluster; a physical cluster's server keeps kube's behaviour).
pub(super) fn check_reserved(
    state: &ApiState,
    t: &ResourceType,
    cluster: &LogicalClusterPath,
    user: Option<&crate::auth::User>,
    old: Option<&Value>,
    new: &Value,
) -> ApiResult<()> {
    if state.annotation_for(cluster).is_none() {
        return Ok(());
    }
    match reserved::first_changed(user, &t.resource, old, new) {
        None => Ok(()),
        Some((map, key)) => Err(ApiError::RbacForbidden {
            gr: t.gr.clone(),
            name: object::name(new).unwrap_or_default().to_string(),
            message: format!(
                "{} {key:?} is set by Sluice's controllers, not by clients",
                map.trim_end_matches('s')
            ),
        }),
    }
}

/// A mutating webhook may change an object but not which object it is (kube refuses a
/// patch of the name or namespace the same way).
pub(super) fn unchanged_identity(
    t: &ResourceType,
    name: &str,
    namespace: Option<&str>,
    obj: &Value,
) -> ApiResult<()> {
    let ns = obj["metadata"]["namespace"].as_str();
    if object::name(obj).unwrap_or("") != name || (t.namespaced && ns.is_some() && ns != namespace)
    {
        return Err(ApiError::Internal(format!(
            "an admission webhook changed the name or namespace of {} {name:?}",
            t.kind
        )));
    }
    Ok(())
}

/// The validating admission of a write, in kube's order: the ValidatingAdmissionPolicies,
/// then the validating webhooks. Their warnings and audit annotations go to `w`.
pub(super) async fn validating_admission(
    state: &ApiState,
    a: &webhooks::Admission<'_>,
    obj: Option<&Value>,
    old: Option<&Value>,
    w: &mut Write,
) -> ApiResult<()> {
    crate::policies::validate(
        state,
        a,
        obj,
        old,
        &mut w.warnings,
        &mut w.audit_annotations,
    )?;
    webhooks::validate(state, a, obj, old, &mut reports(w)).await
}

/// Where admission reports what it has to say besides its verdict.
pub(super) fn reports(w: &mut Write) -> webhooks::Reports<'_> {
    webhooks::Reports {
        warnings: &mut w.warnings,
        audit: &mut w.audit_annotations,
    }
}

/// Hand the hooks' warnings to the client, once each (a retried write admits again).
pub(super) fn add_warnings(w: &mut Write, cx: &HookCx<'_>) {
    for m in cx.take_warnings() {
        if !w.warnings.contains(&m) {
            w.warnings.push(m);
        }
    }
}

pub fn invalid(t: &ResourceType, name: &str, causes: Vec<Cause>) -> ApiError {
    ApiError::Invalid {
        gr: t.gr.clone(),
        kind: t.kind.to_string(),
        name: name.to_string(),
        causes,
    }
}

/// The generic checks (metadata, the type's own rules, a custom type's schema) and the
/// hooks' checks.
pub(super) fn validate(
    state: &ApiState,
    t: &ResourceType,
    obj: &Value,
    old: Option<&Value>,
) -> ApiResult<()> {
    let mut causes = validation::check_metadata(
        obj,
        NameRule::for_resource(&t.group, &t.resource),
        t.namespaced,
    );
    causes.extend(validation::check_spec(&t.kind, obj));
    if let Some(schema) = t.custom().and_then(|c| c.schema.as_ref()) {
        let mut body = obj.clone();
        if let Some(o) = body.as_object_mut() {
            o.remove("metadata");
            o.remove("apiVersion");
            o.remove("kind");
        }
        crate::crd::structural::validate(schema, &body, "", &mut causes, 0);
        // CEL rules run on objects that are otherwise valid (kube's order).
        if causes.is_empty() && crate::crd::cel::has_rules(schema) {
            let before = old.map(|o| {
                let mut o = o.clone();
                if let Some(m) = o.as_object_mut() {
                    m.remove("metadata");
                    m.remove("apiVersion");
                    m.remove("kind");
                }
                o
            });
            crate::crd::cel::validate(schema, &body, before.as_ref(), "", &mut causes, 0);
        }
    }
    for hook in state.hooks.of(t) {
        causes.extend(hook.validate(obj));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(invalid(t, object::name(obj).unwrap_or(""), causes))
    }
}

/// New content may only go into a namespace that exists and is not terminating.
pub(super) fn check_namespace(state: &ApiState, target: &Target) -> ApiResult<()> {
    let (Some(ns), cluster) = (&target.namespace, &target.cluster) else {
        return Ok(());
    };
    let v = state.namespace(cluster, ns).ok_or_else(|| {
        ApiError::not_found(
            &crate::errors::GroupResource {
                group: String::new(),
                resource: "namespaces".into(),
            },
            ns,
        )
    })?;
    if object::is_deleting(&v) {
        return Err(ApiError::Forbidden(format!(
            "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
            target.t.gr,
            v["metadata"]["name"].as_str().unwrap_or("")
        )));
    }
    Ok(())
}

/// Who owns the fields of a write.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// A create, update or patch: the request's field manager takes what it changed.
    Update,
    /// Server-side apply already set managedFields.
    Applied,
}

/// The field-ownership view of a type's schema.
pub fn ownership_schema<'a>(state: &'a ApiState, t: &'a ResourceType) -> crate::apply::Schema<'a> {
    let root = match t.custom() {
        Some(c) => c.schema.as_ref(),
        None => state.schemas.definition(&t.definition),
    };
    crate::apply::Schema {
        set: state.schemas,
        root,
    }
}
