//! Routes a resource request: resolves its type and scope, then hands it to the handler
//! of its kind — reviews, resource metrics, token requests, logs, watches, or CRUD on
//! objects.

use http::Method;

use super::connect::Connect;
use super::objects;
use super::respond::{Ctx, Resp, read_body};
use super::scope::Scope;
use crate::errors::{ApiError, ApiResult};
use crate::patch::PatchType;
use crate::pipeline::Patcher;
use crate::request::{ClusterScope, ResourcePath};
use crate::resources::Subresource;
use crate::state::SharedState;

/// Serve a request for a resource path.
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
            // Who may read across logical clusters was decided in `authorize`.
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
    if t.is_review() {
        if ctx.method != Method::POST || rp.name.is_some() {
            return Err(ApiError::MethodNotAllowed);
        }
        let body = read_body(body, state.limits.max_body).await?;
        return super::reviews::serve(state, ctx, &scope, &body);
    }
    if t.group == sluice_api::metrics::GROUP {
        let watch = rp.legacy_watch || ctx.query.flag("watch");
        return match (&ctx.method, &rp.subresource) {
            (&Method::GET, None) if !watch => {
                super::pod_metrics::serve(state, ctx, &scope, rp.name.as_deref()).await
            }
            _ => Err(ApiError::MethodNotAllowed),
        };
    }
    if t.has(Subresource::Token) && rp.subresource.as_deref() == Some("token") {
        return match (&ctx.method, rp.name.as_deref()) {
            (&Method::POST, Some(n)) => {
                let body = read_body(body, state.limits.max_body).await?;
                super::token_request::serve(state, ctx, &scope, n, &body)
            }
            _ => Err(ApiError::MethodNotAllowed),
        };
    }
    if t.resource == "pods" && t.group.is_empty() && rp.subresource.as_deref() == Some("log") {
        return match (&ctx.method, rp.name.as_deref()) {
            (&Method::GET, Some(n)) => super::logs::serve(state, ctx, &scope, n).await,
            _ => Err(ApiError::MethodNotAllowed),
        };
    }
    if t.resource == "pods"
        && t.group.is_empty()
        && let Some(connect) = rp.subresource.as_deref().and_then(Connect::of)
    {
        return match (&ctx.method, rp.name.as_deref()) {
            (&Method::GET | &Method::POST, Some(n)) => {
                super::connect::serve(state, ctx, &scope, n, connect).await
            }
            _ => Err(ApiError::MethodNotAllowed),
        };
    }
    let sub = match rp.subresource.as_deref() {
        None => None,
        Some("status") if t.has(Subresource::Status) => Some(Subresource::Status),
        Some("scale") if t.has(Subresource::Scale) => Some(Subresource::Scale),
        Some("ephemeralcontainers") if t.has(Subresource::EphemeralContainers) => {
            Some(Subresource::EphemeralContainers)
        }
        Some(_) => return Err(ApiError::PathNotFound),
    };
    let watch = rp.legacy_watch || ctx.query.flag("watch");
    match (&ctx.method, rp.name.as_deref(), sub) {
        (&Method::GET, None, _) if watch => super::watch::serve(state, ctx, &scope).await,
        (&Method::GET, None, _) => objects::list(state, ctx, &scope).await,
        (&Method::GET, Some(n), Some(Subresource::Scale)) => objects::get_scale(state, &scope, n),
        (&Method::GET, Some(n), _) => objects::get(state, ctx, &scope, n).await,
        (&Method::POST, None, None) => {
            let body = read_body(body, state.limits.max_body).await?;
            objects::create(state, ctx, &scope, &body).await
        }
        (&Method::PUT, Some(n), sub) => {
            let body = read_body(body, state.limits.max_body).await?;
            match sub {
                Some(Subresource::Scale) => {
                    objects::update_scale(state, ctx, &scope, n, Patcher::Replace(&body)).await
                }
                Some(Subresource::EphemeralContainers) => {
                    super::ephemeral_containers::serve(
                        state,
                        ctx,
                        &scope,
                        n,
                        Patcher::Replace(&body),
                    )
                    .await
                }
                _ => objects::update(state, ctx, &scope, n, sub, &body).await,
            }
        }
        (&Method::PATCH, Some(n), sub) => {
            let pt = PatchType::from_content_type(ctx.content_type()).ok_or_else(|| {
                ApiError::UnsupportedMediaType(format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {:?})", ctx.content_type()))
            })?;
            let body = read_body(body, state.limits.max_body).await?;
            match sub {
                Some(Subresource::Scale) => {
                    objects::update_scale(state, ctx, &scope, n, Patcher::Patch(pt, &body)).await
                }
                Some(Subresource::EphemeralContainers) => {
                    let patcher = Patcher::Patch(pt, &body);
                    super::ephemeral_containers::serve(state, ctx, &scope, n, patcher).await
                }
                _ => objects::patch(state, ctx, &scope, n, sub, pt, &body).await,
            }
        }
        (&Method::DELETE, Some(n), None) => {
            let body = read_body(body, state.limits.max_body).await?;
            objects::delete(state, ctx, &scope, n, &body).await
        }
        (&Method::DELETE, None, None) => {
            let body = read_body(body, state.limits.max_body).await?;
            objects::delete_collection(state, ctx, &scope, &body).await
        }
        _ => Err(ApiError::MethodNotAllowed),
    }
}
