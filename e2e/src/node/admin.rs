//! The node agent's admin endpoint: `/metrics` (Prometheus) and `/readyz`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeLabels {
    pub probe: &'static str,
}

/// What the node agent counts.
#[derive(Debug, Default)]
pub struct NodeMetrics {
    pub pods: Gauge,
    pub container_starts: Counter,
    pub container_restarts: Counter,
    pub start_failures: Counter,
    pub probe_failures: Family<ProbeLabels, Counter>,
    pub ready: AtomicBool,
}

impl NodeMetrics {
    fn registry(&self) -> Registry {
        let mut r = Registry::with_prefix("sluice_node");
        r.register("pods", "Pods running on this node", self.pods.clone());
        r.register(
            "container_starts",
            "Container processes started",
            self.container_starts.clone(),
        );
        r.register(
            "container_restarts",
            "Container restarts by restart policy",
            self.container_restarts.clone(),
        );
        r.register(
            "container_start_failures",
            "Containers that could not be started",
            self.start_failures.clone(),
        );
        r.register(
            "probe_failures",
            "Failed probe attempts by probe",
            self.probe_failures.clone(),
        );
        r
    }
}

/// Serve `/metrics` and `/readyz` on `addr` until `shutdown` flips.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<NodeMetrics>,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                _ = shutdown.changed() => return,
                a = listener.accept() => match a { Ok(a) => a, Err(_) => continue },
            };
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let metrics = metrics.clone();
                    async move {
                        let (code, body, ct) = match req.uri().path() {
                            "/metrics" => {
                                let mut out = String::new();
                                let _ = prometheus_client::encoding::text::encode(
                                    &mut out,
                                    &metrics.registry(),
                                );
                                (
                                    StatusCode::OK,
                                    out,
                                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                                )
                            }
                            "/readyz" | "/healthz" if metrics.ready.load(Ordering::Acquire) => {
                                (StatusCode::OK, "ok".to_string(), "text/plain")
                            }
                            "/readyz" | "/healthz" => (
                                StatusCode::SERVICE_UNAVAILABLE,
                                "not ready".to_string(),
                                "text/plain",
                            ),
                            _ => (StatusCode::NOT_FOUND, "not found".to_string(), "text/plain"),
                        };
                        let mut r = Response::new(Full::new(Bytes::from(body)));
                        *r.status_mut() = code;
                        r.headers_mut()
                            .insert(header::CONTENT_TYPE, header::HeaderValue::from_static(ct));
                        Ok::<_, Infallible>(r)
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(bound)
}
