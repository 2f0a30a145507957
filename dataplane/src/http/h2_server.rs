//! The client-facing HTTP/2 server of h2c and gRPC services, on the `h2` crate directly.
//!
//! hyper's server spawned a task per stream and wrapped each request and response in its
//! service and body plumbing; gRPC through the proxy cost 1.3–1.7× HAProxy's CPU per
//! request, most of it there and in the upstream client (docs/benchmarks.md). Here a
//! connection's streams are futures of the connection's own task, polled only when woken:
//! no task per stream, and a stream's response is written in the same wake-up as the
//! connection's frames. The cost: a connection's streams share one worker of the runtime
//! (hyper spread them over all); a gRPC channel is one connection, so it gets one core.
//! The limits are those of [`super::server`]: header list size, rapid-reset floods, a
//! write deadline toward clients that stop reading, and a client must finish the HTTP/2
//! preface within [`HEADER_READ_TIMEOUT`].

use std::future::Future;
use std::pin::pin;
use std::task::Poll;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use h2::server::SendResponse;
use http::header::{self, HeaderValue};
use http::{Request, Response};
use hyper::body::Body;
use tokio::io::{AsyncRead, AsyncWrite};

use super::h2_body::{H2Body, pipe};
use super::local::ProxyBody;
use super::server::{HEADER_READ_TIMEOUT, MAX_HEADER_BYTES};
use crate::deadline::{WRITE_TIMEOUT, WriteDeadline};

/// Streams a client may have open at once (as hyper's server had it here).
const MAX_CONCURRENT_STREAMS: u32 = 1024;
/// Receive windows, 1 MiB per stream and per connection, and the send buffer per
/// stream, 400 KiB: hyper's server defaults. A stream whose endpoint stops reading does
/// not hold the connection's window from the streams beside it
/// (`tests/h2_streams.rs`).
const STREAM_WINDOW: u32 = 1024 * 1024;
const CONNECTION_WINDOW: u32 = 1024 * 1024;
const SEND_BUFFER: usize = 400 * 1024;
/// CVE-2023-44487 (rapid reset): a client that resets streams faster than they are
/// served, or makes the proxy reset too many, gets GOAWAY.
const MAX_PENDING_ACCEPT_RESETS: usize = 64;
const MAX_LOCAL_ERROR_RESETS: usize = 256;

/// Serve HTTP/2 (prior knowledge) on `stream`, each request answered by `handler`.
pub async fn serve<I, F, Fut>(stream: I, handler: F)
where
    I: AsyncRead + AsyncWrite + Unpin,
    F: Fn(Request<H2Body>) -> Fut,
    Fut: Future<Output = Response<ProxyBody>>,
{
    let handshake = h2::server::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_send_buffer_size(SEND_BUFFER)
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .max_header_list_size(MAX_HEADER_BYTES as u32)
        .max_pending_accept_reset_streams(MAX_PENDING_ACCEPT_RESETS)
        .max_local_error_reset_streams(Some(MAX_LOCAL_ERROR_RESETS))
        .handshake::<_, Bytes>(WriteDeadline::new(stream, WRITE_TIMEOUT));
    let mut conn = match tokio::time::timeout(HEADER_READ_TIMEOUT, handshake).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "client HTTP/2 handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!("client sent no HTTP/2 preface in time");
            return;
        }
    };
    let mut streams = FuturesUnordered::new();
    loop {
        // The streams woken since the last turn, then the connection: its frames in and
        // out, and the next new stream.
        let accepted = std::future::poll_fn(|cx| {
            while let Poll::Ready(Some(())) = streams.poll_next_unpin(cx) {}
            conn.poll_accept(cx)
        })
        .await;
        match accepted {
            Some(Ok((req, respond))) => {
                let req = req.map(|recv| H2Body::new(recv, None));
                streams.push(answer(handler(req), respond));
            }
            Some(Err(e)) => {
                tracing::debug!(error = %e, "client HTTP/2 connection ended with an error");
                return;
            }
            // Closed, every stream answered.
            None => return,
        }
    }
}

/// Answer one stream with the response `handling` makes, unless the client resets the
/// stream first (then `handling` is dropped, and with it the request to the endpoint).
async fn answer<Fut>(handling: Fut, mut respond: SendResponse<Bytes>)
where
    Fut: Future<Output = Response<ProxyBody>>,
{
    let mut handling = pin!(handling);
    let mut started = false;
    let response = std::future::poll_fn(|cx| {
        // A stream the client reset before it was accepted (HEADERS and RST_STREAM in one
        // read) sends nothing to the endpoint.
        if !started && respond.poll_reset(cx).is_ready() {
            return Poll::Ready(None);
        }
        started = true;
        if let Poll::Ready(r) = handling.as_mut().poll(cx) {
            return Poll::Ready(Some(r));
        }
        // Asked only while waiting: poll_reset takes the connection's lock.
        respond.poll_reset(cx).map(|_| None)
    })
    .await;
    let Some(response) = response else {
        tracing::debug!("client reset the stream before its response");
        return;
    };
    let (mut head, mut body) = response.into_parts();
    // HTTP/2 has no connection-specific headers (RFC 9113 §8.2.2): the handler's
    // responses come without them (`forward` strips an endpoint's; were one left, h2
    // would refuse the head and the stream be reset below). TE belongs in requests only.
    head.headers.remove(header::TE);
    let end = body.is_end_stream();
    if !end && let Some(len) = body.size_hint().exact() {
        head.headers
            .entry(header::CONTENT_LENGTH)
            .or_insert_with(|| HeaderValue::from(len));
    }
    let mut send = match respond.send_response(Response::from_parts(head, ()), end) {
        Ok(send) => send,
        Err(e) => {
            tracing::debug!(error = %e, "response head refused");
            respond.send_reset(h2::Reason::INTERNAL_ERROR);
            return;
        }
    };
    if end {
        return;
    }
    if let Err(e) = pipe(&mut body, &mut send).await {
        tracing::debug!(error = %e, "response to the client ended early");
        send.send_reset(e.reset_reason());
    }
}
