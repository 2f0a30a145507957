//! The console's HTTP side: the page and its assets, the live picture as server-sent
//! events, the actions, and `/metrics` and `/readyz`. Everything that shows or changes
//! the clusterset asks for the access token the printed URL carries (a page of another
//! origin cannot know it), as notebook servers do.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use sluice_kube::Roots;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::actions::{self, Action, ActionError};
use crate::metrics::{ActionLabels, Metrics};

const PAGE: &str = include_str!("page/index.html");
const SCRIPT: &str = include_str!("page/console.js");
const STYLE: &str = include_str!("page/console.css");

/// The largest action body read.
const ACTION_LIMIT: usize = 4096;

/// A comment line sent this often keeps idle event streams open through proxies.
const KEEPALIVE: Duration = Duration::from_secs(15);

type Body = BoxBody<Bytes, Infallible>;

/// What every request is served from.
pub struct Shared {
    pub token: String,
    pub roots: Arc<Roots>,
    pub pictures: watch::Receiver<Arc<String>>,
    pub metrics: Arc<Metrics>,
    pub stop: watch::Receiver<bool>,
}

fn full(code: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).boxed());
    *r.status_mut() = code;
    let h = r.headers_mut();
    if let Ok(v) = header::HeaderValue::from_str(content_type) {
        h.insert(header::CONTENT_TYPE, v);
    }
    h.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        header::HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
        ),
    );
    r
}

fn json(code: StatusCode, v: serde_json::Value) -> Response<Body> {
    full(code, "application/json", v.to_string())
}

/// Compare without stopping at the first difference.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The token a request carries: `?token=` or the `X-Console-Token` header.
fn token_of<B>(req: &Request<B>) -> Option<String> {
    if let Some(t) = req
        .headers()
        .get("x-console-token")
        .and_then(|v| v.to_str().ok())
    {
        return Some(t.to_string());
    }
    form_pairs(req.uri().query().unwrap_or_default())
        .into_iter()
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v)
}

fn form_pairs(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter_map(|p| {
            let (k, v) = p.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect()
}

/// A write from another origin is refused even with the token.
fn cross_origin<B>(req: &Request<B>) -> bool {
    let (Some(origin), Some(host)) = (
        req.headers()
            .get(header::ORIGIN)
            .and_then(|v| v.to_str().ok()),
        req.headers()
            .get(header::HOST)
            .and_then(|v| v.to_str().ok()),
    ) else {
        return false;
    };
    origin
        .split_once("://")
        .is_none_or(|(_, rest)| rest.trim_end_matches('/') != host)
}

async fn route(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    match (req.method(), path.as_str()) {
        (&Method::GET, "/readyz" | "/healthz" | "/livez") => {
            full(StatusCode::OK, "text/plain", "ok\n")
        }
        (&Method::GET, "/metrics") => {
            let mut out = String::new();
            match prometheus_client::encoding::text::encode(&mut out, &shared.metrics.registry) {
                Ok(()) => full(
                    StatusCode::OK,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    out,
                ),
                Err(e) => full(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    e.to_string(),
                ),
            }
        }
        (&Method::GET, "/console.js") => full(StatusCode::OK, "text/javascript", SCRIPT),
        (&Method::GET, "/console.css") => full(StatusCode::OK, "text/css", STYLE),
        (&Method::GET, "/favicon.ico") => full(StatusCode::NO_CONTENT, "text/plain", ""),
        _ if !token_of(&req).is_some_and(|t| same(&t, &shared.token)) => full(
            StatusCode::UNAUTHORIZED,
            "text/plain; charset=utf-8",
            "open the URL `sluice console` printed: it carries the access token\n",
        ),
        (&Method::GET, "/") => full(StatusCode::OK, "text/html; charset=utf-8", PAGE),
        (&Method::GET, "/events") => events(&shared),
        (&Method::POST, "/actions") if cross_origin(&req) => json(
            StatusCode::FORBIDDEN,
            serde_json::json!({"ok": false, "message": "actions from another origin are refused"}),
        ),
        (&Method::POST, "/actions") => act(&shared, req).await,
        _ => full(StatusCode::NOT_FOUND, "text/plain", "not found\n"),
    }
}

/// Counts a page following while its stream lives.
struct Following(Arc<Metrics>);

impl Drop for Following {
    fn drop(&mut self) {
        self.0.pages.dec();
    }
}

/// The live picture: the current one at once, then each new one.
fn events(shared: &Shared) -> Response<Body> {
    let pictures = shared.pictures.clone();
    let stop = shared.stop.clone();
    shared.metrics.pages.inc();
    let following = Following(shared.metrics.clone());
    let stream = futures::stream::unfold(
        (pictures, stop, true, following),
        |(mut pictures, mut stop, first, following)| async move {
            if first {
                let now = pictures.borrow_and_update().clone();
                let frame = Bytes::from(format!("event: picture\ndata: {now}\n\n"));
                return Some((frame, (pictures, stop, false, following)));
            }
            if *stop.borrow() {
                return None;
            }
            let frame = tokio::select! {
                r = pictures.changed() => {
                    r.ok()?;
                    let now = pictures.borrow_and_update().clone();
                    Bytes::from(format!("event: picture\ndata: {now}\n\n"))
                }
                _ = tokio::time::sleep(KEEPALIVE) => Bytes::from_static(b": keep-alive\n\n"),
                _ = stop.changed() => return None,
            };
            Some((frame, (pictures, stop, false, following)))
        },
    )
    .map(|b| Ok::<_, Infallible>(Frame::data(b)));
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    r
}

async fn act(shared: &Shared, req: Request<Incoming>) -> Response<Body> {
    let body = match Limited::new(req.into_body(), ACTION_LIMIT).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return json(
                StatusCode::PAYLOAD_TOO_LARGE,
                serde_json::json!({"ok": false, "message": format!("an action is at most {ACTION_LIMIT} bytes")}),
            );
        }
    };
    let action: Action = match serde_json::from_slice(&body) {
        Ok(a) => a,
        Err(e) => {
            return json(
                StatusCode::UNPROCESSABLE_ENTITY,
                serde_json::json!({"ok": false, "message": format!("not an action: {e}")}),
            );
        }
    };
    let span = tracing::info_span!("console action", action = action.name());
    let _enter = span.enter();
    let result = actions::perform(&shared.roots, &action).await;
    let (label, response) = match result {
        Ok(done) => {
            tracing::info!(%done, "action done");
            (
                "done",
                json(
                    StatusCode::OK,
                    serde_json::json!({"ok": true, "message": done}),
                ),
            )
        }
        Err(e) => {
            tracing::info!(error = %e, code = e.code(), "action refused");
            let label = match e {
                ActionError::Invalid(_) => "invalid",
                _ => "refused",
            };
            let code = StatusCode::from_u16(e.code()).unwrap_or(StatusCode::BAD_GATEWAY);
            (
                label,
                json(
                    code,
                    serde_json::json!({"ok": false, "code": e.code(), "message": e.to_string()}),
                ),
            )
        }
    };
    shared
        .metrics
        .actions
        .get_or_create(&ActionLabels {
            action: action.name(),
            result: label,
        })
        .inc();
    response
}

/// Serve on `listener` until `stop` changes.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let mut stop = shared.stop.clone();
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accept");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(route(shared, req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole_and_come_from_query_or_header() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd") && !same("abc", "ab"));
        let req = Request::get("/events?x=1&token=t0k")
            .body(())
            .expect("request");
        assert_eq!(token_of(&req).as_deref(), Some("t0k"));
        let req = Request::post("/actions")
            .header("x-console-token", "h")
            .body(())
            .expect("request");
        assert_eq!(token_of(&req).as_deref(), Some("h"));
    }

    #[test]
    fn writes_from_another_origin_are_told_apart() {
        let req = |origin: &str| {
            Request::post("/actions")
                .header("host", "127.0.0.1:8080")
                .header("origin", origin)
                .body(())
                .expect("request")
        };
        assert!(!cross_origin(&req("http://127.0.0.1:8080")));
        assert!(cross_origin(&req("http://evil.example")));
        assert!(cross_origin(&req("null")));
    }
}
