//! CRUD on objects: get, list, create, update, patch, delete, deletecollection, and the
//! `status` and `scale` subresources.

use base64::Engine;
use bytes::Bytes;
use http::StatusCode;
use serde_json::{Value, json};

use super::respond::{Ctx, Resp, json};
use super::scope::{Filter, Scope, collection_prefix, present_all, present_one};
use crate::errors::{ApiError, ApiResult};
use crate::patch::PatchType;
use crate::pipeline::{
    self, Change, FieldValidation, Ownership, Patcher, Write, Written, parse_json,
};
use crate::resources::{ResourceType, Subresource};
use crate::state::{ApiState, SharedState};
use crate::storage::{Key, Revision};

/// The pipeline's parameters from a request's query and headers.
fn write_of(ctx: &Ctx) -> Write {
    Write {
        manager: manager_of(ctx),
        dry_run: ctx.dry_run(),
        field_validation: FieldValidation::parse(ctx.query.get("fieldValidation")),
        warnings: Vec::new(),
        user: Some(ctx.user.clone()),
        audit_annotations: Vec::new(),
    }
}

/// Run a write through the pipeline, handing its warnings and audit annotations to the
/// response.
async fn run<T>(
    ctx: &mut Ctx,
    write: impl AsyncFnOnce(&mut Write) -> ApiResult<T>,
) -> ApiResult<T> {
    let mut w = write_of(ctx);
    let result = write(&mut w).await;
    ctx.warnings.append(&mut w.warnings);
    ctx.audit_annotations.append(&mut w.audit_annotations);
    result
}

/// A written object in the request's version.
async fn written(
    state: &ApiState,
    scope: &Scope<'_>,
    code: StatusCode,
    w: Written,
) -> ApiResult<Resp> {
    let bytes = present_one(state, scope.cluster.as_ref(), scope.t, w.into_bytes()?).await?;
    Ok(json(code, bytes))
}

/// Replace or patch the `scale` subresource.
pub(super) async fn update_scale(
    state: &SharedState,
    ctx: &Ctx,
    scope: &Scope<'_>,
    name: &str,
    patcher: Patcher<'_>,
) -> ApiResult<Resp> {
    let scale =
        pipeline::update_scale(state, &scope.target()?, name, patcher, ctx.dry_run()).await?;
    Ok(super::respond::json_value(StatusCode::OK, &scale))
}

pub(super) async fn get(
    state: &ApiState,
    ctx: &Ctx,
    scope: &Scope<'_>,
    name: &str,
) -> ApiResult<Resp> {
    let entry = state
        .store
        .get(&scope.key(name)?)
        .ok_or_else(|| ApiError::not_found(&scope.t.gr, name))?;
    if let Some(version) = crate::table::wants_table(ctx.accept()) {
        // Cells come from the stored form, which the columns are written for (a version
        // converted by a webhook: from that version's form).
        let obj = parse_json(&converted_for_table(state, scope, entry.value.clone()).await?)?;
        let rv = obj["metadata"]["resourceVersion"].clone();
        let t = crate::table::table(
            scope.t,
            version,
            &[obj],
            json!({"resourceVersion": rv}),
            ctx.query.get("includeObject").unwrap_or("Metadata"),
            true,
        );
        return Ok(super::respond::json_value(StatusCode::OK, &t));
    }
    let bytes = present_one(state, scope.cluster.as_ref(), scope.t, entry.value.clone()).await?;
    Ok(json(StatusCode::OK, bytes))
}

/// What a Table's cells are read from: the stored form, or the requested version's when a
/// webhook converts between them.
async fn converted_for_table(
    state: &ApiState,
    scope: &Scope<'_>,
    bytes: Bytes,
) -> ApiResult<Bytes> {
    if scope.t.conversion_webhook().is_none() {
        return Ok(bytes);
    }
    present_one(state, scope.cluster.as_ref(), scope.t, bytes).await
}

/// The continue token: the key to resume after, and the list's revision.
fn encode_continue(key: &Key, rv: Revision) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(json!({"k": key.as_str(), "rv": rv.0}).to_string())
}

/// Read a continue token of a list under `prefix`: the key to resume after and the
/// revision, or 400 for anything this server did not issue for that list.
pub fn decode_continue(token: &str, prefix: &str) -> ApiResult<(String, Revision)> {
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

pub(super) async fn list(state: &ApiState, ctx: &Ctx, scope: &Scope<'_>) -> ApiResult<Resp> {
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
        let (entry, rv) = state.store.get_at(&scope.t.prefix.key(
            scope.cluster()?,
            scope.namespace.as_deref(),
            name,
        ));
        if let Some(e) = entry
            && filter.matches_bytes(&e.value)
        {
            items.push(e.value.clone());
        }
        rv
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
    if let Some(version) = crate::table::wants_table(ctx.accept()) {
        let items = if scope.t.conversion_webhook().is_some() {
            present_all(state, scope.cluster.as_ref(), scope.t, items).await?
        } else {
            items
        };
        let objects = items
            .iter()
            .map(|b| parse_json(b))
            .collect::<ApiResult<Vec<Value>>>()?;
        let t = crate::table::table(
            scope.t,
            version,
            &objects,
            metadata,
            ctx.query.get("includeObject").unwrap_or("Metadata"),
            true,
        );
        return Ok(super::respond::json_value(StatusCode::OK, &t));
    }
    let items = present_all(state, scope.cluster.as_ref(), scope.t, items).await?;
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
pub(super) async fn create(
    state: &ApiState,
    ctx: &mut Ctx,
    scope: &Scope<'_>,
    body: &[u8],
) -> ApiResult<Resp> {
    let target = scope.target()?;
    let ct = ctx.content_type().to_string();
    let w = run(ctx, async |w| {
        let obj = pipeline::decode_body(state, scope.t, &ct, body, w)?;
        pipeline::create(state, &target, obj, Ownership::Update, w).await
    })
    .await?;
    written(state, scope, StatusCode::CREATED, w).await
}

fn manager_of(ctx: &Ctx) -> String {
    crate::apply::manager_name(
        ctx.query.get("fieldManager"),
        ctx.headers
            .get(http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok()),
    )
}

pub(super) async fn update(
    state: &ApiState,
    ctx: &mut Ctx,
    scope: &Scope<'_>,
    name: &str,
    sub: Option<Subresource>,
    body: &[u8],
) -> ApiResult<Resp> {
    let target = scope.target()?;
    let ct = ctx.content_type().to_string();
    let w = run(ctx, async |w| {
        let new = pipeline::decode_body(state, scope.t, &ct, body, w)?;
        if let (Some(ns), Some(body_ns)) = (&scope.namespace, new["metadata"]["namespace"].as_str())
            && ns != body_ns
        {
            return Err(ApiError::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request"
                    .into(),
            ));
        }
        pipeline::modify(state, &target, name, Change::Replace { new, sub }, w).await
    })
    .await?;
    written(state, scope, StatusCode::OK, w).await
}

pub(super) async fn patch(
    state: &ApiState,
    ctx: &mut Ctx,
    scope: &Scope<'_>,
    name: &str,
    sub: Option<Subresource>,
    pt: PatchType,
    body: &[u8],
) -> ApiResult<Resp> {
    let target = scope.target()?;
    if pt != PatchType::Apply {
        let w = run(ctx, async |w| {
            pipeline::modify(state, &target, name, Change::Patch { pt, body, sub }, w).await
        })
        .await?;
        return written(state, scope, StatusCode::OK, w).await;
    }
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
    let applied = pipeline::decode::parse_yaml(body)?;
    if !applied.is_object() {
        return Err(ApiError::BadRequest(
            "an applied configuration must be an object".into(),
        ));
    }
    let (w, created) = run(ctx, async |w| {
        pipeline::apply(state, &target, name, applied, manager, force, w).await
    })
    .await?;
    let code = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    written(state, scope, code, w).await
}

pub(super) fn get_scale(state: &ApiState, scope: &Scope<'_>, name: &str) -> ApiResult<Resp> {
    let entry = state
        .store
        .get(&scope.key(name)?)
        .ok_or_else(|| ApiError::not_found(&scope.t.gr, name))?;
    let obj: Value =
        serde_json::from_slice(&entry.value).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(super::respond::json_value(
        StatusCode::OK,
        &pipeline::scale_of(scope.t, &obj),
    ))
}

/// The DeleteOptions of a delete: from the body (JSON, or protobuf as client-go's typed
/// clients send it), with `gracePeriodSeconds` and `propagationPolicy` from the query where
/// the body leaves them out; and whether it is a dry run.
fn delete_options(ctx: &Ctx, body: &[u8]) -> ApiResult<(Value, bool)> {
    let mut options = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else if ctx.content_type().starts_with(crate::codec::PROTOBUF) {
        crate::codec::protobuf::decode(body, DELETE_OPTIONS)
            .map_err(|e| ApiError::BadRequest(format!("error decoding DeleteOptions: {e}")))?
    } else {
        parse_json(body)?
    };
    if !options.is_object() {
        return Err(ApiError::BadRequest(
            "DeleteOptions must be a JSON object".into(),
        ));
    }
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
    Ok((options, dry_run))
}

const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";

pub(super) async fn delete(
    state: &ApiState,
    ctx: &Ctx,
    scope: &Scope<'_>,
    name: &str,
    body: &[u8],
) -> ApiResult<Resp> {
    let (options, dry_run) = delete_options(ctx, body)?;
    let bytes = pipeline::delete(
        state,
        scope.t,
        &scope.key(name)?,
        name,
        &options,
        dry_run,
        Some(&ctx.user),
    )
    .await?;
    Ok(json(StatusCode::OK, bytes))
}

pub(super) async fn delete_collection(
    state: &ApiState,
    ctx: &Ctx,
    scope: &Scope<'_>,
    body: &[u8],
) -> ApiResult<Resp> {
    let (options, dry_run) = delete_options(ctx, body)?;
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
        match pipeline::delete(
            state,
            scope.t,
            &key,
            &name,
            &options,
            dry_run,
            Some(&ctx.user),
        )
        .await
        {
            Ok(b) => items.push(b),
            Err(ApiError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(json(StatusCode::OK, list_body(scope.t, &json!({}), &items)))
}
