//! HTTP handlers: one dispatch from a parsed request to the handler of its route, and
//! one place where errors become responses.

pub mod authorize;
pub mod connect;
pub mod discovery;
pub mod ephemeral_containers;
pub mod logs;
pub mod objects;
pub mod openapi;
pub mod pod_container;
pub mod pod_metrics;
pub mod remote_logs;
pub mod respond;
pub mod reviews;
pub mod route;
pub mod scope;
pub mod system;
pub mod token_request;
pub mod watch;

use std::time::Instant;

use http::{HeaderValue, Method, Request, header};
use tracing::Instrument;

use crate::audit::{AuditEvent, millis};
use crate::auth::User;
use crate::errors::ApiError;
use crate::metrics::{RequestLabels, VerbLabels};
use crate::request::{ClusterScope, Query, Route, Target, parse_path};
use crate::state::SharedState;

pub use respond::{Body, Ctx, Resp, error_response, full, json, json_value, read_body};

/// Who a request is for fairness: the system's own parts, or a tenant's logical cluster.
fn flow_of(user: &User, target: &Target) -> crate::fairness::Flow {
    use crate::fairness::Flow;
    if user.is_admin()
        || crate::rbac::syncer::cluster_of(user).is_some()
        || crate::rbac::clusterset::component_of(user).is_some()
    {
        return Flow::System;
    }
    match &target.cluster {
        ClusterScope::One(c) => Flow::Tenant(c.to_string()),
        ClusterScope::Wildcard => Flow::Tenant("*".into()),
    }
}

/// Requests that last as long as the client wants (watches, followed logs, exec
/// sessions): they hold a connection, not a worker, and take no fairness slot.
fn long_running(verb: &str, route: &Route, query: &Query) -> bool {
    verb == "watch"
        || matches!(route, Route::Resource(r) if r.subresource.as_deref() == Some("log") && query.flag("follow"))
        || matches!(route, Route::Resource(r) if is_connect(r.subresource.as_deref()))
}

/// Subresources a client connects to (kube's `connect` verbs): authorized as `create`
/// whether they come as a POST or as a WebSocket's GET, as kube-apiserver authorizes them.
fn is_connect(subresource: Option<&str>) -> bool {
    matches!(subresource, Some("exec" | "attach" | "portforward"))
}

/// The Kubernetes verb of a request, as RBAC and audit name it (`get`, `list`, `watch`,
/// `create`, `update`, `patch`, `apply`, `delete`, `deletecollection`), for metrics and
/// spans; HTTP methods do not tell a list from a get or a watch, or an apply from a patch.
fn verb_of(method: &Method, route: &Route, query: &Query, content_type: &str) -> &'static str {
    match route {
        Route::Resource(r) if is_connect(r.subresource.as_deref()) => "create",
        Route::Resource(r) => match *method {
            Method::GET if r.name.is_none() && (r.legacy_watch || query.flag("watch")) => "watch",
            Method::GET if r.name.is_none() => "list",
            Method::GET => "get",
            Method::POST => "create",
            Method::PUT => "update",
            Method::PATCH if content_type.starts_with("application/apply-patch") => "apply",
            Method::PATCH => "patch",
            Method::DELETE if r.name.is_none() => "deletecollection",
            Method::DELETE => "delete",
            _ => "other",
        },
        _ => "get",
    }
}

/// Serve one request from an authenticated or anonymous peer.
pub async fn handle(
    state: SharedState,
    req: Request<hyper::body::Incoming>,
    cert_user: Option<User>,
) -> Resp {
    let started = Instant::now();
    let (mut parts, body) = req.into_parts();
    let upgrade = parts.extensions.remove::<hyper::upgrade::OnUpgrade>();
    let query = Query::parse(parts.uri.query());
    let target = match parse_path(parts.uri.path()) {
        Ok(t) => t,
        Err(e) => return error_response(&e),
    };
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let verb = verb_of(&parts.method, &target.route, &query, content_type);
    let requested = match &target.route {
        Route::Resource(r) => r.resource.clone(),
        _ => String::new(),
    };
    // Only the names of served resources become metric labels: a client naming resources
    // at random must not grow the metrics.
    let resource = match &target.route {
        Route::Resource(r)
            if state
                .catalog_for(&target.cluster)
                .lookup(&r.group, &r.version, &r.resource)
                .is_some() =>
        {
            r.resource.clone()
        }
        Route::Resource(_) => "unknown".to_string(),
        _ => String::new(),
    };
    let span = tracing::debug_span!(
        "request",
        verb,
        path = parts.uri.path(),
        cluster = ?target.cluster,
        resource = %requested,
        code = tracing::field::Empty,
    );
    let authorization = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let user = state.auth.authenticate(authorization, cert_user.as_ref());
    let audited = state.audit.as_ref().map(|_| {
        let (namespace, name, subresource) = match &target.route {
            Route::Resource(r) => (r.namespace.clone(), r.name.clone(), r.subresource.clone()),
            _ => (None, None, None),
        };
        // A session's command is part of who did what (kube records it in the URI).
        let command: Vec<String> = if subresource.as_deref() == Some("exec") {
            form_urlencoded::parse(parts.uri.query().unwrap_or_default().as_bytes())
                .filter(|(k, _)| k == "command")
                .map(|(_, v)| v.into_owned())
                .collect()
        } else {
            Vec::new()
        };
        let cluster = match &target.cluster {
            ClusterScope::One(p) => p.to_string(),
            ClusterScope::Wildcard => "*".to_string(),
        };
        let who = user
            .as_ref()
            .map_or_else(|| "system:anonymous".to_string(), |u| u.name.clone());
        let path = parts.uri.path().to_string();
        (who, cluster, path, namespace, name, subresource, command)
    });
    // Anonymous clients get health and the version only (kube's
    // `system:public-info-viewer`); `/metrics` needs an identity allowed to read it.
    let public = matches!(
        target.route,
        Route::Livez | Route::Readyz | Route::Healthz | Route::Version
    );
    let anonymous = || User {
        name: "system:anonymous".into(),
        ..Default::default()
    };
    let user = match (user, public) {
        (Some(user), false) => authorize::admit(
            &state,
            user,
            &target,
            verb,
            parts.uri.path(),
            &query,
            &parts.headers,
        ),
        (Some(user), true) => Ok(user),
        (None, true) => Ok(anonymous()),
        (None, false) => Err(ApiError::Unauthorized),
    };
    let admitted = match user {
        Ok(user) if !long_running(verb, &target.route, &query) => state
            .fairness
            .admit(&flow_of(&user, &target))
            .await
            .map(|slot| (user, Some(slot)))
            .map_err(ApiError::from),
        Ok(user) => Ok((user, None)),
        Err(e) => Err(e),
    };
    let resp = match admitted {
        Ok((user, _slot)) => {
            let ctx = Ctx {
                method: parts.method,
                target,
                query,
                headers: parts.headers,
                user,
                warnings: Vec::new(),
                audit_annotations: Vec::new(),
                raw_query: parts.uri.query().unwrap_or_default().to_string(),
                upgrade,
            };
            dispatch(&state, ctx, body).instrument(span.clone()).await
        }
        Err(e) => {
            tracing::debug!(error = %e, "refused");
            error_response(&e)
        }
    };
    let code = resp.status().as_u16();
    span.record("code", code);
    if let (Some(log), Some((who, cluster, path, namespace, name, subresource, command))) =
        (&state.audit, &audited)
    {
        log.record(&AuditEvent {
            time: sluice_kube::time::now_rfc3339(),
            user: who,
            verb,
            cluster,
            path,
            resource: &requested,
            namespace: namespace.as_deref(),
            name: name.as_deref(),
            subresource: subresource.as_deref(),
            command,
            annotations: resp
                .extensions()
                .get::<respond::AuditAnnotations>()
                .map(|a| a.0.as_slice())
                .unwrap_or_default(),
            code,
            latency_ms: millis(started.elapsed()),
        });
    }
    if verb != "watch" {
        state
            .metrics
            .requests
            .get_or_create(&RequestLabels {
                verb,
                resource: resource.clone(),
                code,
            })
            .inc();
        state
            .metrics
            .latency
            .get_or_create(&VerbLabels { verb, resource })
            .observe(started.elapsed().as_secs_f64());
    } else {
        state
            .metrics
            .requests
            .get_or_create(&RequestLabels {
                verb,
                resource,
                code,
            })
            .inc();
    }
    resp
}

async fn dispatch(state: &SharedState, mut ctx: Ctx, body: hyper::body::Incoming) -> Resp {
    let route = ctx.target.route.clone();
    let result = match route {
        Route::Livez | Route::Healthz => Ok(system::health(true)),
        Route::Readyz => Ok(system::health(state.is_ready())),
        Route::Version => Ok(system::version()),
        Route::Metrics => Ok(system::metrics(state)),
        Route::OpenApiV2 => openapi::v2(state, &ctx),
        Route::OpenApiV3Root => Ok(openapi::v3_root(state, &ctx)),
        Route::OpenApiV3 { group, version } => openapi::v3(state, &ctx, &group, &version),
        Route::CoreVersions => Ok(discovery::core_versions(
            &state.catalog_for(&ctx.target.cluster),
            &ctx,
        )),
        Route::Groups => Ok(discovery::groups(
            &state.catalog_for(&ctx.target.cluster),
            &ctx,
        )),
        Route::Group { group } => discovery::group(&state.catalog_for(&ctx.target.cluster), &group),
        Route::Resources { group, version } => {
            discovery::resources(&state.catalog_for(&ctx.target.cluster), &group, &version)
        }
        Route::Resource(rp) => route::serve(state, &mut ctx, rp, body).await,
    };
    let mut resp = match result {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(error = %e, "request failed");
            error_response(&e)
        }
    };
    for w in &ctx.warnings {
        if let Ok(v) =
            HeaderValue::from_str(&format!("299 - {}", serde_json::Value::String(w.clone())))
        {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    if !ctx.audit_annotations.is_empty() {
        resp.extensions_mut()
            .insert(respond::AuditAnnotations(ctx.audit_annotations));
    }
    resp
}
