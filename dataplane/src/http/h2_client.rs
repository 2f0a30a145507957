//! HTTP/2 to one endpoint: one connection per endpoint that all requests share, dialed
//! on first use and again once it closes. It serves the h2c and gRPC requests on the
//! proxy's own framing ([`super::h2_upstream_conn`]), in place of the `h2` crate's
//! client (22% of the proxy's CPU under gRPC load) and, before it, hyper's pooled
//! client (docs/benchmarks.md, "gRPC: the h2 crate directly").

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};

use super::h2_exchange::{ConnShared, Exchange, Submit};
pub use super::h2_exchange::{H2Body, H2Error, StreamError};
use super::h2_upstream_conn::{Keepalive, start};
use super::replay::ReplayBody;
use crate::dial::dial;
use crate::tunnel::Peer;

/// The shared HTTP/2 connection to one endpoint.
pub struct H2Upstream {
    addr: SocketAddr,
    via: Option<Arc<Peer>>,
    timeout: Duration,
    keepalive: Keepalive,
    /// The connection, with the number of the dial that made it.
    conn: Mutex<Option<(u64, Arc<ConnShared>)>>,
    /// Held while dialing, so that a burst of requests makes one connection.
    dialing: tokio::sync::Mutex<()>,
    /// Dials finished, successful or not.
    dials: AtomicU64,
}

impl H2Upstream {
    pub fn new(addr: SocketAddr, via: Option<Arc<Peer>>, timeout: Duration) -> Self {
        Self::with_keepalive(addr, via, timeout, Keepalive::default())
    }

    /// As [`H2Upstream::new`], PINGing as `keepalive` says.
    pub fn with_keepalive(
        addr: SocketAddr,
        via: Option<Arc<Peer>>,
        timeout: Duration,
        keepalive: Keepalive,
    ) -> Self {
        Self {
            addr,
            via,
            timeout,
            keepalive,
            conn: Mutex::new(None),
            dialing: tokio::sync::Mutex::new(()),
            dials: AtomicU64::new(0),
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<(u64, Arc<ConnShared>)>> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached connection if it still takes requests; a closed one is forgotten.
    fn cached(&self) -> Option<Arc<ConnShared>> {
        let mut slot = self.slot();
        match &*slot {
            Some((_, conn)) if !conn.is_closed() => Some(conn.clone()),
            Some(_) => {
                *slot = None;
                None
            }
            None => None,
        }
    }

    /// The shared connection, or a new one when there is none or it has closed.
    async fn ready(&self) -> Result<Arc<ConnShared>, H2Error> {
        if let Some(conn) = self.cached() {
            return Ok(conn);
        }
        let seen = self.dials.load(Ordering::Acquire);
        let _dialing = self.dialing.lock().await;
        if let Some(conn) = self.cached() {
            return Ok(conn);
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
        let conn = dialed?;
        *self.slot() = Some((id, conn.clone()));
        Ok(conn)
    }

    /// A new connection, driven (and PINGed) by a task of its own.
    async fn dial(&self) -> Result<Arc<ConnShared>, H2Error> {
        let io = dial(self.addr, self.via.as_ref(), self.timeout).await?;
        start(io, self.addr, self.keepalive)
            .await
            .map_err(H2Error::Handshake)
    }

    /// Send `req` and wait for the response head; the request body goes on streaming
    /// after it if it has not ended. Dropped before the head, the stream is reset (or
    /// never sent).
    pub async fn request(&self, req: Request<ReplayBody>) -> Result<Response<H2Body>, H2Error> {
        let (parts, body) = req.into_parts();
        let exchange = Exchange::new();
        let mut sub = Submit {
            parts,
            body,
            exchange: exchange.clone(),
        };
        // A connection that closed since it was looked up gives the request back: once
        // more on a fresh one.
        let mut tries = 0;
        let conn = loop {
            let conn = self.ready().await?;
            match conn.submit(sub) {
                Ok(()) => break conn,
                Err(back) if tries == 0 => {
                    tries += 1;
                    sub = back;
                }
                Err(_) => {
                    return Err(H2Error::Refused(StreamError::Closed(
                        "the connection closed as the request was sent",
                    )));
                }
            }
        };
        let mut waiting = Waiting {
            exchange,
            conn,
            armed: true,
        };
        let head = std::future::poll_fn(|cx| waiting.exchange.poll_head(cx)).await;
        waiting.armed = false;
        head
    }
}

impl Drop for H2Upstream {
    /// The endpoint is gone from the configuration: its connection ends once the
    /// requests on it have.
    fn drop(&mut self) {
        if let Some((_, conn)) = self.slot().take() {
            conn.retire();
        }
    }
}

/// A request waiting for its head: dropped before it came, it cancels the stream.
struct Waiting {
    exchange: Arc<Exchange>,
    conn: Arc<ConnShared>,
    armed: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.armed
            && let Some(id) = self.exchange.cancel()
        {
            self.conn.cancel(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::replay::{Replay, test_incoming as incoming};
    use super::*;
    use crate::http2::{frame, hpack};
    use bytes::{Buf, Bytes, BytesMut};
    use http_body_util::BodyExt;
    use hyper::body::Body;
    use prometheus_client::metrics::counter::Counter;
    use std::sync::Mutex;
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

    /// What a scripted endpoint saw: every frame after the preface, per connection in
    /// order, and how many connections it accepted and saw end.
    #[derive(Default)]
    struct Seen {
        frames: Mutex<Vec<(frame::Head, Bytes)>>,
        accepted: AtomicUsize,
        ended: AtomicUsize,
    }

    impl Seen {
        fn has(&self, f: impl Fn(&frame::Head, &[u8]) -> bool) -> bool {
            self.frames.lock().unwrap().iter().any(|(h, p)| f(h, p))
        }

        async fn wait_for(&self, what: &str, f: impl Fn(&frame::Head, &[u8]) -> bool) {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
            while !self.has(&f) {
                assert!(tokio::time::Instant::now() < deadline, "never saw {what}");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }

    /// Answers a frame with frames of its own (one per connection, so HPACK state is
    /// the connection's).
    type Script = Box<dyn FnMut(&frame::Head, &[u8], &mut BytesMut) + Send>;

    /// A raw HTTP/2 endpoint: SETTINGS `settings` first, then each frame read goes to a
    /// fresh `script()` per connection, and what it writes goes out.
    async fn scripted(
        settings: &'static [(u16, u32)],
        script: fn() -> Script,
    ) -> (SocketAddr, Arc<Seen>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Seen::default());
        let all = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                all.accepted.fetch_add(1, Ordering::SeqCst);
                let seen = all.clone();
                tokio::spawn(async move {
                    let mut answer = script();
                    let mut out = BytesMut::new();
                    frame::settings(&mut out, settings);
                    let mut buf = BytesMut::new();
                    let mut preface = false;
                    loop {
                        if sock.write_all(&out).await.is_err() {
                            break;
                        }
                        out.clear();
                        if !matches!(sock.read_buf(&mut buf).await, Ok(n) if n > 0) {
                            break;
                        }
                        if !preface {
                            if buf.len() < frame::PREFACE.len() {
                                continue;
                            }
                            buf.advance(frame::PREFACE.len());
                            preface = true;
                        }
                        while let Some(head) = frame::Head::parse(&buf)
                            && buf.len() >= frame::HEAD_LEN + head.len
                        {
                            buf.advance(frame::HEAD_LEN);
                            let payload = buf.split_to(head.len).freeze();
                            if head.kind == frame::kind::SETTINGS && !head.has(frame::flag::ACK) {
                                frame::settings_ack(&mut out);
                            }
                            answer(&head, &payload, &mut out);
                            seen.frames.lock().unwrap().push((head, payload));
                        }
                    }
                    seen.ended.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        (addr, seen)
    }

    /// Whether a frame ends the request on its stream.
    fn ends_request(head: &frame::Head) -> bool {
        matches!(head.kind, frame::kind::HEADERS | frame::kind::DATA)
            && head.has(frame::flag::END_STREAM)
    }

    /// A response head with `fields` after `:status: 200`.
    fn head_block(e: &mut hpack::Encoder, fields: &[(&'static str, &'static str)]) -> BytesMut {
        let mut block = BytesMut::new();
        e.begin(&mut block);
        e.status(&mut block, 200);
        for (n, v) in fields {
            e.header(
                &mut block,
                &http::HeaderName::from_static(n),
                &http::HeaderValue::from_static(v),
            );
        }
        block
    }

    /// Answers each request, once it ended, with a trailers-only 200.
    fn answer_ok() -> Script {
        let mut e = hpack::Encoder::default();
        Box::new(move |head, _, out| {
            if ends_request(head) {
                let block = head_block(&mut e, &[("grpc-status", "0")]);
                frame::headers(out, head.stream, &block, true, 16_384);
            }
        })
    }

    #[tokio::test]
    async fn the_endpoints_stream_limit_is_kept() {
        static OPEN: AtomicUsize = AtomicUsize::new(0);
        static MOST: AtomicUsize = AtomicUsize::new(0);
        fn one_at_a_time() -> Script {
            let mut e = hpack::Encoder::default();
            Box::new(move |head, _, out| {
                if head.kind == frame::kind::HEADERS {
                    let open = OPEN.fetch_add(1, Ordering::SeqCst) + 1;
                    MOST.fetch_max(open, Ordering::SeqCst);
                }
                if ends_request(head) {
                    OPEN.fetch_sub(1, Ordering::SeqCst);
                    let block = head_block(&mut e, &[]);
                    frame::headers(out, head.stream, &block, true, 16_384);
                }
            })
        }
        let (addr, seen) = scripted(
            &[(frame::setting::MAX_CONCURRENT_STREAMS, 1)],
            one_at_a_time,
        )
        .await;
        let up = H2Upstream::new(addr, None, Duration::from_secs(5));
        // The first answer comes after the endpoint's SETTINGS: its limit is known.
        let first = up.request(request().await).await.expect("first");
        assert_eq!(first.status(), 200);
        let (a, b, c) = tokio::join!(
            async { up.request(request().await).await },
            async { up.request(request().await).await },
            async { up.request(request().await).await },
        );
        for r in [a, b, c] {
            assert_eq!(r.expect("answered").status(), 200);
        }
        assert_eq!(MOST.load(Ordering::SeqCst), 1, "two streams open at once");
        assert_eq!(seen.accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_request_body_waits_for_the_endpoints_window() {
        static OVERRUN: AtomicUsize = AtomicUsize::new(0);
        static RECEIVED: AtomicUsize = AtomicUsize::new(0);
        fn small_window() -> Script {
            let mut e = hpack::Encoder::default();
            let mut stream_windows = std::collections::HashMap::<u32, i64>::new();
            let mut conn_window: i64 = 65_535;
            Box::new(move |head, _, out| {
                if head.kind == frame::kind::DATA {
                    let n = head.len as i64;
                    let stream_window = stream_windows.entry(head.stream).or_insert(100);
                    *stream_window -= n;
                    conn_window -= n;
                    if *stream_window < 0 || conn_window < 0 {
                        OVERRUN.fetch_add(1, Ordering::SeqCst);
                    }
                    RECEIVED.fetch_add(head.len, Ordering::SeqCst);
                    if n > 0 {
                        // Give back a little at a time.
                        frame::window_update(out, head.stream, n as u32);
                        frame::window_update(out, 0, n as u32);
                        *stream_windows.entry(head.stream).or_insert(100) += n;
                        conn_window += n;
                    }
                }
                if ends_request(head) {
                    let block = head_block(&mut e, &[]);
                    frame::headers(out, head.stream, &block, true, 16_384);
                }
            })
        }
        let (addr, _) = scripted(&[(frame::setting::INITIAL_WINDOW_SIZE, 100)], small_window).await;
        let up = H2Upstream::new(addr, None, Duration::from_secs(5));
        // The first answer comes after the endpoint's SETTINGS: its window is known.
        assert_eq!(
            up.request(request().await).await.expect("first").status(),
            200
        );
        let big = Bytes::from(vec![7u8; 200 * 1024]);
        let body = Replay::new(incoming(vec![big]).await);
        let req = Request::post("http://backend/upload")
            .body(body.attempt(Counter::default()))
            .expect("request");
        let resp = tokio::time::timeout(Duration::from_secs(30), up.request(req))
            .await
            .expect("in time")
            .expect("answered");
        assert_eq!(resp.status(), 200);
        assert_eq!(RECEIVED.load(Ordering::SeqCst), 5 + 200 * 1024);
        assert_eq!(OVERRUN.load(Ordering::SeqCst), 0, "DATA past the window");
    }

    #[tokio::test]
    async fn a_dropped_request_or_response_resets_its_stream() {
        fn head_then_silence() -> Script {
            let mut e = hpack::Encoder::default();
            Box::new(move |head, _, out| {
                // Stream 1 gets no answer; stream 3 a head and some of its body.
                if ends_request(head) && head.stream == 3 {
                    let block = head_block(&mut e, &[]);
                    frame::headers(out, 3, &block, false, 16_384);
                    frame::data(out, 3, b"part", false);
                }
            })
        }
        let (addr, seen) = scripted(&[], head_then_silence).await;
        let up = H2Upstream::new(addr, None, Duration::from_secs(5));
        let waited =
            tokio::time::timeout(Duration::from_millis(200), up.request(request().await)).await;
        assert!(waited.is_err(), "stream 1 was answered");
        let cancel = |id: u32| {
            move |h: &frame::Head, p: &[u8]| {
                h.kind == frame::kind::RST_STREAM
                    && h.stream == id
                    && frame::u32_at(p) == Some(u32::from(h2::Reason::CANCEL))
            }
        };
        seen.wait_for("CANCEL on stream 1", cancel(1)).await;
        let mut resp = up
            .request(request().await)
            .await
            .expect("stream 3 answered");
        let part = resp
            .body_mut()
            .frame()
            .await
            .expect("a frame")
            .expect("data");
        assert_eq!(part.into_data().expect("data"), "part");
        assert!(!seen.has(cancel(3)));
        drop(resp);
        seen.wait_for("CANCEL on stream 3", cancel(3)).await;
        // A request cancelled before its stream was opened never leaves: nothing else
        // but the two streams' frames went out.
        assert!(!seen.has(|h, _| h.stream > 3));
    }

    #[tokio::test]
    async fn trailers_only_responses_end_at_their_head_even_in_continuations() {
        fn continued() -> Script {
            let mut e = hpack::Encoder::default();
            Box::new(move |head, _, out| {
                if ends_request(head) {
                    let block = head_block(
                        &mut e,
                        &[("content-type", "application/grpc"), ("grpc-status", "0")],
                    );
                    // A block in frames of 5 bytes: HEADERS and CONTINUATIONs.
                    frame::headers(out, head.stream, &block, true, 5);
                }
            })
        }
        let (addr, _) = scripted(&[], continued).await;
        let up = H2Upstream::new(addr, None, Duration::from_secs(5));
        for _ in 0..3 {
            let resp = up.request(request().await).await.expect("answered");
            assert_eq!(resp.headers()["grpc-status"], "0");
            assert!(resp.body().is_end_stream());
            assert_eq!(resp.body().size_hint().exact(), None);
        }
    }

    #[tokio::test]
    async fn a_silent_endpoint_is_left_and_the_next_request_dials_again() {
        let (addr, seen) = scripted(&[], answer_ok).await;
        let keepalive = Keepalive {
            every: Duration::from_millis(50),
            timeout: Duration::from_millis(200),
        };
        let up = H2Upstream::with_keepalive(addr, None, Duration::from_secs(5), keepalive);
        assert_eq!(
            up.request(request().await)
                .await
                .expect("answered")
                .status(),
            200
        );
        seen.wait_for("a PING", |h, _| {
            h.kind == frame::kind::PING && !h.has(frame::flag::ACK)
        })
        .await;
        // The script never answers PINGs: the connection is dropped.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while seen.ended.load(Ordering::SeqCst) == 0 {
            assert!(tokio::time::Instant::now() < deadline, "never dropped");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            up.request(request().await)
                .await
                .expect("answered")
                .status(),
            200
        );
        assert_eq!(seen.accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn pings_answered_keep_the_connection() {
        fn answers_pings() -> Script {
            let mut ok = answer_ok();
            Box::new(move |head, payload, out| {
                if head.kind == frame::kind::PING && !head.has(frame::flag::ACK) {
                    frame::ping_ack(out, payload);
                }
                ok(head, payload, out);
            })
        }
        let (addr, seen) = scripted(&[], answers_pings).await;
        let keepalive = Keepalive {
            every: Duration::from_millis(20),
            timeout: Duration::from_millis(2000),
        };
        let up = H2Upstream::with_keepalive(addr, None, Duration::from_secs(5), keepalive);
        assert_eq!(
            up.request(request().await)
                .await
                .expect("answered")
                .status(),
            200
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while seen
            .frames
            .lock()
            .unwrap()
            .iter()
            .filter(|(h, _)| h.kind == frame::kind::PING)
            .count()
            < 3
        {
            assert!(tokio::time::Instant::now() < deadline, "fewer than 3 PINGs");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            up.request(request().await)
                .await
                .expect("answered")
                .status(),
            200
        );
        assert_eq!(seen.accepted.load(Ordering::SeqCst), 1);
        assert_eq!(seen.ended.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_removed_endpoints_connection_says_goaway_and_closes() {
        let (addr, seen) = scripted(&[], answer_ok).await;
        let up = H2Upstream::new(addr, None, Duration::from_secs(5));
        assert_eq!(
            up.request(request().await)
                .await
                .expect("answered")
                .status(),
            200
        );
        drop(up);
        seen.wait_for("GOAWAY", |h, _| h.kind == frame::kind::GOAWAY)
            .await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while seen.ended.load(Ordering::SeqCst) == 0 {
            assert!(tokio::time::Instant::now() < deadline, "never closed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A request whose HEADERS carry `te: trailers` and no connection header.
    #[tokio::test]
    async fn request_heads_carry_te_trailers_and_no_connection_headers() {
        fn decodes() -> Script {
            let mut d = hpack::Decoder::default();
            let mut ok = answer_ok();
            Box::new(move |head, payload, out| {
                if head.kind == frame::kind::HEADERS {
                    let mut fields = Vec::new();
                    d.decode(&Bytes::copy_from_slice(payload), &mut fields, usize::MAX)
                        .expect("decodes");
                    let (parts, _) =
                        super::super::h2_head::request(&mut fields).expect("well-formed");
                    assert_eq!(parts.uri, "http://backend/svc/Call");
                    assert_eq!(parts.headers["te"], "trailers");
                    assert!(!parts.headers.contains_key("connection"));
                    assert!(!parts.headers.contains_key("host"));
                }
                ok(head, payload, out);
            })
        }
        let (addr, _) = scripted(&[], decodes).await;
        let up = H2Upstream::new(addr, None, Duration::from_secs(5));
        for _ in 0..2 {
            let body = Replay::new(incoming(vec![Bytes::from_static(b"x")]).await);
            let req = Request::post("http://backend/svc/Call")
                .header("te", "trailers")
                .header("host", "backend")
                .body(body.attempt(Counter::default()))
                .expect("request");
            assert_eq!(up.request(req).await.expect("answered").status(), 200);
        }
    }

    /// A stream whose request has ended is not driven again when the endpoint's SETTINGS
    /// or WINDOW_UPDATE open its window: a second END_STREAM on it is a PROTOCOL_ERROR
    /// that ends the endpoint's connection (found under churn, on fresh connections).
    #[tokio::test]
    async fn an_ended_request_sends_nothing_more_when_its_window_opens() {
        /// Stream 1's window opens after its request ended; it is answered only with
        /// stream 3, so it stays open meanwhile.
        fn open_windows_late() -> Script {
            let mut e = hpack::Encoder::default();
            Box::new(move |head, _, out| {
                if ends_request(head) && head.stream == 1 {
                    frame::settings(out, &[(frame::setting::INITIAL_WINDOW_SIZE, 1 << 20)]);
                    frame::window_update(out, 1, 1000);
                }
                if ends_request(head) && head.stream == 3 {
                    for id in [1, 3] {
                        let block = head_block(&mut e, &[("grpc-status", "0")]);
                        frame::headers(out, id, &block, true, 16_384);
                    }
                }
            })
        }
        let (addr, seen) = scripted(&[], open_windows_late).await;
        let up = H2Upstream::new(addr, None, Duration::from_secs(5));
        let second = async {
            seen.wait_for("stream 1's request", |h, _| {
                h.stream == 1 && ends_request(h)
            })
            .await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            up.request(request().await).await
        };
        let (first, second) = tokio::join!(async { up.request(request().await).await }, second);
        // Both answered on the one connection: it is still there.
        assert_eq!(first.expect("answered").status(), 200);
        assert_eq!(second.expect("answered").status(), 200);
        let ends = seen
            .frames
            .lock()
            .unwrap()
            .iter()
            .filter(|(h, _)| h.stream == 1 && ends_request(h))
            .count();
        assert_eq!(ends, 1, "stream 1 ended more than once");
        assert_eq!(seen.accepted.load(Ordering::SeqCst), 1);
    }
}
