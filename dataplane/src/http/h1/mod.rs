//! The lean HTTP/1.1 path: a client connection's requests are parsed in place and
//! forwarded, head rewritten and body passed through, to an endpoint picked per request,
//! over pooled upstream connections that this task drives itself.
//!
//! hyper's server and pooled client cost a task hop, a channel and several allocations
//! per request, and most of the proxy's CPU went there (docs/benchmarks.md). This path
//! keeps the same contract as the hyper path: the same [`Attempts`] (retries, budget,
//! outlier accounting, local errors), draining endpoints get no requests and their idle
//! connections close, `traceparent` and metrics alike. What it does not handle it hands
//! on with the bytes read so far: HTTP/2 with prior knowledge to the h2 server, and to
//! hyper's HTTP/1.0, upgrades, `Expect`, chunked or large request bodies, absolute-form
//! targets, requests without Host.

mod body;
mod head;
mod prefixed;

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use http_body_util::Either;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Sleep;
use tracing::Instrument;

use self::body::{BodyScan, Framing};
use self::head::{RequestHead, Response, ResponseHead, Verdict};
use self::prefixed::Prefixed;
use super::attempts::{Attempts, Failure};
use super::forward;
use super::idle::IdlePool;
use super::local::LocalError;
use super::server::{HEADER_READ_TIMEOUT, MAX_HEADER_BYTES, serve_http};
use super::upstream::pool_of;
use crate::balance::{ActiveGuard, Endpoint};
use crate::deadline::WRITE_TIMEOUT;
use crate::dial::Upstream;
use crate::reason::Reason;
use crate::service::Service;

/// How the HTTP/2 connection preface starts (RFC 9113 §3.4), as far as the parser reads
/// before it hands the connection over for its unknown version.
const H2_PREFACE_START: &[u8] = b"PRI * HTTP/2";
/// Read buffer size, per direction.
const READ_BUF: usize = 16 * 1024;
/// How long a kept-alive client connection may wait for its next request: longer than
/// clients keep idle connections in their pools (hyper and Go: 90 s), so that the client
/// closes first and never sends a request into our close. A new connection gets the
/// header timeout for its first request.
const KEEP_ALIVE_IDLE: Duration = Duration::from_secs(300);

/// The buffers of one client connection, reused by each of its requests.
struct Buffers {
    /// From the client.
    client: BytesMut,
    /// From the upstream.
    upstream: BytesMut,
    /// The request as the upstream gets it.
    request: BytesMut,
    /// The response head (and first body bytes) as the client gets it.
    response: BytesMut,
}

/// What became of one request.
enum Next {
    /// The connection carries on.
    KeepAlive,
    Close,
}

/// Serve a client's HTTP/1.1 connection to `svc`.
pub async fn serve(svc: Arc<Service>, mut client: TcpStream) {
    let mut b = Buffers {
        client: BytesMut::with_capacity(READ_BUF),
        upstream: BytesMut::with_capacity(READ_BUF),
        request: BytesMut::with_capacity(1024),
        response: BytesMut::with_capacity(1024),
    };
    // One request timer per connection, moved later for each attempt: extending a
    // registered timer touches neither the timer wheel nor the driver, where a new
    // timeout per request registered an entry and, when no other timer was pending, woke
    // the driver through its eventfd (a syscall and an extra epoll round).
    let deadline = tokio::time::sleep(svc.request_timeout());
    // The same for the wait between requests.
    let idle = tokio::time::sleep(HEADER_READ_TIMEOUT);
    tokio::pin!(deadline, idle);
    let mut first = true;
    loop {
        let limit = if first {
            HEADER_READ_TIMEOUT
        } else {
            KEEP_ALIVE_IDLE
        };
        first = false;
        let read = read_request(&mut client, &mut b, &svc.name, idle.as_mut(), limit);
        let verdict = match read.await {
            Ok(Some(v)) => v,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(error = %e, "client connection ended");
                return;
            }
        };
        match verdict {
            Verdict::Partial => return,
            Verdict::Reject(e) => {
                svc.metrics.failure(&svc.name, "", e.reason);
                head::local(&e, false, true, &mut b.response);
                let _ = to_client(&mut client, &b.response).await;
                return;
            }
            Verdict::HandOver => {
                // HTTP/2 with prior knowledge (h2c, gRPC) goes to the h2 server; the rest
                // (HTTP/1.0, upgrades, chunked uploads...) to hyper's.
                let h2 = b.client.starts_with(H2_PREFACE_START);
                let io = Prefixed::new(b.client.split().freeze(), client);
                let svc = svc.clone();
                if h2 {
                    super::h2c::serve(svc, io).await;
                } else {
                    serve_http(io, false, move |req| {
                        forward::handle(svc.clone(), req.map(Either::Left))
                    })
                    .await;
                }
                return;
            }
            Verdict::Lean(req) => {
                crate::busy_poll::activity();
                let exchanged = exchange(&svc, &mut client, &mut b, &req, deadline.as_mut());
                // An instrumented future enters and exits its span at every poll, even a
                // disabled one: 1% of the proxy's CPU under load.
                let next = if req.span.is_disabled() {
                    exchanged.await
                } else {
                    exchanged.instrument(req.span.clone()).await
                };
                if matches!(next, Next::Close) {
                    return;
                }
            }
        }
    }
}

/// Read until the buffer holds a whole request head, and the body of a lean request.
/// `None`: the client closed, or sent nothing for `idle_limit`, or not a whole head
/// within the header timeout of its first byte (slowloris).
async fn read_request(
    client: &mut TcpStream,
    b: &mut Buffers,
    service: &str,
    mut idle: Pin<&mut Sleep>,
    idle_limit: Duration,
) -> std::io::Result<Option<Verdict>> {
    let mut deadline = None;
    loop {
        if !b.client.is_empty() {
            match head::request(&b.client, service, &mut b.request) {
                Verdict::Partial if b.client.len() >= MAX_HEADER_BYTES => {
                    return Ok(Some(Verdict::Reject(LocalError::new(
                        Reason::HeadersTooLarge,
                        format!("request head over {MAX_HEADER_BYTES} bytes"),
                    ))));
                }
                Verdict::Partial => {}
                Verdict::Lean(req) if b.client.len() < req.len + req.content_length => {
                    // The body is still coming: read it under the same deadline.
                }
                v => return Ok(Some(v)),
            }
        }
        if b.client.capacity() - b.client.len() < 1024 {
            b.client.reserve(READ_BUF);
        }
        let n = if b.client.is_empty() {
            idle.as_mut()
                .reset(tokio::time::Instant::now() + idle_limit);
            tokio::select! {
                biased;
                read = client.read_buf(&mut b.client) => read?,
                () = idle.as_mut() => return Ok(None),
            }
        } else {
            let at =
                *deadline.get_or_insert_with(|| tokio::time::Instant::now() + HEADER_READ_TIMEOUT);
            match tokio::time::timeout_at(at, client.read_buf(&mut b.client)).await {
                Ok(r) => r?,
                Err(_) => return Ok(None),
            }
        };
        if n == 0 {
            return Ok(None);
        }
    }
}

/// Forward one lean request and its response.
async fn exchange(
    svc: &Service,
    client: &mut TcpStream,
    b: &mut Buffers,
    req: &RequestHead,
    mut deadline: Pin<&mut Sleep>,
) -> Next {
    let body_end = req.len + req.content_length;
    b.request.extend_from_slice(&b.client[req.len..body_end]);
    b.client.advance(body_end);

    let mut attempts = Attempts::new(svc, req.idempotent);
    let picked = loop {
        let Some(ep) = attempts.next_endpoint().await else {
            break Err(attempts.exhausted());
        };
        let pool = pool_of(&ep, svc.connect_timeout()).lean.clone();
        let guard = ep.start();
        ep.metrics.to_endpoint.inc_by(req.content_length as u64);
        let start = Instant::now();
        deadline
            .as_mut()
            .reset(tokio::time::Instant::from_std(start) + svc.request_timeout());
        let due = crate::busy_poll::awaiting_upstream();
        let sent = tokio::select! {
            biased;
            sent = send(&pool, b, req.head_method, req.close) => sent,
            () = deadline.as_mut() => break Err(attempts.timed_out(&ep, start.elapsed())),
        };
        drop(due);
        match sent {
            Err(failure) => attempts.failed(&ep, failure, start.elapsed()),
            Ok((conn, head)) => {
                if head.status == 503
                    && (head.draining || ep.draining())
                    && attempts.retries_draining()
                {
                    attempts.failed(&ep, Failure::Draining, start.elapsed());
                    continue;
                }
                ep.success(start.elapsed());
                if head.status >= 500 {
                    ep.outcomes.server_error();
                }
                break Ok((ep, guard, pool, conn, head));
            }
        }
    };
    match picked {
        Ok((ep, guard, pool, conn, head)) => relay(client, b, &ep, guard, &pool, conn, head).await,
        Err(e) => {
            head::local(&e, req.head_method, req.close, &mut b.response);
            match to_client(client, &b.response).await {
                true if !req.close => Next::KeepAlive,
                _ => Next::Close,
            }
        }
    }
}

/// Write `bytes` to the client; false when it failed or the client read none of it within
/// [`WRITE_TIMEOUT`] (it stopped reading: let it go, and the endpoint with it).
async fn to_client(client: &mut TcpStream, bytes: &[u8]) -> bool {
    matches!(
        tokio::time::timeout(WRITE_TIMEOUT, client.write_all(bytes)).await,
        Ok(Ok(()))
    )
}

/// Send the request in `b.request` on a pooled or new connection and read the response
/// head; on success the client's head is in `b.response` and the upstream's bytes after
/// its head are at the start of `b.upstream`.
async fn send(
    pool: &IdlePool,
    b: &mut Buffers,
    head_method: bool,
    close_client: bool,
) -> Result<(Upstream, ResponseHead), Failure> {
    b.upstream.clear();
    let mut conn = match pool.take() {
        Some(mut c) => match c.write_all(&b.request).await {
            Ok(()) => c,
            // Closed under us between the check and the write: nothing was delivered.
            Err(_) => fresh(pool, &b.request).await?,
        },
        None => fresh(pool, &b.request).await?,
    };
    loop {
        match head::response(&b.upstream, head_method, close_client, &mut b.response) {
            Ok(Response::Complete(head)) => {
                b.upstream.advance(head.len);
                return Ok((conn, head));
            }
            Ok(Response::Informational(n)) => {
                b.upstream.advance(n);
                continue;
            }
            Ok(Response::Partial) if b.upstream.len() < MAX_HEADER_BYTES => {}
            Ok(Response::Partial) => return Err(Failure::Reset),
            Err(e) => {
                tracing::debug!(error = %e, "upstream response");
                return Err(Failure::Reset);
            }
        }
        if b.upstream.capacity() - b.upstream.len() < 1024 {
            b.upstream.reserve(READ_BUF);
        }
        match conn.read_buf(&mut b.upstream).await {
            Ok(0) | Err(_) => return Err(Failure::Reset),
            Ok(_) => {}
        }
    }
}

/// Dial and write the request; a failure here delivered no request.
async fn fresh(pool: &IdlePool, request: &[u8]) -> Result<Upstream, Failure> {
    let mut conn = pool.dial().await.map_err(|e| {
        tracing::debug!(error = %e, "dial");
        Failure::Connect
    })?;
    conn.write_all(request)
        .await
        .map_err(|_| Failure::Connect)?;
    Ok(conn)
}

/// Pass the response on: head, then body as it arrives. The endpoint counts it in flight
/// until the body ends; the connection goes back to the pool if it can carry another.
async fn relay(
    client: &mut TcpStream,
    b: &mut Buffers,
    ep: &Endpoint,
    guard: ActiveGuard,
    pool: &Arc<IdlePool>,
    mut conn: Upstream,
    head: ResponseHead,
) -> Next {
    let mut scan = BodyScan::new(head.framing);
    let Ok((n, mut done)) = scan.take(&b.upstream) else {
        return Next::Close;
    };
    let mut clean = done && n == b.upstream.len();
    b.response.extend_from_slice(&b.upstream[..n]);
    ep.metrics.to_client.inc_by(n as u64);
    if !to_client(client, &b.response).await {
        return Next::Close;
    }
    while !done {
        b.upstream.clear();
        b.upstream.reserve(READ_BUF);
        match conn.read_buf(&mut b.upstream).await {
            Ok(0) if scan.framing() == Framing::UntilClose => break,
            Ok(0) | Err(_) => return Next::Close,
            Ok(_) => {}
        }
        let Ok((n, end)) = scan.take(&b.upstream) else {
            return Next::Close;
        };
        ep.metrics.to_client.inc_by(n as u64);
        if !to_client(client, &b.upstream[..n]).await {
            return Next::Close;
        }
        done = end;
        clean = end && n == b.upstream.len();
    }
    drop(guard);
    if clean && head.reusable && !ep.draining() {
        pool.put(conn);
    }
    if head.close_client {
        let _ = client.shutdown().await;
        Next::Close
    } else {
        Next::KeepAlive
    }
}
