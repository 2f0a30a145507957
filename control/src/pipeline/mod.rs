//! The object pipeline every write goes through, whatever the client or protocol:
//! decode → defaults → server metadata → validation → admission → persist → after-commit.
//! Admission comes after validation so that what a hook reserves (a ClusterIP) is only
//! reserved for an object that will be written. HTTP handlers are
//! thin adapters over it (they turn requests into [`Write`]s and results into responses);
//! the garbage collector and termination controllers call it directly. Per-resource steps
//! are [`hooks`] registered by group and resource (see [`crate::admission`]).

pub mod commit;
pub mod decode;
pub mod hooks;
pub mod params;
pub mod reserved;
pub mod stored;

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};
use sluice_api::LogicalClusterPath;

use commit::Writer;
pub use decode::{check_decoded, decode_body};
use hooks::{Committed, Deletion, HookCx};
pub use params::{FieldValidation, Write, parse_json};
use stored::{Via, stored_as, stored_by_webhook, stored_type};

use crate::errors::{ApiError, ApiResult, Cause};
use crate::object;
use crate::patch::{self, PatchError, PatchType};
use crate::resources::{ResourceType, Subresource};
use crate::state::ApiState;
use crate::storage::{Expect, Key, Op, Revision, StorageError, cache::with_resource_version};
use crate::validation::{self, NameRule};
use crate::webhooks::{self, matching::Operation};

/// How many times an unconditional update or a patch is retried on a write race.
const WRITE_RETRIES: usize = 16;

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
fn stored_target(state: &ApiState, target: &Target) -> ApiResult<Option<(Target, Via)>> {
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
fn current(
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
fn encode(state: &ApiState, obj: &Value) -> ApiResult<Bytes> {
    let bytes = serde_json::to_vec(obj).map_err(|e| ApiError::Internal(e.to_string()))?;
    if bytes.len() > state.limits.max_body {
        return Err(ApiError::too_large(state.limits.max_body));
    }
    Ok(Bytes::from(bytes))
}

/// Refuse a client's change to a label or annotation Sluice's parts own (in a logical
/// cluster; a physical cluster's server keeps kube's behaviour).
fn check_reserved(
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
fn unchanged_identity(
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
async fn validating_admission(
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
fn reports(w: &mut Write) -> webhooks::Reports<'_> {
    webhooks::Reports {
        warnings: &mut w.warnings,
        audit: &mut w.audit_annotations,
    }
}

/// Hand the hooks' warnings to the client, once each (a retried write admits again).
fn add_warnings(w: &mut Write, cx: &HookCx<'_>) {
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
fn validate(state: &ApiState, t: &ResourceType, obj: &Value, old: Option<&Value>) -> ApiResult<()> {
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
fn check_namespace(state: &ApiState, target: &Target) -> ApiResult<()> {
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

/// Create `obj`: defaults, server metadata, admission, validation, persist, after-commit.
pub async fn create(
    state: &ApiState,
    target: &Target,
    obj: Value,
    ownership: Ownership,
    w: &mut Write,
) -> ApiResult<Written> {
    let converted = stored_target(state, target)?;
    let (target, mut obj) = match &converted {
        Some((stored, via)) => (stored, via.stored_form(state, &target.cluster, obj).await?),
        None => (target, obj),
    };
    let t = &*target.t;
    let cluster = target.cluster.clone();
    if let (Some(ns), Some(body_ns)) = (&target.namespace, obj["metadata"]["namespace"].as_str())
        && ns != body_ns
    {
        return Err(ApiError::BadRequest(
            "the namespace of the provided object does not match the namespace sent on the request"
                .into(),
        ));
    }
    if object::name(&obj).is_none_or(str::is_empty)
        && let Some(g) = obj["metadata"]["generateName"]
            .as_str()
            .filter(|g| !g.is_empty())
    {
        let name = format!("{g}{}", object::random_suffix());
        object::meta_mut(&mut obj).insert("name".into(), json!(name));
    }
    crate::defaults::apply(&t.kind, &mut obj);
    let name = object::name(&obj).unwrap_or("").to_string();
    let manager = w.manager.clone();
    let user = w.user.clone();
    let admission = webhooks::Admission {
        cluster: &cluster,
        t,
        sub: None,
        operation: Operation::Create,
        name: &name,
        namespace: target.namespace.as_deref(),
        user: user.as_ref(),
        manager: Some(&manager),
        dry_run: w.dry_run,
    };
    if webhooks::mutate(state, &admission, &mut obj, None, &mut reports(w)).await? {
        // What the webhooks set is defaulted as a decoded object would be.
        crate::defaults::apply(&t.kind, &mut obj);
        unchanged_identity(t, &name, target.namespace.as_deref(), &obj)?;
    }
    object::prepare_create(
        &mut obj,
        t,
        state.annotation_for(&cluster),
        target.namespace.as_deref(),
    );
    crate::defaults::on_create(&t.kind, &mut obj);
    let cx = HookCx {
        state,
        t,
        cluster: &cluster,
        manager: Some(&manager),
        user: user.as_ref(),
        warnings: Default::default(),
    };
    if ownership == Ownership::Update {
        crate::apply::record_update(
            &ownership_schema(state, t),
            None,
            &mut obj,
            &w.manager,
            &t.api_version(),
            None,
        );
    }
    validate(state, t, &obj, None)?;
    check_namespace(state, target)?;
    check_reserved(state, t, &cluster, w.user.as_ref(), None, &obj)?;
    if let Some(synced) = w.user.as_ref().and_then(crate::rbac::syncer::cluster_of) {
        crate::rbac::syncer::may_create(&synced, &t.group, &t.resource, &obj).map_err(
            |message| ApiError::RbacForbidden {
                gr: t.gr.clone(),
                name: object::name(&obj).unwrap_or_default().to_string(),
                message,
            },
        )?;
    }
    let hooks = state.hooks.of(t);
    for (i, hook) in hooks.iter().enumerate() {
        if let Err(e) = hook.admit_create(&cx, &mut obj) {
            hooks[..i].iter().for_each(|h| h.release(&obj));
            return Err(e);
        }
    }
    add_warnings(w, &cx);
    let release = |obj: &Value| hooks.iter().for_each(|h| h.release(obj));
    if let Err(e) = validating_admission(state, &admission, Some(&obj), None, w).await {
        release(&obj);
        return Err(e);
    }
    let bytes = encode(state, &obj).inspect_err(|_| release(&obj))?;
    if w.dry_run {
        release(&obj);
        return Ok(Written::Object {
            object: obj,
            revision: state.store.revision(),
        });
    }
    let committed = commit::commit(
        &state.store,
        Writer::Request,
        Op::Put {
            key: target.key(&name),
            value: bytes,
            expect: Expect::Absent,
        },
    )
    .await
    .map_err(|e| {
        release(&obj);
        ApiError::from_storage(e, &t.gr, &name)
    })?;
    crate::controllers::gc_queue::verify_owners(&state.gc, &target.key(&name), &obj);
    for hook in hooks {
        hook.committed(
            &cx,
            Committed::Written {
                new: &obj,
                old: None,
            },
        )
        .await?;
    }
    Ok(Written::Object {
        object: obj,
        revision: committed.revision,
    })
}

/// Server-side apply of `applied` by `manager`: creates the object when there is none,
/// merges into it otherwise. Returns whether it created.
pub async fn apply(
    state: &ApiState,
    target: &Target,
    name: &str,
    mut applied: Value,
    manager: String,
    force: bool,
    w: &mut Write,
) -> ApiResult<(Written, bool)> {
    let t = &*target.t;
    check_decoded(state, t, &mut applied, w)?;
    crate::apply::strip_managed(&mut applied);
    if object::name(&applied).is_some_and(|n| n != name) {
        return Err(ApiError::BadRequest(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            object::name(&applied).unwrap_or("")
        )));
    }
    if state.store.get(&target.key(name)).is_none() {
        let mut created = crate::apply::apply(
            &ownership_schema(state, t),
            None,
            &applied,
            &manager,
            &t.api_version(),
            force,
        )
        .map_err(|c| apply_conflict(t, name, &c))?;
        object::meta_mut(&mut created).insert("name".into(), json!(name));
        match create(state, target, created, Ownership::Applied, w).await {
            // Created by someone else meanwhile: apply onto it below.
            Err(ApiError::AlreadyExists { .. }) => {}
            other => return other.map(|written| (written, true)),
        }
    }
    let change = Change::Apply {
        applied,
        manager,
        force,
    };
    Ok((modify(state, target, name, change, w).await?, false))
}

/// What a write does to the current object.
pub enum Change<'a> {
    /// PUT of the main resource or of `status`.
    Replace {
        new: Value,
        sub: Option<Subresource>,
    },
    /// PATCH of the main resource or of `status`.
    Patch {
        pt: PatchType,
        body: &'a [u8],
        sub: Option<Subresource>,
    },
    /// Server-side apply of a configuration.
    Apply {
        applied: Value,
        manager: String,
        force: bool,
    },
}

/// The resourceVersion a write asks to update (a precondition: a conflict if the object
/// moved on), as kube-apiserver reads it: the one a replacement or applied configuration
/// carries, or the one a patch sets. A patch that does not mention it is applied to
/// whatever is current, retried when a concurrent write wins.
fn requested_version(change: &Change<'_>, old: &Value, new: &Value) -> Option<String> {
    let rv = |v: &Value| {
        v["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_string)
    };
    match change {
        Change::Replace { new, .. } => rv(new),
        Change::Apply { applied, .. } => rv(applied),
        Change::Patch { pt, body, .. } => {
            let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
            let mentioned = match pt {
                PatchType::Json => body.as_array().is_some_and(|ops| {
                    ops.iter()
                        .any(|op| op["path"] == "/metadata/resourceVersion")
                }),
                _ => body["metadata"].get("resourceVersion").is_some(),
            };
            (mentioned || rv(new) != rv(old)).then(|| rv(new)).flatten()
        }
    }
}

pub fn apply_patch(
    state: &ApiState,
    t: &ResourceType,
    current: &Value,
    pt: PatchType,
    body: &[u8],
) -> ApiResult<Value> {
    let result = match pt {
        PatchType::Json => patch::json_patch(current, body),
        PatchType::Merge => patch::merge_patch(current, body),
        PatchType::Strategic if t.custom().is_some() => {
            return Err(ApiError::UnsupportedMediaType(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".into(),
            ));
        }
        PatchType::Strategic => patch::strategic_patch(state.schemas, &t.definition, current, body),
        PatchType::Apply => {
            return Err(ApiError::Internal(
                "apply patches are handled by server-side apply".into(),
            ));
        }
    };
    result.map_err(|e| match e {
        PatchError::Malformed(m) => ApiError::BadRequest(m),
        PatchError::TooLarge(m) => ApiError::RequestEntityTooLarge(m),
        PatchError::Apply(m) => invalid(
            t,
            object::name(current).unwrap_or(""),
            vec![Cause::invalid("patch", "", m)],
        ),
    })
}

/// Read-modify-write with optimistic concurrency; retried on races unless the client
/// pinned a resourceVersion.
pub async fn modify(
    state: &ApiState,
    target: &Target,
    name: &str,
    change: Change<'_>,
    w: &mut Write,
) -> ApiResult<Written> {
    // A change is read in the version it was sent in; what is written is the stored form.
    let view = target.t.clone();
    let converted = stored_target(state, target)?;
    let (target, conversion) = match &converted {
        Some((stored, via)) => (stored, Some(via)),
        None => (target, None),
    };
    let t = &*target.t;
    let cluster = target.cluster.clone();
    let key = target.key(name);
    let manager = w.manager.clone();
    let user = w.user.clone();
    let cx = HookCx {
        state,
        t,
        cluster: &cluster,
        manager: Some(&manager),
        user: user.as_ref(),
        warnings: Default::default(),
    };
    let hooks = state.hooks.of(t);
    for _ in 0..WRITE_RETRIES {
        let (entry, old) = current(state, t, &key, name)?;
        let old_view = match conversion {
            Some(via) => {
                std::borrow::Cow::Owned(via.view_form(state, &cluster, old.clone()).await?)
            }
            None => std::borrow::Cow::Borrowed(&old),
        };
        let (mut new, sub) = match &change {
            Change::Replace { new, sub } => (new.clone(), *sub),
            Change::Patch { pt, body, sub } => {
                let mut patched = apply_patch(state, &view, &old_view, *pt, body)?;
                check_decoded(state, &view, &mut patched, w)?;
                (patched, *sub)
            }
            Change::Apply {
                applied,
                manager,
                force,
            } => {
                let merged = crate::apply::apply(
                    &ownership_schema(state, &view),
                    Some(&old_view),
                    applied,
                    manager,
                    &view.api_version(),
                    *force,
                )
                .map_err(|c| apply_conflict(&view, name, &c))?;
                (merged, None)
            }
        };
        if let Some(via) = conversion {
            new = via.stored_form(state, &cluster, new).await?;
        }
        let pinned = requested_version(&change, &old, &new);
        if let Some(rv) = &pinned
            && *rv != entry.revision.to_string()
        {
            return Err(ApiError::conflict(&t.gr, name));
        }
        if object::name(&new).is_some_and(|n| n != name) {
            return Err(ApiError::BadRequest(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                object::name(&new).unwrap_or("")
            )));
        }
        let admission = webhooks::Admission {
            cluster: &cluster,
            t,
            sub,
            operation: Operation::Update,
            name,
            namespace: target.namespace.as_deref(),
            user: user.as_ref(),
            manager: Some(&manager),
            dry_run: w.dry_run,
        };
        if webhooks::mutate(state, &admission, &mut new, Some(&old), &mut reports(w)).await? {
            unchanged_identity(t, name, target.namespace.as_deref(), &new)?;
        }
        if sub == Some(Subresource::EphemeralContainers) {
            new = object::ephemeral_update(&old, &new);
            crate::defaults::apply(&t.kind, &mut new);
        } else if sub == Some(Subresource::Status) {
            let mut merged = old.clone();
            merged["status"] = new.get("status").cloned().unwrap_or(Value::Null);
            if merged["status"].is_null()
                && let Some(o) = merged.as_object_mut()
            {
                o.remove("status");
            }
            new = merged;
        } else {
            crate::defaults::apply(&t.kind, &mut new);
        }
        object::prepare_update(
            &mut new,
            &old,
            t,
            state.annotation_for(&cluster),
            t.has(Subresource::Status) && sub.is_none(),
        );
        if !matches!(change, Change::Apply { .. }) {
            let subresource = sub.map(Subresource::name);
            crate::apply::record_update(
                &ownership_schema(state, t),
                Some(&old),
                &mut new,
                &w.manager,
                &t.api_version(),
                subresource,
            );
        }
        if sub.is_none() {
            let causes = crate::immutable::check(&t.group, &t.kind, &old, &mut new);
            if !causes.is_empty() {
                return Err(invalid(t, name, causes));
            }
        }
        validate(state, t, &new, Some(&old))?;
        check_reserved(state, t, &cluster, user.as_ref(), Some(&old), &new)?;
        if let Some(synced) = user.as_ref().and_then(crate::rbac::syncer::cluster_of) {
            crate::rbac::syncer::may_change(&synced, &t.group, &t.resource, &old, &new).map_err(
                |message| ApiError::RbacForbidden {
                    gr: t.gr.clone(),
                    name: name.to_string(),
                    message,
                },
            )?;
        }
        for hook in hooks {
            hook.admit_update(&cx, &old, &mut new, sub)?;
        }
        add_warnings(w, &cx);
        validating_admission(state, &admission, Some(&new), Some(&old), w).await?;
        if object::spec_changed(&new, &old)
            || new["metadata"] != old["metadata"]
            || new.get("status") != old.get("status")
        {
            // fallthrough to write
        } else {
            return Ok(Written::Unchanged(entry.value.clone()));
        }
        if w.dry_run {
            encode(state, &new)?;
            return Ok(Written::Object {
                object: new,
                revision: entry.revision,
            });
        }
        let op = if object::is_deleting(&new) && object::finalizers(&new) == 0 {
            Op::Delete {
                key: key.clone(),
                expect: Expect::At(entry.revision),
            }
        } else {
            let bytes = encode(state, &new)?;
            Op::Put {
                key: key.clone(),
                value: bytes,
                expect: Expect::At(entry.revision),
            }
        };
        let deleting = matches!(op, Op::Delete { .. });
        match commit::commit(&state.store, Writer::Request, op).await {
            Ok(c) => {
                let what = if deleting {
                    crate::controllers::gc_queue::collect_dependents(&state.gc, &key, &new);
                    Committed::Deleted(&new)
                } else {
                    Committed::Written {
                        new: &new,
                        old: Some(&old),
                    }
                };
                for hook in hooks {
                    hook.committed(&cx, what).await?;
                }
                return Ok(Written::Object {
                    object: new,
                    revision: c.revision,
                });
            }
            Err(StorageError::Conflict { .. }) if pinned.is_none() => continue,
            Err(e) => return Err(ApiError::from_storage(e, &t.gr, name)),
        }
    }
    Err(ApiError::conflict(&t.gr, name))
}

pub fn apply_conflict(
    t: &ResourceType,
    name: &str,
    conflicts: &[crate::apply::Conflict],
) -> ApiError {
    ApiError::ApplyConflict {
        gr: t.gr.clone(),
        name: name.to_string(),
        message: crate::apply::conflict_message(conflicts),
        causes: conflicts
            .iter()
            .map(|c| Cause {
                reason: "FieldManagerConflict",
                field: c.path.clone(),
                message: format!("conflict with \"{}\" using {}", c.manager, c.api_version),
            })
            .collect(),
    }
}

/// `autoscaling/v1` Scale view of a workload (custom resources: the CRD's scale paths).
pub fn scale_of(t: &ResourceType, obj: &Value) -> Value {
    let scale = t.custom().and_then(|c| c.scale.as_ref());
    let first_int =
        |p: &crate::jsonpath::JsonPath| p.eval(obj).first().and_then(|v| v.as_i64()).unwrap_or(0);
    let (spec_replicas, status_replicas, selector) = match scale {
        Some(s) => (
            first_int(&s.spec_replicas),
            first_int(&s.status_replicas),
            s.label_selector
                .as_ref()
                .and_then(|p| {
                    p.eval(obj)
                        .first()
                        .and_then(|v| v.as_str())
                        .map(str::to_string)
                })
                .unwrap_or_default(),
        ),
        None => (
            obj["spec"]["replicas"].as_i64().unwrap_or(0),
            obj["status"]["replicas"].as_i64().unwrap_or(0),
            obj["spec"]["selector"]["matchLabels"]
                .as_object()
                // A ReplicationController's selector is a plain map.
                .or_else(|| {
                    (t.kind == "ReplicationController")
                        .then(|| obj["spec"]["selector"].as_object())
                        .flatten()
                })
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default(),
        ),
    };
    let m = &obj["metadata"];
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": m["name"], "namespace": m["namespace"], "uid": m["uid"],
            "resourceVersion": m["resourceVersion"], "creationTimestamp": m["creationTimestamp"],
        },
        "spec": {"replicas": spec_replicas},
        "status": {"replicas": status_replicas, "selector": selector},
    })
}

/// Set the desired replicas of a workload (custom resources: at the CRD's spec path).
fn set_replicas(t: &ResourceType, obj: &mut Value, replicas: i64) {
    let path: Vec<String> = match t.custom().and_then(|c| c.scale.as_ref()) {
        Some(s) => s.spec_replicas_field.clone(),
        None => vec!["spec".into(), "replicas".into()],
    };
    let mut cur = obj;
    for (i, seg) in path.iter().enumerate() {
        if i + 1 == path.len() {
            cur[seg.as_str()] = json!(replicas);
        } else {
            if !cur[seg.as_str()].is_object() {
                cur[seg.as_str()] = json!({});
            }
            cur = &mut cur[seg.as_str()];
        }
    }
}

/// How a scale write gives the wanted Scale.
pub enum Patcher<'a> {
    Replace(&'a [u8]),
    Patch(PatchType, &'a [u8]),
}

/// Write a workload's replicas through its Scale; returns the Scale written.
pub async fn update_scale(
    state: &ApiState,
    target: &Target,
    name: &str,
    how: Patcher<'_>,
    dry_run: bool,
) -> ApiResult<Value> {
    let t = &*target.t;
    let key = target.key(name);
    for _ in 0..WRITE_RETRIES {
        let (entry, old) = current(state, t, &key, name)?;
        let current = scale_of(t, &old);
        let wanted = match &how {
            Patcher::Replace(body) => parse_json(body)?,
            Patcher::Patch(PatchType::Json, body) => patch::json_patch(&current, body)
                .map_err(|e| ApiError::BadRequest(e.to_string()))?,
            Patcher::Patch(PatchType::Apply, _) => {
                return Err(ApiError::UnsupportedMediaType(
                    "server-side apply is not supported yet".into(),
                ));
            }
            Patcher::Patch(_, body) => patch::merge_patch(&current, body)
                .map_err(|e| ApiError::BadRequest(e.to_string()))?,
        };
        let pinned = wanted["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_string);
        if pinned
            .as_ref()
            .is_some_and(|rv| *rv != entry.revision.to_string())
        {
            return Err(ApiError::conflict(&t.gr, name));
        }
        let replicas = wanted["spec"]["replicas"].as_i64().unwrap_or(0);
        if replicas < 0 {
            return Err(invalid(
                t,
                name,
                vec![Cause::invalid(
                    "spec.replicas",
                    &replicas.to_string(),
                    "must be greater than or equal to 0",
                )],
            ));
        }
        let mut new = old.clone();
        set_replicas(t, &mut new, replicas);
        object::prepare_update(
            &mut new,
            &old,
            t,
            state.annotation_for(&target.cluster),
            false,
        );
        let bytes = encode(state, &new)?;
        if dry_run {
            return Ok(scale_of(t, &new));
        }
        match commit::commit(
            &state.store,
            Writer::Request,
            Op::Put {
                key: key.clone(),
                value: bytes,
                expect: Expect::At(entry.revision),
            },
        )
        .await
        {
            Ok(c) => {
                object::set_resource_version(&mut new, c.revision.0);
                return Ok(scale_of(t, &new));
            }
            Err(StorageError::Conflict { .. }) if pinned.is_none() => continue,
            Err(e) => return Err(ApiError::from_storage(e, &t.gr, name)),
        }
    }
    Err(ApiError::conflict(&t.gr, name))
}

/// Delete one object: immediately, or by marking it (finalizers; namespaces and
/// workspaces, whose contents a controller removes first).
///
/// Returns the object as stored at the deletion (or as marked), with its resourceVersion.
/// Used by the API's DELETE and by the garbage collector and termination controllers.
pub async fn delete(
    state: &ApiState,
    t: &ResourceType,
    key: &Key,
    name: &str,
    options: &Value,
    dry_run: bool,
    user: Option<&crate::auth::User>,
) -> ApiResult<Bytes> {
    let t = stored_type(t);
    let cluster: LogicalClusterPath = key
        .cluster()
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(LogicalClusterPath::root);
    let cx = HookCx {
        state,
        t,
        cluster: &cluster,
        manager: None,
        user: None,
        warnings: Default::default(),
    };
    for _ in 0..WRITE_RETRIES {
        let (entry, mut obj) = current(state, t, key, name)?;
        for hook in state.hooks.of(t) {
            hook.admit_delete(&cx, name, &obj)?;
        }
        let admission = webhooks::Admission {
            cluster: &cluster,
            t,
            sub: None,
            operation: Operation::Delete,
            name,
            namespace: key.parts().map(|p| p.namespace).filter(|n| !n.is_empty()),
            user,
            manager: None,
            dry_run,
        };
        // A deletion's warnings and audit annotations have no way back to its response yet.
        crate::policies::validate(
            state,
            &admission,
            None,
            Some(&obj),
            &mut Vec::new(),
            &mut Vec::new(),
        )?;
        webhooks::validate(
            state,
            &admission,
            None,
            Some(&obj),
            &mut webhooks::Reports {
                warnings: &mut Vec::new(),
                audit: &mut Vec::new(),
            },
        )
        .await?;
        let pre = &options["preconditions"];
        if let Some(uid) = pre["uid"].as_str()
            && obj["metadata"]["uid"].as_str() != Some(uid)
        {
            return Err(ApiError::Conflict {
                gr: t.gr.clone(),
                name: name.to_string(),
                detail: format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    obj["metadata"]["uid"].as_str().unwrap_or("")
                ),
            });
        }
        if let Some(rv) = pre["resourceVersion"].as_str()
            && rv != entry.revision.to_string()
        {
            return Err(ApiError::Conflict {
                gr: t.gr.clone(),
                name: name.to_string(),
                detail: format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    entry.revision
                ),
            });
        }
        let deletion = state
            .hooks
            .of(t)
            .iter()
            .find_map(|h| h.deletion(&obj, options));
        let container = matches!(deletion, Some(Deletion::Container { .. }));
        let policy = options["propagationPolicy"].as_str().unwrap_or(
            if options["orphanDependents"] == true {
                "Orphan"
            } else {
                "Background"
            },
        );
        let gc_finalizer = match policy {
            "Foreground" => Some(crate::controllers::gc_queue::FOREGROUND),
            "Orphan" => Some(crate::controllers::gc_queue::ORPHAN),
            "Background" => None,
            other => {
                return Err(ApiError::BadRequest(format!(
                    "propagationPolicy: Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
                )));
            }
        };
        if let (Some(f), false) = (gc_finalizer, container || object::is_deleting(&obj)) {
            let list = object::meta_mut(&mut obj)
                .entry("finalizers")
                .or_insert_with(|| json!([]));
            if let Some(l) = list.as_array_mut()
                && !l.iter().any(|x| x == f)
            {
                l.push(json!(f));
            }
        }
        // Marked rather than removed: an object that ends gracefully (a Pod on a node),
        // one with finalizers, or a container of other objects.
        let grace = match deletion {
            Some(Deletion::Graceful { seconds }) => Some(seconds),
            _ => None,
        };
        let marks = grace.is_some() || object::finalizers(&obj) > 0 || container;
        let grace_seconds = grace.unwrap_or(0);
        if marks {
            if object::is_deleting(&obj) {
                return Ok(entry.value.clone());
            }
            let meta = object::meta_mut(&mut obj);
            meta.insert("deletionTimestamp".into(), json!(object::now_rfc3339()));
            meta.insert("deletionGracePeriodSeconds".into(), json!(grace_seconds));
            if matches!(deletion, Some(Deletion::Container { terminating: true })) {
                obj["status"]["phase"] = json!("Terminating");
            }
            if dry_run {
                return Ok(Bytes::from(serde_json::to_vec(&obj).unwrap_or_default()));
            }
            let bytes = Bytes::from(
                serde_json::to_vec(&obj).map_err(|e| ApiError::Internal(e.to_string()))?,
            );
            match commit::commit(
                &state.store,
                Writer::Request,
                Op::Put {
                    key: key.clone(),
                    value: bytes.clone(),
                    expect: Expect::At(entry.revision),
                },
            )
            .await
            {
                Ok(c) => {
                    if gc_finalizer.is_some() {
                        let _ = state
                            .gc
                            .send(crate::controllers::gc_queue::GcTask::Finalize {
                                key: key.clone(),
                            });
                    }
                    return Ok(with_resource_version(&bytes, c.revision));
                }
                Err(StorageError::Conflict { .. }) => continue,
                Err(e) => return Err(ApiError::from_storage(e, &t.gr, name)),
            }
        }
        if dry_run {
            return Ok(entry.value.clone());
        }
        match commit::commit(
            &state.store,
            Writer::Request,
            Op::Delete {
                key: key.clone(),
                expect: Expect::At(entry.revision),
            },
        )
        .await
        {
            Ok(c) => {
                crate::controllers::gc_queue::collect_dependents(&state.gc, key, &obj);
                for hook in state.hooks.of(t) {
                    hook.committed(&cx, Committed::Deleted(&obj)).await?;
                }
                return Ok(with_resource_version(&entry.value, c.revision));
            }
            Err(StorageError::Conflict { .. }) => continue,
            Err(e) => return Err(ApiError::from_storage(e, &t.gr, name)),
        }
    }
    Err(ApiError::conflict(&t.gr, name))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_a_version_the_request_names_is_a_precondition() {
        let old = json!({"metadata": {"name": "a", "resourceVersion": "5"}});
        let new = old.clone();
        let merge = |body: &'static [u8]| Change::Patch {
            pt: PatchType::Merge,
            body,
            sub: None,
        };
        // A patch that does not mention it: applied to whatever is current.
        assert_eq!(
            requested_version(&merge(br#"{"metadata":{"labels":{"x":"y"}}}"#), &old, &new),
            None
        );
        assert_eq!(
            requested_version(
                &merge(br#"{"metadata":{"resourceVersion":"5"}}"#),
                &old,
                &new
            ),
            Some("5".into())
        );
        let json_patch = Change::Patch {
            pt: PatchType::Json,
            body: br#"[{"op":"replace","path":"/metadata/resourceVersion","value":"4"}]"#,
            sub: None,
        };
        let moved = json!({"metadata": {"name": "a", "resourceVersion": "4"}});
        assert_eq!(
            requested_version(&json_patch, &old, &moved),
            Some("4".into())
        );
        let replace = Change::Replace {
            new: json!({"metadata": {"resourceVersion": "3"}}),
            sub: None,
        };
        assert_eq!(requested_version(&replace, &old, &new), Some("3".into()));
        let apply = Change::Apply {
            applied: json!({"metadata": {"name": "a"}}),
            manager: "m".into(),
            force: false,
        };
        assert_eq!(requested_version(&apply, &old, &new), None);
    }
}
