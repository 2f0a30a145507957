//! The admin endpoint of every long-running Sluice process: `/metrics` (Prometheus text
//! format), `/readyz`, and whatever read-only pages a process adds (`/config_dump`).
//!
//! Processes describe themselves through [`AdminSource`]; the HTTP side lives here once.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prometheus_client::registry::Registry;
use tokio::sync::watch;

/// The content type of the Prometheus text exposition format.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What a process shows on its admin endpoint.
pub trait AdminSource: Send + Sync + 'static {
    /// The metrics registry to encode for `/metrics`.
    fn registry(&self) -> &Registry;
    /// `/readyz` answers 200 when true, 503 otherwise.
    fn ready(&self) -> bool;
    /// Extra pages (path with its query, e.g. `/config_dump?service=x` → content type and
    /// body); none by default.
    fn page(&self, _path: &str) -> Option<(&'static str, String)> {
        None
    }
}

fn respond(code: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = code;
    if let Ok(v) = header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    r
}

fn route(source: &dyn AdminSource, uri: &http::Uri) -> Response<Full<Bytes>> {
    let path = uri.path();
    match path {
        "/metrics" => {
            let mut out = String::new();
            match prometheus_client::encoding::text::encode(&mut out, source.registry()) {
                Ok(()) => respond(StatusCode::OK, METRICS_CONTENT_TYPE, out),
                Err(e) => respond(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    e.to_string(),
                ),
            }
        }
        "/healthz" | "/livez" => respond(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" if source.ready() => respond(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" => respond(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "not ready\n".into(),
        ),
        _ => match source.page(uri.path_and_query().map_or(path, |p| p.as_str())) {
            Some((ct, body)) => respond(StatusCode::OK, ct, body),
            None => respond(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
        },
    }
}

/// Serve the admin endpoint on `addr` until `shutdown` changes; returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    source: Arc<dyn AdminSource>,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                _ = shutdown.changed() => return,
                a = listener.accept() => match a {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::debug!(error = %e, "admin accept failed");
                        continue;
                    }
                },
            };
            let source = source.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let resp = route(source.as_ref(), req.uri());
                    async move { Ok::<_, Infallible>(resp) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(bound)
}
