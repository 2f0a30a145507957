//! `/openapi/v2` and `/openapi/v3`.

use http::{HeaderValue, StatusCode, header};

use super::respond::{Ctx, Resp, json, json_value};
use crate::errors::{ApiError, ApiResult};
use crate::schema::gnostic;
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

/// The Swagger 2.0 document, as JSON or in gnostic's protobuf (kubectl asks for the
/// latter when a kind has no OpenAPI v3 entry); anything else is 406.
pub fn v2(state: &ApiState, ctx: &Ctx) -> ApiResult<Resp> {
    let accept = ctx.accept();
    let accepts = |prefix: &str| accept.split(',').any(|t| t.trim().starts_with(prefix));
    let json_ok = accept.is_empty() || accepts("application/json") || accepts("*/*");
    let protobuf = !json_ok && (accepts(gnostic::CONTENT_TYPE) || accepts(gnostic::ACCEPT_LEGACY));
    if !json_ok && !protobuf {
        return Err(ApiError::NotAcceptable(format!(
            "only application/json and {} are supported, not {accept:?}",
            gnostic::CONTENT_TYPE
        )));
    }
    let body = state
        .openapi
        .v2(state.schemas, crate::catalog::Catalog::builtin(), protobuf);
    let mut r = json(StatusCode::OK, body);
    if protobuf {
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(gnostic::CONTENT_TYPE),
        );
    }
    Ok(r)
}
