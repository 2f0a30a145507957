//! L7: HTTP/1.1 and HTTP/2 (gRPC included) balanced per request over pooled upstream
//! connections.
//!
//! A request that could not reach an endpoint (connect error, or refused before any byte
//! was sent) is retried on another one whatever its method; an idempotent request is also
//! retried after a reset or a 503 from a draining endpoint. Retries spend a budget so an
//! outage cannot multiply load ([`attempts`]).
//!
//! Plain HTTP/1.1 requests take [`h1`], a lean path that forwards heads and bodies
//! between sockets; this module's hyper path serves HTTP/2, gRPC and the HTTP/1.1
//! requests the lean path hands over (upgrades, chunked uploads, large bodies).

pub mod attempts;
pub mod h1;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Version};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use crate::balance::{ActiveGuard, Endpoint};
use crate::dial::Upstream;
use crate::service::Service;
use crate::trace::{TRACEPARENT, TraceParent};
use crate::tunnel::pool::Peer;
use attempts::{Attempts, Failure, LocalError, idempotent};
use tracing::Instrument;

/// Largest request body buffered for retries.
pub const MAX_BODY: usize = 4 * 1024 * 1024;
/// A response header by which an endpoint says it is draining (its 503 is retried).
pub const DRAINING_HEADER: &str = "x-sluice-draining";
/// How long an idle upstream connection is kept.
const POOL_IDLE: Duration = Duration::from_secs(30);

/// Dials one endpoint (directly or through its cluster's gateway) whatever the request's
/// authority says: requests keep the client's authority (Host, :authority) while
/// connections go to the endpoint picked.
#[derive(Clone)]
pub struct EndpointConnector {
    addr: SocketAddr,
    via: Option<Arc<Peer>>,
    timeout: Duration,
}

type Connecting = Pin<Box<dyn Future<Output = Result<TokioIo<Upstream>, std::io::Error>> + Send>>;

impl tower_service::Service<http::Uri> for EndpointConnector {
    type Response = TokioIo<Upstream>;
    type Error = std::io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Uri) -> Self::Future {
        Box::pin(crate::dial::dial_for_pool(
            self.addr,
            self.via.clone(),
            self.timeout,
        ))
    }
}

type UpstreamClient = Client<EndpointConnector, Full<Bytes>>;

/// Upstream connection pools of one endpoint: hyper's per HTTP version, and the lean
/// HTTP/1.1 path's idle connections.
#[derive(Clone)]
pub struct Pool {
    h1: UpstreamClient,
    h2: UpstreamClient,
    lean: Arc<h1::IdlePool>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pool")
    }
}

impl Pool {
    fn new(addr: SocketAddr, via: Option<Arc<Peer>>, timeout: Duration) -> Self {
        let connector = EndpointConnector {
            addr,
            via: via.clone(),
            timeout,
        };
        let h1 = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE)
            .pool_timer(TokioTimer::new())
            .build(connector.clone());
        let h2 = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE)
            .pool_timer(TokioTimer::new())
            .http2_only(true)
            .build(connector);
        let lean = Arc::new(h1::IdlePool::new(addr, via, timeout, POOL_IDLE));
        Self { h1, h2, lean }
    }
}

fn pool_of(ep: &Endpoint, connect_timeout: Duration) -> Pool {
    if let Ok(p) = ep.pool.read()
        && let Some(p) = p.as_ref()
    {
        return p.clone();
    }
    let mut w = ep.pool.write().unwrap_or_else(|p| p.into_inner());
    w.get_or_insert_with(|| Pool::new(ep.address, ep.via.clone(), connect_timeout))
        .clone()
}

/// The lean path's idle connections to `ep`.
pub fn idle_pool_of(ep: &Endpoint, connect_timeout: Duration) -> Arc<h1::IdlePool> {
    if let Ok(p) = ep.pool.read()
        && let Some(p) = p.as_ref()
    {
        return p.lean.clone();
    }
    pool_of(ep, connect_timeout).lean
}

pub type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// A locally generated response (errors).
pub fn local(e: LocalError) -> Response<ProxyBody> {
    let body = Full::new(Bytes::from(e.detail + "\n"))
        .map_err(|never: Infallible| match never {})
        .boxed();
    let mut r = Response::new(body);
    *r.status_mut() = e.status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r.headers_mut().insert(
        HeaderName::from_static("x-sluice-error"),
        HeaderValue::from_static(e.reason),
    );
    r
}

/// Hop-by-hop headers, never forwarded (RFC 9110 §7.6.1).
pub const HOP_BY_HOP: [HeaderName; 5] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Whether the comma-separated header `value` lists `token` (ASCII case-insensitive).
pub(crate) fn lists_token(value: &[u8], token: &str) -> bool {
    value
        .split(|b| *b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

/// Whether the header `name` is a connection option: named in a `Connection` header, so
/// meant for this hop only and never forwarded (RFC 9110 §7.6.1).
pub(crate) fn connection_option<'a>(
    connection: impl IntoIterator<Item = &'a [u8]>,
    name: &str,
) -> bool {
    connection.into_iter().any(|v| lists_token(v, name))
}

/// Drop a response's hop-by-hop headers, those named in its `Connection` included.
fn strip_hop_by_hop(headers: &mut http::HeaderMap) {
    let options: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .filter_map(|t| HeaderName::from_bytes(t.trim_ascii()).ok())
        .collect();
    for name in HOP_BY_HOP.iter().chain(&options) {
        headers.remove(name);
    }
}

/// The request for one attempt on `addr`.
fn upstream_request(
    parts: &http::request::Parts,
    body: &Bytes,
    addr: SocketAddr,
    h2: bool,
    traceparent: &HeaderValue,
) -> Result<Request<Full<Bytes>>, http::Error> {
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
        .body(Full::new(body.clone()))?;
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
    if body.size_hint().lower() > MAX_BODY as u64 {
        svc.metrics.failure(&svc.name, "", "bad_request");
        return local(LocalError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("request body over {MAX_BODY} bytes"),
        ));
    }
    let body = match Limited::new(body, MAX_BODY).collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => {
            let too_big = e
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some();
            svc.metrics.failure(&svc.name, "", "bad_request");
            return if too_big {
                local(LocalError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body_too_large",
                    format!("request body over {MAX_BODY} bytes"),
                ))
            } else {
                local(LocalError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    format!("reading the request body: {e}"),
                ))
            };
        }
    };
    let h2 = svc.upstream_h2(parts.version);
    let mut attempts = Attempts::new(&svc, idempotent(parts.method.as_str()));
    while let Some(ep) = attempts.next_endpoint() {
        let req = match upstream_request(&parts, &body, ep.address, h2, &traceparent) {
            Ok(r) => r,
            Err(e) => {
                return local(LocalError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    e.to_string(),
                ));
            }
        };
        let pool = pool_of(&ep, svc.connect_timeout());
        let client = if h2 { &pool.h2 } else { &pool.h1 };
        let guard = ep.start();
        ep.metrics.to_endpoint.inc_by(body.len() as u64);
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
                    return track(resp, guard, &ep);
                }
            }
            Ok(Err(e)) if e.is_connect() => Failure::Connect,
            Ok(Err(e)) => {
                tracing::debug!(endpoint = %ep.address, error = %e, "upstream request failed");
                Failure::Reset
            }
            Err(_) => return local(attempts.timed_out(&ep, start.elapsed())),
        };
        attempts.failed(&ep, failure, start.elapsed());
    }
    local(attempts.exhausted())
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
