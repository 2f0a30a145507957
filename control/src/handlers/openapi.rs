//! `/openapi/v2` and `/openapi/v3`.

use http::{HeaderValue, StatusCode, header};

use super::{Ctx, Resp, json, json_value};
use crate::errors::{ApiError, ApiResult};
use crate::state::ApiState;

pub fn v3_root(state: &ApiState, ctx: &Ctx) -> Resp {
    json_value(
        StatusCode::OK,
        &state.openapi.v3_root(
            state.schemas,
            &state.catalog_for(&ctx.target.cluster),
            &ctx.target.prefix,
        ),
    )
}

pub fn v3(state: &ApiState, ctx: &Ctx, group: &str, version: &str) -> ApiResult<Resp> {
    let (bytes, hash) = state
        .openapi
        .v3(
            state.schemas,
            &state.catalog_for(&ctx.target.cluster),
            group,
            version,
        )
        .ok_or(ApiError::PathNotFound)?;
    let mut r = json(StatusCode::OK, bytes);
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{hash}\"")) {
        r.headers_mut().insert(header::ETAG, etag);
    }
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, immutable"),
    );
    Ok(r)
}

/// JSON only: a client that accepts nothing but the protobuf encoding gets 406 and
/// falls back (kubectl then uses its compiled-in types for strategic merge patches).
pub fn v2(state: &ApiState, ctx: &Ctx) -> ApiResult<Resp> {
    let accept = ctx.accept();
    let json_ok = accept.is_empty()
        || accept.split(',').any(|t| {
            let t = t.trim();
            t.starts_with("application/json") || t.starts_with("*/*")
        });
    if !json_ok {
        return Err(ApiError::NotAcceptable(format!(
            "only application/json is supported, not {accept:?}"
        )));
    }
    Ok(json(
        StatusCode::OK,
        state
            .openapi
            .v2(state.schemas, crate::resources::Catalog::builtin()),
    ))
}
