//! HTTP/2 to one endpoint on the `h2` crate directly: one connection per endpoint that all
//! requests share, dialed on first use and again once it breaks. It serves the h2c and
//! gRPC requests in place of hyper's pooled client, whose per-request dispatch (a pool
//! checkout, a channel to the connection task, a task spawned per request body) cost
//! 5% of the proxy's CPU per gRPC request (docs/benchmarks.md, "gRPC: the h2 crate
//! directly").
//!
//! A request body that is already complete when its headers go out (a unary call) is
//! written inline; one that is still streaming is written by a task of its own once the
//! response has arrived, so bidirectional streams flow both ways.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::future::{Either, select};
use h2::SendStream;
use h2::client::SendRequest;
use http::{Request, Response};
use hyper::body::Body;

use super::h2_body::{H2Body, pipe};
use super::replay::ReplayBody;
use crate::dial::{DialError, Upstream, dial};
use crate::tunnel::Peer;
use crate::tunnel::h2_stream::keepalive_every;

/// Largest header list the endpoint may send back (as the client-facing server's).
const MAX_HEADER_LIST: u32 = super::server::MAX_HEADER_BYTES as u32;
/// Receive windows, as hyper's client had them: a stream may have 2 MiB in flight and
/// the connection 5 MiB, so one slow reader does not hold the shared connection's window.
const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
const CONNECTION_WINDOW: u32 = 5 * 1024 * 1024;
/// Streams opened before the endpoint's SETTINGS say how many it takes.
const INITIAL_STREAMS: usize = 100;
/// Request data queued per stream before its sender waits.
const SEND_BUFFER: usize = 1024 * 1024;
/// The connection is PINGed this often, and dropped (the next request dials again) when
/// an answer takes longer than [`PING_TIMEOUT`]: a peer gone without a FIN or RST is
/// noticed without waiting for TCP to give up. Generous: a busy endpoint is not a dead one.
const PING_EVERY: Duration = Duration::from_secs(10);
const PING_TIMEOUT: Duration = Duration::from_secs(20);

/// Why a request to the endpoint failed.
#[derive(Debug, thiserror::Error)]
pub enum H2Error {
    /// No connection to the endpoint: nothing was sent.
    #[error("connecting: {0}")]
    Dial(#[from] DialError),
    /// The connection could not start HTTP/2: nothing was sent.
    #[error("HTTP/2 handshake: {0}")]
    Handshake(h2::Error),
    /// The dial this request waited for failed: nothing was sent, and the request goes
    /// on to another endpoint rather than dial again behind the others.
    #[error("the connection to the endpoint just failed")]
    DialFailed,
    /// The endpoint refused the stream before processing it (REFUSED_STREAM, or a
    /// GOAWAY that did not cover it): safe to send again.
    #[error("stream refused: {0}")]
    Refused(h2::Error),
    /// The exchange broke after the request was (perhaps) processed.
    #[error("{0}")]
    Stream(h2::Error),
}

impl H2Error {
    /// Whether the endpoint cannot have acted on the request.
    pub fn nothing_sent(&self) -> bool {
        !matches!(self, H2Error::Stream(_))
    }

    fn of_stream(e: h2::Error) -> Self {
        // The endpoint's GOAWAY fails only the streams above its last stream id, which it
        // never processed (RFC 9113 §6.8), whatever its error code; those it covered and
        // did not finish fail as a broken connection. A GOAWAY h2 sends itself (the
        // endpoint broke the protocol) fails every stream, processed or not.
        let refused =
            e.reason() == Some(h2::Reason::REFUSED_STREAM) || (e.is_go_away() && e.is_remote());
        if refused {
            H2Error::Refused(e)
        } else {
            H2Error::Stream(e)
        }
    }
}

/// The shared HTTP/2 connection to one endpoint.
pub struct H2Upstream {
    addr: SocketAddr,
    via: Option<Arc<Peer>>,
    timeout: Duration,
    /// The connection, with the number of the dial that made it.
    conn: Mutex<Option<(u64, SendRequest<Bytes>)>>,
    /// Held while dialing, so that a burst of requests makes one connection.
    dialing: tokio::sync::Mutex<()>,
    /// Dials finished, successful or not.
    dials: AtomicU64,
}

impl H2Upstream {
    pub fn new(addr: SocketAddr, via: Option<Arc<Peer>>, timeout: Duration) -> Self {
        Self {
            addr,
            via,
            timeout,
            conn: Mutex::new(None),
            dialing: tokio::sync::Mutex::new(()),
            dials: AtomicU64::new(0),
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<(u64, SendRequest<Bytes>)>> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached connection, ready for one more stream; a closed one (GOAWAY, reset, the
    /// endpoint gone) is forgotten.
    async fn cached_ready(&self) -> Option<SendRequest<Bytes>> {
        let (id, send) = self.slot().clone()?;
        match send.ready().await {
            Ok(send) => Some(send),
            Err(_) => {
                let mut slot = self.slot();
                if slot.as_ref().is_some_and(|(i, _)| *i == id) {
                    *slot = None;
                }
                None
            }
        }
    }

    /// A sender ready for one more stream: the shared connection's, or a new
    /// connection's when there is none or it has closed.
    async fn ready(&self) -> Result<SendRequest<Bytes>, H2Error> {
        if let Some(send) = self.cached_ready().await {
            return Ok(send);
        }
        let seen = self.dials.load(Ordering::Acquire);
        let _dialing = self.dialing.lock().await;
        if let Some(send) = self.cached_ready().await {
            return Ok(send);
        }
        if self.dials.load(Ordering::Acquire) != seen {
            // A dial ended while this request waited and left no connection.
            return Err(H2Error::DialFailed);
        }
        // Boxed: the dial's future (a tunnel's TLS handshake among its states) is kilobytes,
        // and every request's future would carry it, copied at each move, for a path taken
        // once per connection.
        let dialed = Box::pin(self.dial()).await;
        let id = self.dials.fetch_add(1, Ordering::AcqRel) + 1;
        let send = dialed?;
        *self.slot() = Some((id, send.clone()));
        send.ready().await.map_err(H2Error::Handshake)
    }

    /// A new connection, driven (and PINGed) by a task of its own.
    async fn dial(&self) -> Result<SendRequest<Bytes>, H2Error> {
        let io = dial(self.addr, self.via.as_ref(), self.timeout).await?;
        let (send, mut conn) = h2::client::Builder::new()
            .max_header_list_size(MAX_HEADER_LIST)
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .initial_max_send_streams(INITIAL_STREAMS)
            .max_send_buffer_size(SEND_BUFFER)
            .enable_push(false)
            .handshake::<Upstream, Bytes>(io)
            .await
            .map_err(H2Error::Handshake)?;
        let addr = self.addr;
        let pings = conn.ping_pong();
        tokio::spawn(async move {
            let ended = match pings {
                Some(pings) => tokio::select! {
                    r = &mut conn => r.err().map(|e| e.to_string()),
                    silent = keepalive_every(pings, PING_EVERY, PING_TIMEOUT) => Some(silent.to_string()),
                },
                None => conn.await.err().map(|e| e.to_string()),
            };
            if let Some(error) = ended {
                tracing::debug!(endpoint = %addr, %error, "upstream HTTP/2 connection ended");
            }
        });
        Ok(send)
    }

    /// Send `req` and wait for the response head; the request body goes on streaming
    /// after it if it has not ended.
    pub async fn request(&self, req: Request<ReplayBody>) -> Result<Response<H2Body>, H2Error> {
        let (parts, body) = req.into_parts();
        let end = body.is_end_stream();
        let mut send = self.ready().await?;
        let (response, stream) = send
            .send_request(Request::from_parts(parts, ()), end)
            // The stream was not opened: nothing reached the endpoint.
            .map_err(H2Error::Refused)?;
        let (response, body_task) = if end {
            (response.await, None)
        } else {
            match select(Box::pin(send_body(body, stream)), response).await {
                Either::Left(((), response)) => (response.await, None),
                // The body streams on behind the response, unless there is none.
                Either::Right((Ok(response), rest)) => {
                    (Ok(response), Some(tokio::spawn(rest).abort_handle()))
                }
                Either::Right((Err(e), _rest)) => (Err(e), None),
            }
        };
        let (parts, recv) = response.map_err(H2Error::of_stream)?.into_parts();
        Ok(Response::from_parts(parts, H2Body::new(recv, body_task)))
    }
}

/// Write the request body to the stream, with HTTP/2 flow control; a client body that
/// fails resets the stream.
async fn send_body(mut body: ReplayBody, mut stream: SendStream<Bytes>) {
    if let Err(e) = pipe(&mut body, &mut stream).await {
        tracing::debug!(error = %e, "request body to the endpoint ended early");
        stream.send_reset(h2::Reason::CANCEL);
    }
}

#[cfg(test)]
mod tests {
    use super::super::replay::{Replay, test_incoming as incoming};
    use super::*;
    use crate::http2::frame;
    use bytes::{Buf, BytesMut};
    use http_body_util::BodyExt;
    use prometheus_client::metrics::counter::Counter;
    use std::sync::atomic::AtomicUsize;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    async fn request() -> Request<ReplayBody> {
        let body = Replay::new(incoming(vec![Bytes::from_static(b"hello")]).await);
        Request::post("http://backend/svc/Call")
            .body(body.attempt(Counter::default()))
            .expect("request")
    }

    /// An endpoint that answers each of `streams` streams per connection with `answer`,
    /// then closes the connection; it counts connections.
    async fn endpoint(
        streams: usize,
        answer: fn(h2::server::SendResponse<Bytes>),
    ) -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let conns = Arc::new(AtomicUsize::new(0));
        let counted = conns.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let Ok(mut conn) = h2::server::handshake(sock).await else {
                        return;
                    };
                    for _ in 0..streams {
                        let Some(Ok((_req, respond))) = conn.accept().await else {
                            return;
                        };
                        answer(respond);
                    }
                    // Close as servers do (GOAWAY), answering streams already on the way.
                    conn.graceful_shutdown();
                    while let Some(Ok((_req, respond))) = conn.accept().await {
                        answer(respond);
                    }
                });
            }
        });
        (addr, conns)
    }

    fn ok(mut respond: h2::server::SendResponse<Bytes>) {
        let _ = respond.send_response(Response::new(()), true);
    }

    fn refuse(mut respond: h2::server::SendResponse<Bytes>) {
        respond.send_reset(h2::Reason::REFUSED_STREAM);
    }

    #[tokio::test]
    async fn a_refused_stream_counts_as_never_sent() {
        let (addr, _) = endpoint(1, refuse).await;
        let up = H2Upstream::new(addr, None, Duration::from_secs(5));
        let Err(err) = up.request(request().await).await else {
            panic!("a refused stream answered");
        };
        assert!(matches!(err, H2Error::Refused(_)), "{err:?}");
        assert!(err.nothing_sent());
    }

    /// A raw HTTP/2 endpoint that answers the first request's HEADERS with `answer` (frames
    /// of its own making) and then waits for the client to close.
    async fn raw_endpoint(answer: fn(&mut BytesMut)) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut out = BytesMut::new();
                    frame::settings(&mut out, &[]);
                    let mut buf = BytesMut::new();
                    while buf.len() < frame::PREFACE.len() {
                        if !matches!(sock.read_buf(&mut buf).await, Ok(n) if n > 0) {
                            return;
                        }
                    }
                    buf.advance(frame::PREFACE.len());
                    loop {
                        while let Some(head) = frame::Head::parse(&buf)
                            && buf.len() >= frame::HEAD_LEN + head.len
                        {
                            buf.advance(frame::HEAD_LEN + head.len);
                            if head.kind == frame::kind::SETTINGS && !head.has(frame::flag::ACK) {
                                frame::settings_ack(&mut out);
                            } else if head.kind == frame::kind::HEADERS {
                                answer(&mut out);
                            }
                        }
                        if sock.write_all(&out).await.is_err() {
                            return;
                        }
                        out.clear();
                        if !matches!(sock.read_buf(&mut buf).await, Ok(n) if n > 0) {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    /// A GOAWAY from the endpoint that does not cover a stream means it never processed
    /// it, whatever the GOAWAY's error code: the request may go again, even a POST.
    #[tokio::test]
    async fn streams_past_the_endpoints_goaway_count_as_never_sent() {
        fn graceful(out: &mut BytesMut) {
            frame::goaway(out, 0, h2::Reason::NO_ERROR);
        }
        fn failing(out: &mut BytesMut) {
            frame::goaway(out, 0, h2::Reason::INTERNAL_ERROR);
        }
        for answer in [graceful as fn(&mut BytesMut), failing] {
            let up = H2Upstream::new(raw_endpoint(answer).await, None, Duration::from_secs(5));
            let Err(err) = up.request(request().await).await else {
                panic!("answered past a GOAWAY");
            };
            assert!(matches!(err, H2Error::Refused(_)), "{err:?}");
            assert!(err.nothing_sent());
        }
    }

    /// When the endpoint breaks the protocol, h2 ends the connection with a GOAWAY of its
    /// own: the streams on it may have been processed and are not sent again.
    #[tokio::test]
    async fn a_connection_h2_ended_for_a_protocol_error_may_have_processed_its_streams() {
        fn broken(out: &mut BytesMut) {
            // A WINDOW_UPDATE of 0 on the connection: a PROTOCOL_ERROR of the connection.
            frame::window_update(out, 0, 0);
        }
        let up = H2Upstream::new(raw_endpoint(broken).await, None, Duration::from_secs(5));
        let Err(err) = up.request(request().await).await else {
            panic!("answered on a broken connection");
        };
        assert!(!err.nothing_sent(), "{err:?}");
    }

    #[tokio::test]
    async fn requests_share_a_connection_and_one_the_endpoint_closed_is_dialed_again() {
        let (addr, conns) = endpoint(2, ok).await;
        let up = H2Upstream::new(addr, None, Duration::from_secs(5));
        for _ in 0..2 {
            let resp = up.request(request().await).await.expect("response");
            assert_eq!(resp.status(), 200);
            resp.into_body().collect().await.expect("body");
        }
        assert_eq!(
            conns.load(Ordering::SeqCst),
            1,
            "two requests, one connection"
        );
        // The endpoint closes after its two streams (GOAWAY): requests are answered on
        // it until it has closed, or fail as never sent, then go to a new connection.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while conns.load(Ordering::SeqCst) < 2 {
            assert!(tokio::time::Instant::now() < deadline, "never dialed again");
            match up.request(request().await).await {
                Ok(resp) => assert_eq!(resp.status(), 200),
                Err(e) => assert!(e.nothing_sent(), "{e:?}"),
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let resp = up.request(request().await).await.map_err(|e| e.to_string());
        assert_eq!(resp.map(|r| r.status()), Ok(http::StatusCode::OK));
    }
}
