//! The hyper path: a downstream request is sent to an endpoint picked per attempt over
//! that endpoint's pooled clients, its body streamed with a copy kept for retries
//! ([`super::replay`]), and its response streamed back with the endpoint held in flight
//! until the body ends.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode, Version};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use std::net::SocketAddr;
use tracing::Instrument;

use super::attempts::{Attempts, Failure, idempotent};
use super::headers::{DRAINING_HEADER, HOP_BY_HOP, connection_option, strip_hop_by_hop};
use super::local::{self, LocalError, ProxyBody};
use super::replay::{Replay, ReplayBody};
use super::upstream::pool_of;
use crate::balance::{ActiveGuard, Endpoint};
use crate::reason::Reason;
use crate::service::Service;
use crate::trace::{TRACEPARENT, TraceParent};

/// The request for one attempt on `addr`.
fn upstream_request(
    parts: &http::request::Parts,
    body: ReplayBody,
    addr: SocketAddr,
    h2: bool,
    traceparent: &HeaderValue,
) -> Result<Request<ReplayBody>, http::Error> {
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let authority = parts
        .uri
        .authority()
        .map(|a| a.as_str().to_string())
        .or_else(|| {
            parts
                .headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_string)
        })
        .unwrap_or_else(|| addr.to_string());
    // The client's authority travels on (Host, :authority); the connector dials `addr`.
    let uri = format!("http://{authority}{path}");
    let mut req = Request::builder()
        .method(parts.method.clone())
        .uri(uri)
        .version(if h2 {
            Version::HTTP_2
        } else {
            Version::HTTP_11
        })
        .body(body)?;
    let headers = req.headers_mut();
    let connection = parts.headers.get_all(header::CONNECTION);
    for (k, v) in &parts.headers {
        if HOP_BY_HOP.contains(k)
            || (k == header::TE && v != "trailers")
            || connection_option(connection.iter().map(HeaderValue::as_bytes), k.as_str())
        {
            continue;
        }
        if (h2 && k == header::HOST) || k == TRACEPARENT {
            continue;
        }
        headers.append(k.clone(), v.clone());
    }
    headers.insert(TRACEPARENT, traceparent.clone());
    if !h2
        && !headers.contains_key(header::HOST)
        && let Ok(v) = HeaderValue::from_str(&authority)
    {
        headers.insert(header::HOST, v);
    }
    Ok(req)
}

/// Serve one downstream request, as a span of the client's trace (or a new one).
pub async fn handle(svc: Arc<Service>, req: Request<Incoming>) -> Response<ProxyBody> {
    crate::busy_poll::activity();
    let parent = req
        .headers()
        .get(TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .and_then(TraceParent::parse);
    let ours = parent.map_or_else(TraceParent::root, |p| p.child());
    let span = tracing::debug_span!(
        "request",
        service = %svc.name,
        method = %req.method(),
        path = req.uri().path(),
        trace_id = %format_args!("{:032x}", ours.trace_id),
        span_id = %format_args!("{:016x}", ours.span_id),
        parent_span_id = parent.map(|p| format!("{:016x}", p.span_id)),
    );
    forward(svc, req, ours.header_value())
        .instrument(span)
        .await
}

async fn forward(
    svc: Arc<Service>,
    req: Request<Incoming>,
    traceparent: HeaderValue,
) -> Response<ProxyBody> {
    let (parts, body) = req.into_parts();
    let body = Replay::new(body);
    let h2 = svc.upstream_h2(parts.version);
    let mut attempts = Attempts::new(&svc, idempotent(parts.method.as_str()));
    while let Some(ep) = attempts.next_endpoint().await {
        if !body.replayable() {
            // An earlier attempt streamed more than the copy holds.
            break;
        }
        let attempt = body.attempt(ep.metrics.to_endpoint.clone());
        let req = match upstream_request(&parts, attempt, ep.address, h2, &traceparent) {
            Ok(r) => r,
            Err(e) => {
                return local::response(LocalError::new(Reason::BadRequest, e.to_string()));
            }
        };
        let pool = pool_of(&ep, svc.connect_timeout());
        let client = if h2 { &pool.h2 } else { &pool.h1 };
        let guard = ep.start();
        let start = Instant::now();
        let result = tokio::time::timeout(svc.request_timeout(), client.request(req)).await;
        let failure = match result {
            Ok(Ok(resp)) => {
                let draining_503 = resp.status() == StatusCode::SERVICE_UNAVAILABLE
                    && (ep.draining() || resp.headers().contains_key(DRAINING_HEADER));
                if draining_503 && attempts.retries_draining() {
                    Failure::Draining
                } else {
                    ep.success(start.elapsed());
                    let grpc_error = resp
                        .headers()
                        .get("grpc-status")
                        .is_some_and(|v| v.as_bytes() != b"0");
                    if resp.status().is_server_error() || grpc_error {
                        ep.outcomes.server_error();
                    }
                    return track(resp, guard, &ep);
                }
            }
            Ok(Err(e)) if e.is_connect() => Failure::Connect,
            Ok(Err(e)) => {
                tracing::debug!(endpoint = %ep.address, error = %e, "upstream request failed");
                Failure::Reset
            }
            Err(_) => return local::response(attempts.timed_out(&ep, start.elapsed())),
        };
        attempts.failed(&ep, failure, start.elapsed());
    }
    local::response(attempts.exhausted())
}

/// The response with its body counted and the endpoint held in flight until it ends.
fn track(
    mut resp: Response<Incoming>,
    guard: ActiveGuard,
    ep: &Arc<Endpoint>,
) -> Response<ProxyBody> {
    strip_hop_by_hop(resp.headers_mut());
    resp.map(|b| {
        Tracked {
            inner: b,
            _guard: guard,
            bytes: ep.metrics.to_client.clone(),
        }
        .boxed()
    })
}

struct Tracked {
    inner: Incoming,
    _guard: ActiveGuard,
    bytes: prometheus_client::metrics::counter::Counter,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(f))) = &polled
            && let Some(d) = f.data_ref()
        {
            self.bytes.inc_by(d.len() as u64);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
