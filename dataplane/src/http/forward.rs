//! The hyper path: a downstream request is sent to an endpoint picked per attempt over
//! that endpoint's connections (hyper's pooled client for HTTP/1.1, the shared HTTP/2
//! connection of [`super::h2_client`]), its body streamed with a copy kept for retries
//! ([`super::replay`]), and its response streamed back with the endpoint held in flight
//! until the body ends.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Either};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use std::net::SocketAddr;
use tracing::Instrument;

use super::attempts::{Attempts, Failure, idempotent};
use super::h2_exchange::H2Body;
use super::headers::{DRAINING_HEADER, HOP_BY_HOP, connection_option, strip_hop_by_hop};
use super::local::{self, BodyError, LocalError, ProxyBody};
use super::replay::{ClientBody, Replay, ReplayBody};
use super::upstream::{Pool, pool_of};
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
    // The client's authority travels on (Host, :authority); the connector dials `addr`.
    let authority = || {
        parts
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
            .unwrap_or_else(|| addr.to_string())
    };
    // An HTTP/2 client's URI already says both (its :scheme and :authority).
    let uri = match (parts.uri.scheme(), parts.uri.authority()) {
        (Some(s), Some(_)) if *s == http::uri::Scheme::HTTP => parts.uri.clone(),
        _ => {
            let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            format!("http://{}{path}", authority()).parse()?
        }
    };
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
        && let Ok(v) = HeaderValue::from_str(&authority())
    {
        headers.insert(header::HOST, v);
    }
    Ok(req)
}

/// Serve one downstream request, from either server, as a span of the client's trace (or
/// a new one). Not an `async fn`: the future is the forwarding's own (or it instrumented),
/// without a state machine around it carrying both, since every request's future is
/// copied as it is boxed and moved.
pub fn handle(
    svc: Arc<Service>,
    req: Request<ClientBody>,
) -> impl Future<Output = Response<ProxyBody>> + Send {
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
    let forwarded = forward(svc, req, ours.header_value());
    // An instrumented future enters and exits its span at every poll, even a disabled
    // one (as on the lean path: 1% of the proxy's CPU under load).
    if span.is_disabled() {
        futures::future::Either::Left(forwarded)
    } else {
        futures::future::Either::Right(forwarded.instrument(span))
    }
}

async fn forward(
    svc: Arc<Service>,
    req: Request<ClientBody>,
    traceparent: HeaderValue,
) -> Response<ProxyBody> {
    let (parts, body) = req.into_parts();
    if parts.method == Method::CONNECT {
        // A tunnel through an HTTP service would outlive every timeout a request has.
        let e = LocalError::new(Reason::Method, "CONNECT is not proxied by an HTTP service");
        svc.metrics.failure(&svc.name, "", e.reason);
        return local::response(e);
    }
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
        let guard = ep.start();
        let start = Instant::now();
        let result = tokio::time::timeout(svc.request_timeout(), send(&pool, h2, req)).await;
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
            Ok(Err(e)) if e.nothing_sent => Failure::Connect,
            Ok(Err(e)) => {
                tracing::debug!(endpoint = %ep.address, error = %e.error, "upstream request failed");
                Failure::Reset
            }
            Err(_) => return local::response(attempts.timed_out(&ep, start.elapsed())),
        };
        attempts.failed(&ep, failure, start.elapsed());
    }
    local::response(attempts.exhausted())
}

/// A response body from either upstream client.
type UpstreamBody = Either<Incoming, H2Body>;

/// Why an attempt got no response head.
struct AttemptError {
    /// Nothing reached the endpoint (no connection, or the stream refused unprocessed).
    nothing_sent: bool,
    error: BodyError,
}

/// One attempt on the endpoint's connections: HTTP/2 on the shared connection, HTTP/1.1
/// through hyper's pool.
async fn send(
    pool: &Pool,
    h2: bool,
    req: Request<ReplayBody>,
) -> Result<Response<UpstreamBody>, AttemptError> {
    if h2 {
        // Poll through the gap until the response head, as the lean HTTP/1.1 path does
        // (`busy_poll`): a worker that sleeps there pays a vCPU wake-up per response.
        let _due = crate::busy_poll::awaiting_upstream();
        match pool.h2.request(req).await {
            Ok(resp) => Ok(resp.map(Either::Right)),
            Err(e) => Err(AttemptError {
                nothing_sent: e.nothing_sent(),
                error: e.into(),
            }),
        }
    } else {
        match pool.h1.request(req).await {
            Ok(resp) => Ok(resp.map(Either::Left)),
            Err(e) => Err(AttemptError {
                nothing_sent: e.is_connect(),
                error: e.into(),
            }),
        }
    }
}

/// The response with its body counted and the endpoint held in flight until it ends.
fn track(
    mut resp: Response<UpstreamBody>,
    guard: ActiveGuard,
    ep: &Arc<Endpoint>,
) -> Response<ProxyBody> {
    // HTTP/2 has no hop-by-hop headers: the h2 crate refuses a response that carries one.
    if resp.version() != Version::HTTP_2 {
        strip_hop_by_hop(resp.headers_mut());
    }
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
    inner: UpstreamBody,
    _guard: ActiveGuard,
    bytes: prometheus_client::metrics::counter::Counter,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn future_size<A, B, F: Future>(_: fn(A, B) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// Every request's future is boxed when its stream opens and moved as it is built, so
    /// its size is copied per request: 6.3 KB while the HTTP/2 dial's states sat in it and
    /// the span wrapper held a second copy of the forwarding's (docs/benchmarks.md).
    #[test]
    fn a_requests_future_stays_small() {
        let size = future_size(handle);
        assert!(size <= 3 * 1024, "handle's future is {size} bytes");
    }
}
