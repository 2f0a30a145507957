//! CRUD on resources: get, list, create, update, patch, delete, deletecollection, and the
//! `status` and `scale` subresources.

use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::{Value, json};
use sluice_api::LogicalClusterPath;

use super::{Ctx, Resp, json, read_body};
use crate::errors::{ApiError, ApiResult, Cause};
use crate::object;
use crate::patch::{self, PatchError, PatchType};
use crate::request::{ClusterScope, ResourcePath};
use crate::resources::{ResourceType, SchemaKind, Subresource};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::state::{ApiState, SharedState};
use crate::storage::{Expect, Key, Op, Revision, StorageError, cache::with_resource_version};
use crate::validation::{self, NameRule};

/// How many times an unconditional update or a patch is retried on a write race.
const WRITE_RETRIES: usize = 16;

/// A resource request resolved against the catalog.
pub struct Scope<'a> {
    pub t: &'a Arc<ResourceType>,
    /// `None` for a wildcard request.
    pub cluster: Option<LogicalClusterPath>,
    pub namespace: Option<String>,
}

impl Scope<'_> {
    fn cluster(&self) -> ApiResult<&LogicalClusterPath> {
        self.cluster.as_ref().ok_or(ApiError::MethodNotAllowed)
    }

    fn key(&self, name: &str) -> ApiResult<Key> {
        Ok(self
            .t
            .prefix
            .key(self.cluster()?, self.namespace.as_deref(), name))
    }
}

pub async fn serve(
    state: &SharedState,
    ctx: &mut Ctx,
    rp: ResourcePath,
    body: hyper::body::Incoming,
) -> ApiResult<Resp> {
    let catalog = state.catalog_for(&ctx.target.cluster);
    let t = catalog
        .lookup(&rp.group, &rp.version, &rp.resource)
        .ok_or(ApiError::PathNotFound)?
        .clone();
    let t = &t;
    if t.namespaced != rp.namespace.is_some() && !(t.namespaced && rp.name.is_none()) {
        return Err(ApiError::PathNotFound);
    }
    let cluster = match &ctx.target.cluster {
        ClusterScope::One(c) => {
            state.cluster_exists(c)?;
            Some(c.clone())
        }
        ClusterScope::Wildcard => {
            if !ctx.user.is_admin() {
                return Err(ApiError::Forbidden(format!(
                    "User \"{}\" cannot list or watch across logical clusters",
                    ctx.user.name
                )));
            }
            if ctx.method != Method::GET || rp.name.is_some() {
                return Err(ApiError::MethodNotAllowed);
            }
            None
        }
    };
    let scope = Scope {
        t,
        cluster,
        namespace: rp.namespace.clone(),
    };
    if t.resource == "pods" && t.group.is_empty() && rp.subresource.as_deref() == Some("log") {
        return match (&ctx.method, rp.name.as_deref()) {
            (&Method::GET, Some(n)) => super::logs::serve(state, ctx, &scope, n).await,
            _ => Err(ApiError::MethodNotAllowed),
        };
    }
    let sub = match rp.subresource.as_deref() {
        None => None,
        Some("status") if t.has(Subresource::Status) => Some(Subresource::Status),
        Some("scale") if t.has(Subresource::Scale) => Some(Subresource::Scale),
        Some(_) => return Err(ApiError::PathNotFound),
    };
    let watch = rp.legacy_watch || ctx.query.flag("watch");
    match (&ctx.method, rp.name.as_deref(), sub) {
        (&Method::GET, None, _) if watch => super::watch::serve(state, ctx, &scope).await,
        (&Method::GET, None, _) => list(state, ctx, &scope),
        (&Method::GET, Some(n), Some(Subresource::Scale)) => get_scale(state, &scope, n),
        (&Method::GET, Some(n), _) => get(state, ctx, &scope, n),
        (&Method::POST, None, None) => {
            let body = read_body(body, state.limits.max_body).await?;
            create(state, ctx, &scope, &body).await
        }
        (&Method::PUT, Some(n), sub) => {
            let body = read_body(body, state.limits.max_body).await?;
            match sub {
                Some(Subresource::Scale) => {
                    update_scale(state, ctx, &scope, n, Patcher::Replace(&body)).await
                }
                _ => update(state, ctx, &scope, n, sub, &body).await,
            }
        }
        (&Method::PATCH, Some(n), sub) => {
            let pt = PatchType::from_content_type(ctx.content_type()).ok_or_else(|| {
                ApiError::UnsupportedMediaType(format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {:?})", ctx.content_type()))
            })?;
            let body = read_body(body, state.limits.max_body).await?;
            match sub {
                Some(Subresource::Scale) => {
                    update_scale(state, ctx, &scope, n, Patcher::Patch(pt, &body)).await
                }
                _ => patch(state, ctx, &scope, n, sub, pt, &body).await,
            }
        }
        (&Method::DELETE, Some(n), None) => {
            let body = read_body(body, state.limits.max_body).await?;
            delete(state, ctx, &scope, n, &body).await
        }
        (&Method::DELETE, None, None) => delete_collection(state, ctx, &scope).await,
        _ => Err(ApiError::MethodNotAllowed),
    }
}

fn parse_json(bytes: &[u8]) -> ApiResult<Value> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::BadRequest(format!("error decoding object: {e}")))
}

fn get(state: &ApiState, ctx: &Ctx, scope: &Scope<'_>, name: &str) -> ApiResult<Resp> {
    let entry = state
        .store
        .get(&scope.key(name)?)
        .ok_or_else(|| ApiError::not_found(&scope.t.gr, name))?;
    if let Some(version) = super::table::wants_table(ctx.accept()) {
        let obj = parse_json(&entry.value)?;
        let rv = obj["metadata"]["resourceVersion"].clone();
        let t = super::table::table(
            scope.t,
            version,
            &[obj],
            json!({"resourceVersion": rv}),
            ctx.query.get("includeObject").unwrap_or("Metadata"),
            true,
        );
        return Ok(super::json_value(StatusCode::OK, &t));
    }
    Ok(json(StatusCode::OK, present(scope.t, entry.value.clone())))
}

/// The continue token: the key to resume after, and the list's revision.
fn encode_continue(key: &Key, rv: Revision) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(json!({"k": key.as_str(), "rv": rv.0}).to_string())
}

fn decode_continue(token: &str, prefix: &str) -> ApiResult<(String, Revision)> {
    let bad = || {
        ApiError::BadRequest(
            "continue key is not valid: the token was not issued by this server".into(),
        )
    };
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let key = v["k"].as_str().ok_or_else(bad)?;
    if !key.starts_with(prefix) {
        return Err(bad());
    }
    Ok((key.to_string(), Revision(v["rv"].as_u64().ok_or_else(bad)?)))
}

/// Parsed `labelSelector` and `fieldSelector`.
pub struct Filter {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    pub fn from_ctx(ctx: &Ctx) -> ApiResult<Self> {
        Ok(Self {
            labels: LabelSelector::parse(ctx.query.get("labelSelector").unwrap_or(""))?,
            fields: FieldSelector::parse(ctx.query.get("fieldSelector").unwrap_or(""))?,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    pub fn matches_bytes(&self, value: &[u8]) -> bool {
        if self.is_empty() {
            return true;
        }
        serde_json::from_slice::<Value>(value)
            .is_ok_and(|v| self.labels.matches(&v) && self.fields.matches(&v))
    }
}

/// The key prefix a collection request covers.
pub fn collection_prefix(scope: &Scope<'_>) -> String {
    scope
        .t
        .prefix
        .scope(scope.cluster.as_ref(), scope.namespace.as_deref())
}

fn list(state: &ApiState, ctx: &Ctx, scope: &Scope<'_>) -> ApiResult<Resp> {
    let filter = Filter::from_ctx(ctx)?;
    let limit: Option<usize> = ctx.query.number("limit")?.filter(|l: &usize| *l > 0);
    let prefix = collection_prefix(scope);
    let (after, first_rv) = match ctx.query.get("continue") {
        Some(token) => {
            let (k, rv) = decode_continue(token, &prefix)?;
            (Some(k), Some(rv))
        }
        None => (None, None),
    };
    let mut items: Vec<Bytes> = Vec::new();
    let mut last_key: Option<Key> = None;
    let mut more = false;
    let mut remaining = 0usize;
    let rv = if let (Some(name), false) = (filter.fields.exact_name(), scope.cluster.is_none()) {
        // kubectl get/wait/watch of one object: a key lookup, not a scan.
        if let Some(e) = state.store.get(&scope.t.prefix.key(
            scope.cluster()?,
            scope.namespace.as_deref(),
            name,
        )) && filter.matches_bytes(&e.value)
        {
            items.push(e.value.clone());
        }
        state.store.revision()
    } else {
        state.store.scan(&prefix, after.as_deref(), |k, e| {
            if let Some(l) = limit
                && items.len() >= l
            {
                more = true;
                if filter.is_empty() {
                    remaining += 1;
                    return true;
                }
                return false;
            }
            if filter.matches_bytes(&e.value) {
                items.push(e.value.clone());
                last_key = Some(k.clone());
            }
            true
        })
    };
    let rv = first_rv.unwrap_or(rv);
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if more && let Some(k) = &last_key {
        metadata["continue"] = json!(encode_continue(k, rv));
        if filter.is_empty() {
            metadata["remainingItemCount"] = json!(remaining);
        }
    }
    if let Some(version) = super::table::wants_table(ctx.accept()) {
        let objects = items
            .iter()
            .map(|b| parse_json(b))
            .collect::<ApiResult<Vec<Value>>>()?;
        let t = super::table::table(
            scope.t,
            version,
            &objects,
            metadata,
            ctx.query.get("includeObject").unwrap_or("Metadata"),
            true,
        );
        return Ok(super::json_value(StatusCode::OK, &t));
    }
    let items: Vec<Bytes> = items.into_iter().map(|b| present(scope.t, b)).collect();
    Ok(json(StatusCode::OK, list_body(scope.t, &metadata, &items)))
}

/// A `<Kind>List` from stored object bytes, without re-encoding the items.
fn list_body(t: &ResourceType, metadata: &Value, items: &[Bytes]) -> Vec<u8> {
    let mut out = Vec::with_capacity(items.iter().map(Bytes::len).sum::<usize>() + 256);
    out.extend_from_slice(
        format!(
            "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
            t.kind,
            t.api_version(),
            metadata
        )
        .as_bytes(),
    );
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(item);
    }
    out.extend_from_slice(b"]}");
    out
}

/// Decode a request body into an object of the endpoint's type: JSON or YAML, kind and
/// apiVersion checked, unknown fields pruned (or rejected under `fieldValidation=Strict`),
/// value types checked against the typed schema.
fn decode_object(
    state: &ApiState,
    ctx: &mut Ctx,
    t: &ResourceType,
    bytes: &[u8],
) -> ApiResult<Value> {
    let ct = ctx.content_type();
    let mut obj: Value = if ct.starts_with(crate::codec::PROTOBUF) {
        crate::codec::protobuf::decode(bytes, &t.definition).map_err(|e| {
            ApiError::BadRequest(format!(
                "{} in version \"{}\" cannot be handled as a {}: {e}",
                t.kind, t.version, t.kind
            ))
        })?
    } else if ct.starts_with("application/yaml") || ct.starts_with("application/apply-patch+yaml") {
        let text = std::str::from_utf8(bytes)
            .map_err(|e| ApiError::BadRequest(format!("body is not UTF-8: {e}")))?;
        serde_saphyr::from_str(text)
            .map_err(|e| ApiError::BadRequest(format!("error converting YAML to JSON: {e}")))?
    } else {
        parse_json(bytes)?
    };
    if !obj.is_object() {
        return Err(ApiError::BadRequest(format!(
            "{} in version \"{}\" cannot be handled as a {}: body must be a JSON object",
            t.kind, t.version, t.kind
        )));
    }
    finish_decode(state, ctx, t, &mut obj)?;
    Ok(obj)
}

/// The checks shared by bodies and patch results: type identity, unknown fields, value types.
fn finish_decode(
    state: &ApiState,
    ctx: &mut Ctx,
    t: &ResourceType,
    obj: &mut Value,
) -> ApiResult<()> {
    if let Some(kind) = obj.get("kind").and_then(Value::as_str)
        && kind != t.kind
    {
        return Err(ApiError::BadRequest(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            t.kind
        )));
    }
    if let Some(av) = obj.get("apiVersion").and_then(Value::as_str)
        && av != t.api_version()
    {
        return Err(ApiError::BadRequest(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            t.api_version()
        )));
    }
    let unknown = match &t.schema {
        SchemaKind::Builtin { .. } => state.schemas.prune_unknown(&t.definition, obj),
        SchemaKind::Custom(c) => {
            let mut unknown = Vec::new();
            if let Some(schema) = &c.schema {
                crate::crd::structural::apply_defaults(schema, obj, 0);
                let meta = obj.as_object_mut().and_then(|o| o.remove("metadata"));
                crate::crd::structural::prune(schema, obj, "", &mut unknown, 0);
                if let (Some(m), Some(o)) = (meta, obj.as_object_mut()) {
                    o.insert("metadata".into(), m);
                }
                unknown.retain(|u| u != "apiVersion" && u != "kind");
            }
            unknown
        }
    };
    if !unknown.is_empty() {
        let mode = ctx.query.get("fieldValidation").unwrap_or("Warn");
        match mode {
            "Strict" => {
                let list: Vec<String> = unknown
                    .iter()
                    .map(|u| format!("unknown field {:?}", u))
                    .collect();
                return Err(ApiError::BadRequest(format!(
                    "strict decoding error: {}",
                    list.join(", ")
                )));
            }
            "Ignore" => {}
            _ => ctx
                .warnings
                .extend(unknown.iter().map(|u| format!("unknown field {:?}", u))),
        }
    }
    match &t.schema {
        SchemaKind::Builtin { decode, .. } => decode(obj).map_err(|e| {
            ApiError::BadRequest(format!(
                "{} in version \"{}\" cannot be handled as a {}: {e}",
                t.kind, t.version, t.kind
            ))
        }),
        SchemaKind::Custom(_) => Ok(()),
    }
}

fn invalid(t: &ResourceType, name: &str, causes: Vec<Cause>) -> ApiError {
    ApiError::Invalid {
        gr: t.gr.clone(),
        kind: t.kind.to_string(),
        name: name.to_string(),
        causes,
    }
}

fn validate(t: &ResourceType, obj: &Value) -> ApiResult<()> {
    let mut causes =
        validation::check_metadata(obj, NameRule::for_resource(&t.resource), t.namespaced);
    causes.extend(validation::check_spec(&t.kind, obj));
    if let Some(schema) = t.custom().and_then(|c| c.schema.as_ref()) {
        let mut body = obj.clone();
        if let Some(o) = body.as_object_mut() {
            o.remove("metadata");
            o.remove("apiVersion");
            o.remove("kind");
        }
        crate::crd::structural::validate(schema, &body, "", &mut causes, 0);
    }
    if t.resource == "customresourcedefinitions" {
        causes.extend(crate::crd::validate_crd(obj));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(invalid(t, object::name(obj).unwrap_or(""), causes))
    }
}

/// New content may only go into a namespace that exists and is not terminating.
fn check_namespace(state: &ApiState, scope: &Scope<'_>) -> ApiResult<()> {
    let (Some(ns), Some(cluster)) = (&scope.namespace, &scope.cluster) else {
        return Ok(());
    };
    let key = crate::storage::ResourcePrefix::new("", "namespaces").key(cluster, None, ns);
    let entry = state.store.get(&key).ok_or_else(|| {
        ApiError::not_found(
            &crate::errors::GroupResource {
                group: String::new(),
                resource: "namespaces".into(),
            },
            ns,
        )
    })?;
    let v: Value = serde_json::from_slice(&entry.value).unwrap_or_default();
    if object::is_deleting(&v) {
        return Err(ApiError::Forbidden(format!(
            "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
            scope.t.gr,
            v["metadata"]["name"].as_str().unwrap_or("")
        )));
    }
    Ok(())
}

/// Effects of a committed write beyond storage: a CRD change changes the catalog.
async fn after_write(
    state: &ApiState,
    t: &ResourceType,
    cluster: &LogicalClusterPath,
    obj: &Value,
) -> ApiResult<()> {
    if t.resource == "customresourcedefinitions" {
        state.crds.rebuild(&state.store, cluster);
    }
    // A new workspace's cluster starts with the system namespaces, before the client hears
    // the workspace exists.
    if t.resource == "workspaces"
        && t.group == sluice_api::sluice::GROUP
        && let Some(child) = object::name(obj).and_then(|n| cluster.child(n).ok())
    {
        crate::bootstrap::ensure_namespaces(&state.store, &child, true)
            .await
            .map_err(|e| ApiError::Internal(format!("creating the namespaces of {child}: {e}")))?;
    }
    Ok(())
}

/// Objects of a custom type are stored in the CRD's storage version; a read through
/// another served version shows that version (conversion strategy `None`).
pub fn present(t: &ResourceType, bytes: Bytes) -> Bytes {
    let Some(c) = t.custom() else { return bytes };
    if c.storage_version == t.version {
        return bytes;
    }
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(mut v) => {
            v["apiVersion"] = json!(t.api_version());
            serde_json::to_vec(&v).map(Bytes::from).unwrap_or(bytes)
        }
        Err(_) => bytes,
    }
}

/// A written object in the request's version.
fn stored_response_as(
    t: &ResourceType,
    code: StatusCode,
    obj: &Value,
    revision: Revision,
) -> ApiResult<Resp> {
    let bytes = serde_json::to_vec(obj).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(json(
        code,
        present(t, with_resource_version(&bytes, revision)),
    ))
}

fn stored_response(code: StatusCode, obj: &Value, revision: Revision) -> ApiResult<Resp> {
    let bytes = serde_json::to_vec(obj).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(json(code, with_resource_version(&bytes, revision)))
}

async fn create(
    state: &ApiState,
    ctx: &mut Ctx,
    scope: &Scope<'_>,
    body: &[u8],
) -> ApiResult<Resp> {
    let obj = decode_object(state, ctx, scope.t, body)?;
    create_decoded(state, ctx, scope, obj, Ownership::Update).await
}

/// Who owns the fields of a write.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ownership {
    /// A create, update or patch: the request's field manager takes what it changed.
    Update,
    /// Server-side apply already set managedFields.
    Applied,
}

/// The field-ownership view of a type's schema.
fn ownership_schema<'a>(state: &'a ApiState, t: &'a ResourceType) -> crate::apply::Schema<'a> {
    let root = match t.custom() {
        Some(c) => c.schema.as_ref(),
        None => state.schemas.definition(&t.definition),
    };
    crate::apply::Schema {
        set: state.schemas,
        root,
    }
}

fn manager_of(ctx: &Ctx) -> String {
    crate::apply::manager_name(
        ctx.query.get("fieldManager"),
        ctx.headers
            .get(http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok()),
    )
}

async fn create_decoded(
    state: &ApiState,
    ctx: &mut Ctx,
    scope: &Scope<'_>,
    mut obj: Value,
    ownership: Ownership,
) -> ApiResult<Resp> {
    let t = scope.t;
    let cluster = scope.cluster()?.clone();
    if let (Some(ns), Some(body_ns)) = (&scope.namespace, obj["metadata"]["namespace"].as_str())
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
    object::prepare_create(
        &mut obj,
        t,
        state.annotation_for(&cluster),
        scope.namespace.as_deref(),
    );
    if t.resource == "workspaces"
        && let Some(name) = object::name(&obj)
    {
        let path = cluster
            .child(name)
            .map(|p| p.to_string())
            .unwrap_or_default();
        obj["status"] = json!({"phase": "Ready", "path": path, "url": format!("/clusters/{path}")});
    }
    if t.resource == "customresourcedefinitions" {
        obj["status"] = crate::crd::accepted_status(&obj);
    }
    if ownership == Ownership::Update {
        crate::apply::record_update(
            &ownership_schema(state, t),
            None,
            &mut obj,
            &manager_of(ctx),
            &t.api_version(),
            None,
        );
    }
    validate(t, &obj)?;
    check_namespace(state, scope)?;
    let name = object::name(&obj).unwrap_or("").to_string();
    let ips = state
        .ips
        .as_ref()
        .filter(|_| t.resource == "services" && t.group.is_empty());
    if let Some(ips) = ips {
        ips.assign(&mut obj)?;
    }
    if ctx.dry_run() {
        if let Some(ips) = ips {
            ips.release(&obj);
        }
        return stored_response(StatusCode::CREATED, &obj, state.store.revision());
    }
    let bytes =
        Bytes::from(serde_json::to_vec(&obj).map_err(|e| ApiError::Internal(e.to_string()))?);
    let committed = state
        .store
        .write(Op::Put {
            key: scope.key(&name)?,
            value: bytes,
            expect: Expect::Absent,
        })
        .await
        .map_err(|e| {
            if let Some(ips) = ips {
                ips.release(&obj);
            }
            ApiError::from_storage(e, &t.gr, &name)
        })?;
    after_write(state, t, &cluster, &obj).await?;
    stored_response_as(t, StatusCode::CREATED, &obj, committed.revision)
}

/// What a write does to the current object.
enum Change<'a> {
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

fn apply_patch(
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
        PatchError::Apply(m) => invalid(
            t,
            object::name(current).unwrap_or(""),
            vec![Cause::invalid("patch", "", m)],
        ),
    })
}

/// Read-modify-write with optimistic concurrency; retried on races unless the client
/// pinned a resourceVersion.
async fn modify(
    state: &ApiState,
    ctx: &mut Ctx,
    scope: &Scope<'_>,
    name: &str,
    change: Change<'_>,
) -> ApiResult<Resp> {
    let t = scope.t;
    let cluster = scope.cluster()?.clone();
    let key = scope.key(name)?;
    for _ in 0..WRITE_RETRIES {
        let entry = state
            .store
            .get(&key)
            .ok_or_else(|| ApiError::not_found(&t.gr, name))?;
        let old: Value =
            serde_json::from_slice(&entry.value).map_err(|e| ApiError::Internal(e.to_string()))?;
        let (mut new, sub) = match &change {
            Change::Replace { new, sub } => (new.clone(), *sub),
            Change::Patch { pt, body, sub } => {
                let mut patched = apply_patch(state, t, &old, *pt, body)?;
                finish_decode(state, ctx, t, &mut patched)?;
                (patched, *sub)
            }
            Change::Apply {
                applied,
                manager,
                force,
            } => {
                let merged = crate::apply::apply(
                    &ownership_schema(state, t),
                    Some(&old),
                    applied,
                    manager,
                    &t.api_version(),
                    *force,
                )
                .map_err(|c| apply_conflict(t, name, &c))?;
                (merged, None)
            }
        };
        let pinned = new["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_string);
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
        if sub == Some(Subresource::Status) {
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
        if t.resource == "customresourcedefinitions" && sub.is_none() {
            new["status"] = crate::crd::accepted_status(&new);
        }
        if let (Some(ips), true) = (&state.ips, t.resource == "services" && t.group.is_empty()) {
            ips.keep(&old, &mut new)?;
        }
        if !matches!(change, Change::Apply { .. }) {
            let subresource = (sub == Some(Subresource::Status)).then_some("status");
            crate::apply::record_update(
                &ownership_schema(state, t),
                Some(&old),
                &mut new,
                &manager_of(ctx),
                &t.api_version(),
                subresource,
            );
        }
        validate(t, &new)?;
        if object::spec_changed(&new, &old)
            || new["metadata"] != old["metadata"]
            || new.get("status") != old.get("status")
        {
            // fallthrough to write
        } else {
            return Ok(json(StatusCode::OK, entry.value.clone()));
        }
        if ctx.dry_run() {
            return stored_response(StatusCode::OK, &new, entry.revision);
        }
        let op = if object::is_deleting(&new) && object::finalizers(&new) == 0 {
            Op::Delete {
                key: key.clone(),
                expect: Expect::At(entry.revision),
            }
        } else {
            let bytes = Bytes::from(
                serde_json::to_vec(&new).map_err(|e| ApiError::Internal(e.to_string()))?,
            );
            Op::Put {
                key: key.clone(),
                value: bytes,
                expect: Expect::At(entry.revision),
            }
        };
        let deleting = matches!(op, Op::Delete { .. });
        match state.store.write(op).await {
            Ok(c) => {
                if !deleting {
                    after_write(state, t, &cluster, &new).await?;
                } else if t.resource == "customresourcedefinitions" {
                    state.crds.rebuild(&state.store, &cluster);
                }
                if deleting {
                    crate::controllers::gc::collect_dependents(&state.gc, &key, &new);
                }
                return stored_response_as(t, StatusCode::OK, &new, c.revision);
            }
            Err(StorageError::Conflict { .. }) if pinned.is_none() => continue,
            Err(e) => return Err(ApiError::from_storage(e, &t.gr, name)),
        }
    }
    Err(ApiError::conflict(&t.gr, name))
}

async fn update(
    state: &ApiState,
    ctx: &mut Ctx,
    scope: &Scope<'_>,
    name: &str,
    sub: Option<Subresource>,
    body: &[u8],
) -> ApiResult<Resp> {
    let new = decode_object(state, ctx, scope.t, body)?;
    if let (Some(ns), Some(body_ns)) = (&scope.namespace, new["metadata"]["namespace"].as_str())
        && ns != body_ns
    {
        return Err(ApiError::BadRequest(
            "the namespace of the provided object does not match the namespace sent on the request"
                .into(),
        ));
    }
    modify(state, ctx, scope, name, Change::Replace { new, sub }).await
}

async fn patch(
    state: &ApiState,
    ctx: &mut Ctx,
    scope: &Scope<'_>,
    name: &str,
    sub: Option<Subresource>,
    pt: PatchType,
    body: &[u8],
) -> ApiResult<Resp> {
    if pt != PatchType::Apply {
        return modify(state, ctx, scope, name, Change::Patch { pt, body, sub }).await;
    }
    let t = scope.t;
    if sub.is_some() {
        return Err(ApiError::UnsupportedMediaType(
            "server-side apply of subresources is not supported".into(),
        ));
    }
    let Some(manager) = ctx.query.get("fieldManager").map(str::to_string) else {
        return Err(ApiError::BadRequest(
            "PATCH request for server-side apply must specify fieldManager".into(),
        ));
    };
    let force = ctx.query.flag("force");
    let text = std::str::from_utf8(body)
        .map_err(|e| ApiError::BadRequest(format!("body is not UTF-8: {e}")))?;
    let mut applied: Value = serde_saphyr::from_str(text)
        .map_err(|e| ApiError::BadRequest(format!("error decoding YAML: {e}")))?;
    if !applied.is_object() {
        return Err(ApiError::BadRequest(
            "an applied configuration must be an object".into(),
        ));
    }
    finish_decode(state, ctx, t, &mut applied)?;
    crate::apply::strip_managed(&mut applied);
    if object::name(&applied).is_some_and(|n| n != name) {
        return Err(ApiError::BadRequest(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            object::name(&applied).unwrap_or("")
        )));
    }
    if state.store.get(&scope.key(name)?).is_none() {
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
        match create_decoded(state, ctx, scope, created, Ownership::Applied).await {
            // Created by someone else meanwhile: apply onto it below.
            Err(ApiError::AlreadyExists { .. }) => {}
            other => {
                return other.map(|mut r| {
                    *r.status_mut() = StatusCode::CREATED;
                    r
                });
            }
        }
    }
    modify(
        state,
        ctx,
        scope,
        name,
        Change::Apply {
            applied,
            manager,
            force,
        },
    )
    .await
}

fn apply_conflict(t: &ResourceType, name: &str, conflicts: &[crate::apply::Conflict]) -> ApiError {
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
fn scale_of(t: &ResourceType, obj: &Value) -> Value {
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

fn get_scale(state: &ApiState, scope: &Scope<'_>, name: &str) -> ApiResult<Resp> {
    let entry = state
        .store
        .get(&scope.key(name)?)
        .ok_or_else(|| ApiError::not_found(&scope.t.gr, name))?;
    let obj: Value =
        serde_json::from_slice(&entry.value).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(super::json_value(StatusCode::OK, &scale_of(scope.t, &obj)))
}

enum Patcher<'a> {
    Replace(&'a [u8]),
    Patch(PatchType, &'a [u8]),
}

async fn update_scale(
    state: &ApiState,
    ctx: &mut Ctx,
    scope: &Scope<'_>,
    name: &str,
    how: Patcher<'_>,
) -> ApiResult<Resp> {
    let t = scope.t;
    let key = scope.key(name)?;
    for _ in 0..WRITE_RETRIES {
        let entry = state
            .store
            .get(&key)
            .ok_or_else(|| ApiError::not_found(&t.gr, name))?;
        let old: Value =
            serde_json::from_slice(&entry.value).map_err(|e| ApiError::Internal(e.to_string()))?;
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
        object::prepare_update(&mut new, &old, t, state.annotation_for(scope.cluster()?), false);
        if ctx.dry_run() {
            return Ok(super::json_value(StatusCode::OK, &scale_of(t, &new)));
        }
        let bytes =
            Bytes::from(serde_json::to_vec(&new).map_err(|e| ApiError::Internal(e.to_string()))?);
        match state
            .store
            .write(Op::Put {
                key: key.clone(),
                value: bytes,
                expect: Expect::At(entry.revision),
            })
            .await
        {
            Ok(c) => {
                object::set_resource_version(&mut new, c.revision.0);
                return Ok(super::json_value(StatusCode::OK, &scale_of(t, &new)));
            }
            Err(StorageError::Conflict { .. }) if pinned.is_none() => continue,
            Err(e) => return Err(ApiError::from_storage(e, &t.gr, name)),
        }
    }
    Err(ApiError::conflict(&t.gr, name))
}

/// Delete one object: immediately, or by marking it (finalizers; namespaces and
/// workspaces, whose contents a controller removes first).
pub async fn delete_object(
    state: &ApiState,
    t: &ResourceType,
    key: &Key,
    name: &str,
    options: &Value,
    dry_run: bool,
) -> ApiResult<(StatusCode, Bytes)> {
    for _ in 0..WRITE_RETRIES {
        let entry = state
            .store
            .get(key)
            .ok_or_else(|| ApiError::not_found(&t.gr, name))?;
        let mut obj: Value =
            serde_json::from_slice(&entry.value).map_err(|e| ApiError::Internal(e.to_string()))?;
        if state.ips.is_some()
            && t.resource == "namespaces"
            && crate::bootstrap::PROTECTED_NAMESPACES.contains(&name)
        {
            return Err(ApiError::Forbidden(format!(
                "namespaces \"{name}\" is forbidden: this namespace may not be deleted"
            )));
        }
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
        let container = matches!(
            t.resource.as_str(),
            "namespaces" | "workspaces" | "customresourcedefinitions"
        );
        let policy = options["propagationPolicy"].as_str().unwrap_or(
            if options["orphanDependents"] == true {
                "Orphan"
            } else {
                "Background"
            },
        );
        let gc_finalizer = match policy {
            "Foreground" => Some(crate::controllers::gc::FOREGROUND),
            "Orphan" => Some(crate::controllers::gc::ORPHAN),
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
        // A Pod running on a node is stopped there first: mark it, and its node agent
        // deletes it with grace period 0 once the containers are gone.
        let grace = options["gracePeriodSeconds"].as_i64();
        let on_node = t.resource == "pods"
            && t.group.is_empty()
            && obj["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| !n.is_empty());
        // Marked rather than removed: a Pod on a node (with its grace period), an object
        // with finalizers, or a container of other objects.
        let pod_grace = (on_node && grace != Some(0)).then(|| {
            grace
                .or(obj["spec"]["terminationGracePeriodSeconds"].as_i64())
                .unwrap_or(30)
                .max(1)
        });
        let marks = pod_grace.is_some() || object::finalizers(&obj) > 0 || container;
        let grace_seconds = pod_grace.unwrap_or(0);
        if marks {
            if object::is_deleting(&obj) {
                return Ok((StatusCode::OK, entry.value.clone()));
            }
            let meta = object::meta_mut(&mut obj);
            meta.insert("deletionTimestamp".into(), json!(object::now_rfc3339()));
            meta.insert("deletionGracePeriodSeconds".into(), json!(grace_seconds));
            if matches!(t.resource.as_str(), "namespaces" | "workspaces") {
                obj["status"]["phase"] = json!("Terminating");
            }
            if dry_run {
                return Ok((
                    StatusCode::OK,
                    Bytes::from(serde_json::to_vec(&obj).unwrap_or_default()),
                ));
            }
            let bytes = Bytes::from(
                serde_json::to_vec(&obj).map_err(|e| ApiError::Internal(e.to_string()))?,
            );
            match state
                .store
                .write(Op::Put {
                    key: key.clone(),
                    value: bytes.clone(),
                    expect: Expect::At(entry.revision),
                })
                .await
            {
                Ok(c) => {
                    if gc_finalizer.is_some() {
                        let _ = state
                            .gc
                            .send(crate::controllers::gc::GcTask::Finalize { key: key.clone() });
                    }
                    return Ok((StatusCode::OK, with_resource_version(&bytes, c.revision)));
                }
                Err(StorageError::Conflict { .. }) => continue,
                Err(e) => return Err(ApiError::from_storage(e, &t.gr, name)),
            }
        }
        if dry_run {
            return Ok((StatusCode::OK, entry.value.clone()));
        }
        match state
            .store
            .write(Op::Delete {
                key: key.clone(),
                expect: Expect::At(entry.revision),
            })
            .await
        {
            Ok(c) => {
                crate::controllers::gc::collect_dependents(&state.gc, key, &obj);
                return Ok((
                    StatusCode::OK,
                    with_resource_version(&entry.value, c.revision),
                ));
            }
            Err(StorageError::Conflict { .. }) => continue,
            Err(e) => return Err(ApiError::from_storage(e, &t.gr, name)),
        }
    }
    Err(ApiError::conflict(&t.gr, name))
}

fn delete_options(body: &[u8]) -> ApiResult<Value> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    let v = parse_json(body)?;
    if !v.is_object() {
        return Err(ApiError::BadRequest(
            "DeleteOptions must be a JSON object".into(),
        ));
    }
    Ok(v)
}

async fn delete(
    state: &ApiState,
    ctx: &Ctx,
    scope: &Scope<'_>,
    name: &str,
    body: &[u8],
) -> ApiResult<Resp> {
    let mut options = delete_options(body)?;
    if let (Some(g), true) = (
        ctx.query.number::<i64>("gracePeriodSeconds")?,
        options["gracePeriodSeconds"].is_null(),
    ) {
        options["gracePeriodSeconds"] = json!(g);
    }
    if let (Some(p), true) = (
        ctx.query.get("propagationPolicy"),
        options["propagationPolicy"].is_null(),
    ) {
        options["propagationPolicy"] = json!(p);
    }
    let dry_run = ctx.dry_run()
        || options["dryRun"]
            .as_array()
            .is_some_and(|a| a.iter().any(|v| v == "All"));
    let (code, bytes) =
        delete_object(state, scope.t, &scope.key(name)?, name, &options, dry_run).await?;
    Ok(json(code, bytes))
}

async fn delete_collection(state: &ApiState, ctx: &Ctx, scope: &Scope<'_>) -> ApiResult<Resp> {
    let filter = Filter::from_ctx(ctx)?;
    let mut targets = Vec::new();
    state.store.scan(&collection_prefix(scope), None, |k, e| {
        if filter.matches_bytes(&e.value) {
            targets.push(k.clone());
        }
        true
    });
    let mut items = Vec::new();
    for key in targets {
        let name = key.parts().map(|p| p.name.to_string()).unwrap_or_default();
        match delete_object(state, scope.t, &key, &name, &json!({}), ctx.dry_run()).await {
            Ok((_, b)) => items.push(b),
            Err(ApiError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(json(StatusCode::OK, list_body(scope.t, &json!({}), &items)))
}
