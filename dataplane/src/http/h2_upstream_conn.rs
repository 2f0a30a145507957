//! The upstream HTTP/2 client's connection to one endpoint: one task that owns the socket
//! and all of the connection's state, on the proxy's own framing ([`crate::http2`]), as
//! the client-facing server ([`super::h2_server`]) is.
//!
//! Requests arrive on a queue ([`ConnShared`]); the task encodes each one's HEADERS into
//! its write buffer in the turn it takes it, and polls a request body itself, with a
//! waker that queues the stream's id ([`StreamWaker`]): a unary call leaves as HEADERS
//! and DATA in one write, with no task of its own. A response head is handed back at the
//! end of the turn that read it ([`Exchange`]), with its body complete when its DATA and
//! trailers came in the same read; the window its bytes free goes back lazily while the
//! connection's window is half open ([`Releases::set_lazy`]). On the `h2` crate every one of these steps went
//! through the crate's stream store and its lock (22% of the proxy's CPU under gRPC load,
//! docs/benchmarks.md).
//!
//! Failures keep the retry rule: a request whose HEADERS never reached the write buffer,
//! one refused (REFUSED_STREAM) and one past the endpoint's GOAWAY (RFC 9113 §6.8) were
//! never processed; anything else may have been.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use h2::Reason;
use http::header::{self, HeaderMap};
use http::{Method, Response, StatusCode, request};
use hyper::body::Body;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::time::{Instant, Sleep};

use super::h2_conn::{Out, ReadyQueue, StreamWaker, Streams, Written, write_data};
use super::h2_exchange::{ConnShared, Exchange, H2Body, H2Error, StreamError, Submit};
use super::h2_head::{connection_specific, response, trailers};
use super::h2_recv::{Chunks, Releases, RequestBody, Shared};
use super::replay::ReplayBody;
use super::server::MAX_HEADER_BYTES;
use crate::http2::frame::{self, Head, flag, kind, setting};
use crate::http2::hpack::{Decoder, Field, HpackError};

/// Receive windows, as hyper's client had them: a stream may have 2 MiB in flight and
/// the connection 5 MiB, so one slow reader does not hold the shared connection's window.
const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
const CONNECTION_WINDOW: u32 = 5 * 1024 * 1024;
/// Streams opened before the endpoint's SETTINGS say how many it takes.
const INITIAL_STREAMS: usize = 100;
/// Most bytes queued toward the endpoint before request bodies stop being polled.
const WRITE_HIGH_WATER: usize = 256 * 1024;
/// Most bytes queued toward the endpoint before its frames stop being read too.
const READ_STOP: usize = 1024 * 1024;
/// Bytes read from the endpoint at a time.
const READ_CHUNK: usize = 32 * 1024;
/// Most bytes of one encoded header block kept while it arrives in CONTINUATIONs.
const MAX_HEADER_BLOCK: usize = 2 * MAX_HEADER_BYTES;
/// The last stream id a client may open (RFC 9113 §5.1.1); past it, a new connection.
const LAST_STREAM_ID: u32 = (1 << 31) - 1;
/// How long a connection ended with GOAWAY tries to get it out.
const LINGER: Duration = Duration::from_secs(1);

/// How often the connection is PINGed, and how long an answer may take before the
/// connection is dropped (the next request dials again): a peer gone without a FIN or
/// RST is noticed without waiting for TCP to give up.
#[derive(Clone, Copy, Debug)]
pub struct Keepalive {
    pub every: Duration,
    pub timeout: Duration,
}

impl Default for Keepalive {
    /// Generous: a busy endpoint is not a dead one.
    fn default() -> Self {
        Self {
            every: Duration::from_secs(10),
            timeout: Duration::from_secs(20),
        }
    }
}

/// Why the connection ended before it was done.
#[derive(Debug, thiserror::Error)]
enum ConnError {
    /// The endpoint broke the protocol: GOAWAY with this reason.
    #[error("{1} ({0:?})")]
    Protocol(Reason, &'static str),
    #[error("header block: {0}")]
    Hpack(#[from] HpackError),
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error("the endpoint closed the connection with streams open")]
    Eof,
    #[error("no answer to a PING in {0:?}")]
    Silent(Duration),
}

impl ConnError {
    fn reason(&self) -> Option<Reason> {
        match self {
            ConnError::Protocol(r, _) => Some(*r),
            ConnError::Hpack(_) => Some(Reason::COMPRESSION_ERROR),
            ConnError::Io(_) | ConnError::Eof => None,
            ConnError::Silent(_) => Some(Reason::NO_ERROR),
        }
    }
}

fn protocol(what: &'static str) -> ConnError {
    ConnError::Protocol(Reason::PROTOCOL_ERROR, what)
}

/// Start HTTP/2 on a dialed connection: the preface and SETTINGS are written before this
/// returns (a failure there sent no request), then a task of its own drives it.
pub async fn start<I>(
    mut io: I,
    endpoint: SocketAddr,
    keepalive: Keepalive,
) -> io::Result<Arc<ConnShared>>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut out = Out::default();
    out.buf.extend_from_slice(frame::PREFACE);
    frame::settings(
        &mut out.buf,
        &[
            (setting::ENABLE_PUSH, 0),
            (setting::INITIAL_WINDOW_SIZE, STREAM_WINDOW),
            (setting::MAX_HEADER_LIST_SIZE, MAX_HEADER_BYTES as u32),
        ],
    );
    frame::window_update(&mut out.buf, 0, CONNECTION_WINDOW - frame::DEFAULT_WINDOW);
    io.write_all(&out.buf).await?;
    out.buf.clear();
    let shared = Arc::new(ConnShared::default());
    let conn = Conn::new(io, out, shared.clone(), keepalive);
    tokio::spawn(conn.run(endpoint));
    Ok(shared)
}

/// The endpoint's side of a stream. Held inline in the streams map: boxing the head
/// would cost an allocation per response.
#[allow(clippy::large_enum_variant)]
enum Recv {
    /// No response head yet.
    Awaiting,
    /// Head read in this turn; handed over at its end, with what came after it.
    Early {
        parts: http::response::Parts,
        data: Chunks,
        trailers: Option<HeaderMap>,
    },
    Arriving(Arc<Shared>),
    /// Handed over complete.
    Handed,
}

struct Up {
    exchange: Arc<Exchange>,
    wake: Arc<StreamWaker>,
    waker: Waker,
    /// The request body still to send, and the part of a frame waiting for window.
    body: Option<ReplayBody>,
    pending: Option<(Bytes, bool)>,
    /// The request's END_STREAM is in the write buffer.
    sent_end: bool,
    send_window: i64,
    /// In the list of streams waiting for the connection's window.
    blocked: bool,
    recv: Recv,
    /// The endpoint sent END_STREAM.
    peer_done: bool,
    recv_window: i64,
    /// The response's content-length (none for HEAD, 204, 304), and DATA bytes received.
    expect_len: Option<u64>,
    received: u64,
    head_request: bool,
}

impl Up {
    fn waits_for_stream_window(&self) -> bool {
        !self.blocked && self.pending.is_some()
    }
}

/// What became of a request body polled once.
enum Driven {
    Waiting,
    Deferred,
    Blocked,
    /// The body ended; END_STREAM is written.
    Sent,
    Broken(StreamError),
}

/// A header block arriving in CONTINUATION frames.
struct Continuing {
    stream: u32,
    end_stream: bool,
    block: BytesMut,
}

struct Conn<I> {
    io: I,
    rbuf: BytesMut,
    out: Out,
    decoder: Decoder,
    fields: Vec<Field>,
    continuing: Option<Continuing>,
    shared: Arc<ConnShared>,
    streams: Streams<Up>,
    /// The id the next stream gets.
    next_id: u32,
    /// The endpoint's SETTINGS_MAX_CONCURRENT_STREAMS.
    max_streams: usize,
    /// Requests taken from the queue and not yet opened (over the endpoint's limit).
    waiting: VecDeque<Submit>,
    subs: Vec<Submit>,
    cancels: Vec<u32>,
    got_settings: bool,
    peer_initial_window: i64,
    /// What the endpoint may still send on the connection, and what was taken from
    /// bodies since the window was last topped up.
    recv_window: i64,
    unannounced: usize,
    releases: Arc<Releases>,
    ready: Arc<ReadyQueue>,
    runnable: VecDeque<u32>,
    blocked: Vec<u32>,
    /// Streams whose head came in this turn.
    headed: Vec<u32>,
    scratch: Vec<u32>,
    /// The endpoint said GOAWAY: no new streams; the connection ends with the last.
    goaway: bool,
    keepalive: Keepalive,
    ping_timer: Pin<Box<Sleep>>,
    ping_out: bool,
}

impl<I> Conn<I>
where
    I: AsyncRead + AsyncWrite + Unpin,
{
    fn new(io: I, out: Out, shared: Arc<ConnShared>, keepalive: Keepalive) -> Self {
        Self {
            io,
            rbuf: BytesMut::with_capacity(READ_CHUNK),
            out,
            decoder: Decoder::default(),
            fields: Vec::new(),
            continuing: None,
            shared,
            streams: Streams::default(),
            next_id: 1,
            max_streams: INITIAL_STREAMS,
            waiting: VecDeque::new(),
            subs: Vec::new(),
            cancels: Vec::new(),
            got_settings: false,
            peer_initial_window: i64::from(frame::DEFAULT_WINDOW),
            recv_window: i64::from(CONNECTION_WINDOW),
            unannounced: 0,
            releases: Arc::default(),
            ready: Arc::default(),
            runnable: VecDeque::new(),
            blocked: Vec::new(),
            headed: Vec::new(),
            scratch: Vec::new(),
            goaway: false,
            ping_timer: Box::pin(tokio::time::sleep(keepalive.every)),
            keepalive,
            ping_out: false,
        }
    }

    async fn run(mut self, endpoint: SocketAddr) {
        let ended = std::future::poll_fn(|cx| self.poll(cx)).await;
        match ended {
            Ok(()) => tracing::debug!(%endpoint, "upstream HTTP/2 connection closed"),
            Err(error) => {
                tracing::debug!(%endpoint, %error, "upstream HTTP/2 connection ended");
                // Fail what is left at once, not after the GOAWAY's linger: requests go
                // elsewhere (or to a new connection) without waiting on a dead one.
                self.fail_all();
                if let Some(reason) = error.reason() {
                    frame::goaway(&mut self.out.buf, 0, reason);
                    let _ = tokio::time::timeout(LINGER, async {
                        std::future::poll_fn(|cx| self.poll_flush(cx)).await?;
                        self.io.shutdown().await
                    })
                    .await;
                }
            }
        }
    }

    fn poll_read_some(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.rbuf.reserve(READ_CHUNK);
        tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, &mut self.rbuf)
    }

    fn poll_write_some(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        if self.out.buf.is_empty() {
            return Poll::Ready(Ok(false));
        }
        let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.out.buf))?;
        if n == 0 {
            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
        }
        self.out.buf.advance(n);
        Poll::Ready(Ok(true))
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.out.buf.is_empty() {
            ready!(self.poll_write_some(cx))?;
        }
        Pin::new(&mut self.io).poll_flush(cx)
    }

    /// Whether nothing is left to do: the connection takes no new streams (GOAWAY, ids
    /// spent, or its client retired it) and the last one has ended.
    fn finished(&mut self) -> bool {
        if !self.streams.is_empty() || !self.waiting.is_empty() {
            return false;
        }
        if self.shared.is_closed() {
            return true;
        }
        if self.shared.retired() {
            for sub in self.shared.close() {
                refuse(sub, StreamError::Closed("the endpoint was removed"));
            }
            frame::goaway(&mut self.out.buf, 0, Reason::NO_ERROR);
            return true;
        }
        false
    }

    /// Run until the connection is done (`Ok`) or breaks.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ConnError>> {
        loop {
            let write_pending = self.poll_write_some(cx)?.is_pending();
            let mut read = false;
            if self.out.buf.len() < READ_STOP
                && let Poll::Ready(n) = self.poll_read_some(cx)?
            {
                if n == 0 {
                    if self.streams.is_empty() {
                        return Poll::Ready(Ok(()));
                    }
                    return Poll::Ready(Err(ConnError::Eof));
                }
                read = true;
            }
            self.frames()?;
            self.take_requests(cx);
            self.give_back(cx);
            self.drive(cx);
            self.deliver();
            self.keepalive(cx)?;
            if self.finished() {
                return self.poll_flush(cx).map_err(ConnError::from);
            }
            let more_to_write = !self.out.buf.is_empty() && !write_pending;
            if !read && !more_to_write {
                return Poll::Pending;
            }
        }
    }

    /// PING every `every`; a PING unanswered for `timeout` ends the connection.
    fn keepalive(&mut self, cx: &mut Context<'_>) -> Result<(), ConnError> {
        while self.ping_timer.as_mut().poll(cx).is_ready() {
            if self.ping_out {
                return Err(ConnError::Silent(self.keepalive.timeout));
            }
            frame::ping(&mut self.out.buf, b"sluice\0\0");
            self.ping_out = true;
            let at = Instant::now() + self.keepalive.timeout;
            self.ping_timer.as_mut().reset(at);
        }
        Ok(())
    }

    fn frames(&mut self) -> Result<(), ConnError> {
        while let Some(head) = Head::parse(&self.rbuf) {
            if head.len > frame::DEFAULT_MAX_FRAME_SIZE as usize {
                return Err(ConnError::Protocol(
                    Reason::FRAME_SIZE_ERROR,
                    "frame too large",
                ));
            }
            if self.rbuf.len() < frame::HEAD_LEN + head.len {
                break;
            }
            self.rbuf.advance(frame::HEAD_LEN);
            let payload = self.rbuf.split_to(head.len).freeze();
            self.frame(head, payload)?;
        }
        Ok(())
    }

    /// Whether `id` names a stream this client never opened.
    fn idle(&self, id: u32) -> bool {
        id.is_multiple_of(2) || id >= self.next_id
    }

    fn frame(&mut self, head: Head, payload: Bytes) -> Result<(), ConnError> {
        if !self.got_settings {
            if head.kind != kind::SETTINGS || head.has(flag::ACK) {
                return Err(protocol("the first frame is not SETTINGS"));
            }
            self.got_settings = true;
        }
        if let Some(c) = &mut self.continuing {
            if head.kind != kind::CONTINUATION || head.stream != c.stream {
                return Err(protocol("a header block was interrupted"));
            }
            if c.block.len() + payload.len() > MAX_HEADER_BLOCK {
                return Err(ConnError::Protocol(
                    Reason::ENHANCE_YOUR_CALM,
                    "header block too large",
                ));
            }
            c.block.extend_from_slice(&payload);
            if head.has(flag::END_HEADERS)
                && let Some(c) = self.continuing.take()
            {
                return self.header_block(c.stream, c.end_stream, c.block.freeze());
            }
            return Ok(());
        }
        match head.kind {
            kind::DATA => self.data(head, payload),
            kind::HEADERS => self.headers(head, payload),
            kind::PRIORITY => match head.stream {
                0 => Err(protocol("PRIORITY on stream 0")),
                _ => Ok(()),
            },
            kind::RST_STREAM => self.rst_stream(head, &payload),
            kind::SETTINGS => self.settings(head, &payload),
            kind::PUSH_PROMISE => Err(protocol("PUSH_PROMISE, push disabled")),
            kind::PING => {
                if head.stream != 0 {
                    return Err(protocol("PING on a stream"));
                }
                if head.len != 8 {
                    return Err(ConnError::Protocol(Reason::FRAME_SIZE_ERROR, "PING size"));
                }
                if !head.has(flag::ACK) {
                    frame::ping_ack(&mut self.out.buf, &payload);
                } else if self.ping_out {
                    self.ping_out = false;
                    let at = Instant::now() + self.keepalive.every;
                    self.ping_timer.as_mut().reset(at);
                }
                Ok(())
            }
            kind::GOAWAY => self.goaway(head, &payload),
            kind::WINDOW_UPDATE => self.window_update(head, &payload),
            kind::CONTINUATION => Err(protocol("CONTINUATION without HEADERS")),
            // Unknown frame types are ignored (RFC 9113 §4.1).
            _ => Ok(()),
        }
    }

    fn settings(&mut self, head: Head, payload: &[u8]) -> Result<(), ConnError> {
        if head.stream != 0 {
            return Err(protocol("SETTINGS on a stream"));
        }
        if head.has(flag::ACK) {
            return match head.len {
                0 => Ok(()),
                _ => Err(ConnError::Protocol(
                    Reason::FRAME_SIZE_ERROR,
                    "SETTINGS ACK size",
                )),
            };
        }
        if !head.len.is_multiple_of(6) {
            return Err(ConnError::Protocol(
                Reason::FRAME_SIZE_ERROR,
                "SETTINGS size",
            ));
        }
        let mut initial_window = None;
        for s in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([s[0], s[1]]);
            let value = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
            match id {
                setting::HEADER_TABLE_SIZE => self.out.encoder.set_limit(value),
                // A server must not enable push (RFC 9113 §6.5.2).
                setting::ENABLE_PUSH if value != 0 => return Err(protocol("ENABLE_PUSH")),
                setting::MAX_CONCURRENT_STREAMS => self.max_streams = value as usize,
                setting::INITIAL_WINDOW_SIZE => {
                    if i64::from(value) > frame::MAX_WINDOW {
                        return Err(ConnError::Protocol(
                            Reason::FLOW_CONTROL_ERROR,
                            "INITIAL_WINDOW_SIZE",
                        ));
                    }
                    initial_window = Some(i64::from(value));
                }
                setting::MAX_FRAME_SIZE => {
                    if !(frame::DEFAULT_MAX_FRAME_SIZE..1 << 24).contains(&value) {
                        return Err(protocol("MAX_FRAME_SIZE"));
                    }
                    self.out.max_frame = value as usize;
                }
                _ => {}
            }
        }
        if let Some(value) = initial_window {
            let delta = value - self.peer_initial_window;
            self.peer_initial_window = value;
            for (id, s) in &mut self.streams {
                s.send_window += delta;
                if s.send_window > frame::MAX_WINDOW {
                    return Err(ConnError::Protocol(
                        Reason::FLOW_CONTROL_ERROR,
                        "a stream's window past 2^31-1",
                    ));
                }
                if delta > 0 && s.waits_for_stream_window() {
                    self.runnable.push_back(*id);
                }
            }
        }
        frame::settings_ack(&mut self.out.buf);
        Ok(())
    }

    fn window_update(&mut self, head: Head, payload: &[u8]) -> Result<(), ConnError> {
        if head.len != 4 {
            return Err(ConnError::Protocol(
                Reason::FRAME_SIZE_ERROR,
                "WINDOW_UPDATE size",
            ));
        }
        let increment = i64::from(frame::u32_at(payload).unwrap_or(0) & 0x7fff_ffff);
        if head.stream == 0 {
            if increment == 0 {
                return Err(protocol("WINDOW_UPDATE of 0"));
            }
            self.out.window += increment;
            if self.out.window > frame::MAX_WINDOW {
                return Err(ConnError::Protocol(
                    Reason::FLOW_CONTROL_ERROR,
                    "connection window past 2^31-1",
                ));
            }
            for id in self.blocked.drain(..) {
                if let Some(s) = self.streams.get_mut(&id) {
                    s.blocked = false;
                    self.runnable.push_back(id);
                }
            }
            return Ok(());
        }
        if self.idle(head.stream) {
            return Err(protocol("WINDOW_UPDATE on an idle stream"));
        }
        let Some(s) = self.streams.get_mut(&head.stream) else {
            return Ok(());
        };
        if increment == 0 {
            self.stream_error(head.stream, Reason::PROTOCOL_ERROR, "WINDOW_UPDATE of 0");
            return Ok(());
        }
        s.send_window += increment;
        if s.send_window > frame::MAX_WINDOW {
            self.stream_error(
                head.stream,
                Reason::FLOW_CONTROL_ERROR,
                "window past 2^31-1",
            );
            return Ok(());
        }
        if s.waits_for_stream_window() {
            self.runnable.push_back(head.stream);
        }
        Ok(())
    }

    fn rst_stream(&mut self, head: Head, payload: &[u8]) -> Result<(), ConnError> {
        if head.stream == 0 {
            return Err(protocol("RST_STREAM on stream 0"));
        }
        if head.len != 4 {
            return Err(ConnError::Protocol(
                Reason::FRAME_SIZE_ERROR,
                "RST_STREAM size",
            ));
        }
        if self.idle(head.stream) {
            return Err(protocol("RST_STREAM on an idle stream"));
        }
        let reason = Reason::from(frame::u32_at(payload).unwrap_or(0));
        let Some(mut s) = self.remove(head.stream) else {
            return Ok(());
        };
        if reason == Reason::NO_ERROR && s.peer_done {
            // The response is complete and the rest of the request not wanted (RFC 9113
            // §8.1): only the request body stops.
            self.hand_over(head.stream, &mut s);
            return Ok(());
        }
        let error = match reason {
            Reason::REFUSED_STREAM => H2Error::Refused(StreamError::Reset(reason)),
            _ => H2Error::Stream(StreamError::Reset(reason)),
        };
        self.fail(head.stream, s, error, reason);
        Ok(())
    }

    fn goaway(&mut self, head: Head, payload: &[u8]) -> Result<(), ConnError> {
        if head.stream != 0 {
            return Err(protocol("GOAWAY on a stream"));
        }
        if head.len < 8 {
            return Err(ConnError::Protocol(Reason::FRAME_SIZE_ERROR, "GOAWAY size"));
        }
        let last = frame::u32_at(payload).unwrap_or(0) & 0x7fff_ffff;
        let reason = Reason::from(frame::u32_at(&payload[4..]).unwrap_or(0));
        self.goaway = true;
        let error = StreamError::GoAway(reason);
        self.close_queue(&error);
        // The streams past `last` were never processed (RFC 9113 §6.8): sent again
        // elsewhere, whatever the GOAWAY's code.
        self.scratch.clear();
        self.scratch
            .extend(self.streams.keys().copied().filter(|id| *id > last));
        let past = std::mem::take(&mut self.scratch);
        for id in &past {
            if let Some(s) = self.remove(*id) {
                self.fail(
                    *id,
                    s,
                    H2Error::Refused(error.clone()),
                    Reason::REFUSED_STREAM,
                );
            }
        }
        self.scratch = past;
        Ok(())
    }

    /// Take no more requests: those queued and waiting are refused, never sent.
    fn close_queue(&mut self, error: &StreamError) {
        for sub in self.shared.close() {
            refuse(sub, error.clone());
        }
        for sub in self.waiting.drain(..) {
            refuse(sub, error.clone());
        }
    }

    fn data(&mut self, head: Head, payload: Bytes) -> Result<(), ConnError> {
        if head.stream == 0 {
            return Err(protocol("DATA on stream 0"));
        }
        let len = head.len as i64;
        if len > self.recv_window {
            return Err(ConnError::Protocol(
                Reason::FLOW_CONTROL_ERROR,
                "DATA past the connection's window",
            ));
        }
        self.recv_window -= len;
        let Some(range) = frame::unpadded(&head, &payload) else {
            return Err(protocol("padding longer than the frame"));
        };
        let data = payload.slice(range);
        // Padding is given back at once; so is what no reader will take.
        let padding = head.len - data.len();
        self.unannounced += padding;
        if self.idle(head.stream) {
            return Err(protocol("DATA on an idle stream"));
        }
        let Some(s) = self.streams.get_mut(&head.stream) else {
            self.unannounced += data.len();
            return Ok(());
        };
        if s.peer_done || matches!(s.recv, Recv::Awaiting) {
            self.unannounced += data.len();
            // After END_STREAM: a half-closed stream's STREAM_CLOSED (RFC 9113 §5.1);
            // before any head: a malformed response.
            let reason = if s.peer_done {
                Reason::STREAM_CLOSED
            } else {
                Reason::PROTOCOL_ERROR
            };
            self.stream_error(head.stream, reason, "DATA out of place");
            return Ok(());
        }
        if len > s.recv_window {
            self.unannounced += data.len();
            self.stream_error(
                head.stream,
                Reason::FLOW_CONTROL_ERROR,
                "DATA past the stream's window",
            );
            return Ok(());
        }
        s.recv_window -= len;
        s.received += data.len() as u64;
        let end = head.has(flag::END_STREAM);
        if padding > 0 && !end {
            s.recv_window += padding as i64;
            frame::window_update(&mut self.out.buf, head.stream, padding as u32);
        }
        if s.expect_len
            .is_some_and(|n| s.received > n || end && s.received != n)
        {
            self.unannounced += data.len();
            self.stream_error(
                head.stream,
                Reason::PROTOCOL_ERROR,
                "content-length mismatch",
            );
            return Ok(());
        }
        let n = data.len();
        match &mut s.recv {
            Recv::Early { data: early, .. } => {
                if n > 0 {
                    early.push(data);
                }
            }
            Recv::Arriving(shared) => {
                if n > 0 && !shared.push(data) {
                    self.unannounced += n;
                }
            }
            Recv::Handed | Recv::Awaiting => self.unannounced += n,
        }
        if end {
            s.peer_done = true;
            if let Recv::Arriving(shared) = &s.recv {
                shared.finish(None);
            }
            self.close_if_done(head.stream);
        }
        Ok(())
    }

    fn headers(&mut self, head: Head, payload: Bytes) -> Result<(), ConnError> {
        if head.stream == 0 {
            return Err(protocol("HEADERS on stream 0"));
        }
        let Some(mut range) = frame::unpadded(&head, &payload) else {
            return Err(protocol("padding longer than the frame"));
        };
        if head.has(flag::PRIORITY) {
            if range.len() < 5 {
                return Err(ConnError::Protocol(
                    Reason::FRAME_SIZE_ERROR,
                    "HEADERS priority",
                ));
            }
            range.start += 5;
        }
        let fragment = payload.slice(range);
        let end_stream = head.has(flag::END_STREAM);
        if head.has(flag::END_HEADERS) {
            return self.header_block(head.stream, end_stream, fragment);
        }
        let mut block = BytesMut::with_capacity(fragment.len() * 2);
        block.extend_from_slice(&fragment);
        self.continuing = Some(Continuing {
            stream: head.stream,
            end_stream,
            block,
        });
        Ok(())
    }

    /// A whole header block: a response head (or an informational one), or trailers.
    fn header_block(&mut self, id: u32, end_stream: bool, block: Bytes) -> Result<(), ConnError> {
        if self.fields.capacity() > 256 {
            self.fields = Vec::new();
        }
        self.fields.clear();
        // Decoded whatever becomes of the stream: the table stays in step.
        let list = self
            .decoder
            .decode(&block, &mut self.fields, MAX_HEADER_BYTES)?;
        if self.idle(id) {
            return Err(protocol("HEADERS on an idle stream"));
        }
        let Some(s) = self.streams.get_mut(&id) else {
            // A stream closed already (cancelled, reset).
            return Ok(());
        };
        if s.peer_done {
            self.stream_error(id, Reason::STREAM_CLOSED, "HEADERS after END_STREAM");
            return Ok(());
        }
        if list > MAX_HEADER_BYTES {
            self.stream_error(id, Reason::PROTOCOL_ERROR, "response header list too large");
            return Ok(());
        }
        if matches!(s.recv, Recv::Awaiting) {
            let Some((parts, expect_len)) = response(&mut self.fields) else {
                self.stream_error(id, Reason::PROTOCOL_ERROR, "malformed response head");
                return Ok(());
            };
            if parts.status.is_informational() {
                // 1xx heads are skipped (a 101 has no place in HTTP/2).
                if end_stream || parts.status == StatusCode::SWITCHING_PROTOCOLS {
                    self.stream_error(id, Reason::PROTOCOL_ERROR, "informational response");
                }
                return Ok(());
            }
            let bodiless = s.head_request
                || parts.status == StatusCode::NO_CONTENT
                || parts.status == StatusCode::NOT_MODIFIED;
            s.expect_len = if bodiless { None } else { expect_len };
            if end_stream && s.expect_len.is_some_and(|n| n != 0) {
                self.stream_error(id, Reason::PROTOCOL_ERROR, "content-length mismatch");
                return Ok(());
            }
            s.recv = Recv::Early {
                parts,
                data: Chunks::None,
                trailers: None,
            };
            self.headed.push(id);
            if end_stream {
                s.peer_done = true;
            }
            return Ok(());
        }
        // Trailers.
        if !end_stream {
            self.stream_error(
                id,
                Reason::PROTOCOL_ERROR,
                "a second head without END_STREAM",
            );
            return Ok(());
        }
        let Some(trailers) = trailers(&mut self.fields) else {
            self.stream_error(id, Reason::PROTOCOL_ERROR, "malformed trailers");
            return Ok(());
        };
        if s.expect_len.is_some_and(|n| n != s.received) {
            self.stream_error(id, Reason::PROTOCOL_ERROR, "content-length mismatch");
            return Ok(());
        }
        s.peer_done = true;
        match &mut s.recv {
            Recv::Early { trailers: t, .. } => *t = Some(trailers),
            Recv::Arriving(shared) => shared.finish(Some(trailers)),
            Recv::Handed | Recv::Awaiting => {}
        }
        self.close_if_done(id);
        Ok(())
    }

    /// Hand over the heads read in this turn.
    fn deliver(&mut self) {
        for i in 0..self.headed.len() {
            let id = self.headed[i];
            if let Some(s) = self.streams.get_mut(&id) {
                hand_over(id, s, &self.releases, &self.shared);
                self.close_if_done(id);
            }
        }
        self.headed.clear();
    }

    /// New requests and cancellations from the queue; open what the endpoint's limit
    /// allows.
    fn take_requests(&mut self, cx: &Context<'_>) {
        self.shared.take(cx, &mut self.subs, &mut self.cancels);
        for id in std::mem::take(&mut self.cancels) {
            if let Some(s) = self.remove(id) {
                if !(s.peer_done && s.sent_end) {
                    frame::rst_stream(&mut self.out.buf, id, Reason::CANCEL);
                }
                if let Recv::Arriving(shared) = &s.recv {
                    shared.reset(Reason::CANCEL);
                }
                if let Recv::Early { data, .. } = &s.recv {
                    self.unannounced += data.len();
                }
            }
        }
        // Requesters gone while their request waited for the endpoint's stream limit: it
        // will not be sent, and it holds a client's body.
        if !self.waiting.is_empty() {
            self.waiting.retain(|sub| !sub.exchange.is_cancelled());
        }
        let subs = std::mem::take(&mut self.subs);
        if self.goaway || self.shared.is_closed() {
            for sub in subs {
                refuse(sub, StreamError::Closed("the connection is closing"));
            }
        } else {
            self.waiting.extend(subs);
        }
        while self.streams.len() < self.max_streams
            && let Some(sub) = self.waiting.pop_front()
        {
            self.open(sub);
        }
    }

    fn open(&mut self, sub: Submit) {
        if sub.exchange.is_cancelled() {
            return;
        }
        let id = self.next_id;
        if id > LAST_STREAM_ID {
            let error = StreamError::Closed("stream ids spent");
            refuse(sub, error.clone());
            self.close_queue(&error);
            return;
        }
        if !sub.exchange.open(id) {
            return;
        }
        self.next_id += 2;
        let Submit {
            parts,
            body,
            exchange,
        } = sub;
        let end = body.is_end_stream();
        write_request_head(&mut self.out, id, &parts, end);
        let wake = Arc::new(StreamWaker {
            id,
            queued: AtomicBool::new(false),
            ready: self.ready.clone(),
        });
        self.streams.insert(
            id,
            Up {
                exchange,
                waker: Waker::from(wake.clone()),
                wake,
                body: (!end).then_some(body),
                pending: None,
                sent_end: end,
                send_window: self.peer_initial_window,
                blocked: false,
                recv: Recv::Awaiting,
                peer_done: false,
                recv_window: i64::from(STREAM_WINDOW),
                expect_len: None,
                received: 0,
                head_request: parts.method == Method::HEAD,
            },
        );
        if !end {
            self.runnable.push_back(id);
        }
    }

    /// Give the endpoint back the window its bodies' readers freed.
    fn give_back(&mut self, cx: &Context<'_>) {
        let half = CONNECTION_WINDOW as usize / 2;
        self.releases.set_lazy(self.recv_window >= half as i64);
        self.unannounced += self.releases.collect(cx, &mut self.scratch);
        for id in self.scratch.drain(..) {
            if let Some(s) = self.streams.get_mut(&id)
                && !s.peer_done
                && let Recv::Arriving(shared) = &s.recv
            {
                let n = shared.take_unannounced();
                if n > 0 {
                    s.recv_window += n as i64;
                    frame::window_update(&mut self.out.buf, id, n as u32);
                }
            }
        }
        if self.unannounced >= half || self.unannounced > 0 && self.recv_window < half as i64 {
            let n = std::mem::take(&mut self.unannounced);
            self.recv_window += n as i64;
            frame::window_update(&mut self.out.buf, 0, n as u32);
        }
    }

    /// Poll the request bodies that were woken or unblocked.
    fn drive(&mut self, cx: &Context<'_>) {
        self.ready.waker.register(cx.waker());
        {
            let mut woken = self.ready.ids.lock().unwrap_or_else(|e| e.into_inner());
            self.runnable.extend(woken.drain(..));
        }
        while let Some(id) = self.runnable.pop_front() {
            let Some(s) = self.streams.get_mut(&id) else {
                continue;
            };
            s.wake.queued.store(false, Ordering::Release);
            match drive(s, id, &mut self.out) {
                Driven::Waiting => {}
                Driven::Deferred => {
                    self.runnable.push_front(id);
                    return;
                }
                Driven::Blocked => {
                    if !s.blocked {
                        s.blocked = true;
                        self.blocked.push(id);
                    }
                }
                Driven::Sent => {
                    s.sent_end = true;
                    // Nothing is left to send: a later wake-up or window finds no frame
                    // (a second END_STREAM would break the connection).
                    s.body = None;
                    s.pending = None;
                    self.close_if_done(id);
                }
                Driven::Broken(error) => {
                    tracing::debug!(%error, "request body to the endpoint ended early");
                    frame::rst_stream(&mut self.out.buf, id, Reason::CANCEL);
                    if let Some(s) = self.remove(id) {
                        self.fail(id, s, H2Error::Stream(error), Reason::CANCEL);
                    }
                }
            }
        }
    }
}

/// What also runs as the connection is dropped.
impl<I> Conn<I> {
    /// Take stream `id` out of the connection. Its request body goes first: a retry
    /// elsewhere reads the same client body and must be its only reader.
    fn remove(&mut self, id: u32) -> Option<Up> {
        let mut s = self.streams.remove(&id)?;
        s.body = None;
        s.pending = None;
        s.exchange.set_closed();
        Some(s)
    }

    /// Close stream `id` if both sides are done and its head was handed over.
    fn close_if_done(&mut self, id: u32) {
        if let Some(s) = self.streams.get(&id)
            && s.peer_done
            && s.sent_end
            && matches!(s.recv, Recv::Arriving(_) | Recv::Handed)
        {
            self.remove(id);
        }
    }

    /// Reset stream `id` for the endpoint's error.
    fn stream_error(&mut self, id: u32, reason: Reason, what: &'static str) {
        frame::rst_stream(&mut self.out.buf, id, reason);
        if let Some(s) = self.remove(id) {
            self.fail(id, s, H2Error::Stream(StreamError::Protocol(what)), reason);
        }
    }

    /// End a removed stream's exchange: the requester gets `error` if it still waits for
    /// the head, a reader of a body still arriving gets it broken with `reason`.
    fn fail(&mut self, id: u32, mut s: Up, error: H2Error, reason: Reason) {
        if matches!(s.recv, Recv::Awaiting) {
            s.exchange.answer(Err(error));
            return;
        }
        self.hand_over(id, &mut s);
        if let Recv::Arriving(shared) = &s.recv
            && !s.peer_done
        {
            shared.reset(reason);
        }
    }

    /// Hand stream `id`'s response head over, if it waits for that.
    fn hand_over(&mut self, id: u32, s: &mut Up) {
        hand_over(id, s, &self.releases, &self.shared);
    }
}

impl<I> Drop for Conn<I> {
    fn drop(&mut self) {
        self.fail_all();
    }
}

impl<I> Conn<I> {
    /// The connection is gone: nothing queued was sent; streams in flight may have been
    /// processed, and bodies still arriving break. It takes no more requests.
    fn fail_all(&mut self) {
        let closed = StreamError::Closed("the connection to the endpoint ended");
        for sub in self.shared.close() {
            refuse(sub, closed.clone());
        }
        for sub in self.waiting.drain(..) {
            refuse(sub, closed.clone());
        }
        let ids: Vec<u32> = self.streams.keys().copied().collect();
        for id in ids {
            if let Some(s) = self.remove(id) {
                let error = H2Error::Stream(closed.clone());
                self.fail(id, s, error, Reason::INTERNAL_ERROR);
            }
        }
    }
}

/// Hand stream `id`'s response head over with its body, if it waits for that: complete
/// when the response ended in this turn, else still arriving.
fn hand_over(id: u32, s: &mut Up, releases: &Arc<Releases>, conn: &Arc<ConnShared>) {
    if !matches!(s.recv, Recv::Early { .. }) {
        return;
    }
    let Recv::Early {
        parts,
        data,
        trailers,
    } = std::mem::replace(&mut s.recv, Recv::Handed)
    else {
        return;
    };
    let body = if s.peer_done {
        RequestBody::complete(data, trailers, releases.clone())
    } else {
        let shared = Shared::new(id, releases.clone(), data);
        s.recv = Recv::Arriving(shared.clone());
        RequestBody::arriving(shared)
    };
    if s.peer_done && s.sent_end {
        // Closed before the requester can drop the body: dropping it resets nothing.
        s.exchange.set_closed();
    }
    let body = H2Body::new(body, id, s.exchange.clone(), conn.clone());
    s.exchange.answer(Ok(Response::from_parts(parts, body)));
}

/// Fail a request that never left the proxy: safe to send elsewhere.
fn refuse(sub: Submit, error: StreamError) {
    let Submit { body, exchange, .. } = sub;
    drop(body);
    exchange.answer(Err(H2Error::Refused(error)));
}

/// Poll one request body as far as it goes.
fn drive(s: &mut Up, id: u32, out: &mut Out) -> Driven {
    let mut cx = Context::from_waker(&s.waker);
    loop {
        if out.buf.len() >= WRITE_HIGH_WATER {
            return Driven::Deferred;
        }
        if let Some((data, end)) = &mut s.pending {
            let end = *end;
            match write_data(out, id, data, end, &mut s.send_window) {
                Written::All if end => return Driven::Sent,
                Written::All => s.pending = None,
                Written::Stream => return Driven::Waiting,
                Written::Connection => return Driven::Blocked,
            }
            continue;
        }
        let Some(body) = s.body.as_mut() else {
            return Driven::Waiting;
        };
        match Pin::new(&mut *body).poll_frame(&mut cx) {
            Poll::Pending => return Driven::Waiting,
            Poll::Ready(None) => {
                frame::data(&mut out.buf, id, &[], true);
                return Driven::Sent;
            }
            Poll::Ready(Some(Err(e))) => {
                return Driven::Broken(StreamError::Body(e.to_string().into()));
            }
            Poll::Ready(Some(Ok(f))) => match f.into_data() {
                Ok(data) => {
                    let end = body.is_end_stream();
                    if !data.is_empty() || end {
                        s.pending = Some((data, end));
                    }
                }
                Err(f) => {
                    if let Ok(trailers) = f.into_trailers() {
                        write_trailers(out, id, &trailers);
                        return Driven::Sent;
                    }
                }
            },
        }
    }
}

/// The request's HEADERS: pseudo-headers from the URI (RFC 9113 §8.3.1), then its
/// headers less the connection-specific ones (TE only as `trailers`, which gRPC needs).
fn write_request_head(out: &mut Out, id: u32, parts: &request::Parts, end: bool) {
    out.block.clear();
    out.encoder.begin(&mut out.block);
    out.encoder.method(&mut out.block, &parts.method);
    let connect = parts.method == Method::CONNECT;
    if !connect {
        out.encoder
            .scheme(&mut out.block, parts.uri.scheme_str().unwrap_or("http"));
    }
    let authority = parts.uri.authority().map(|a| a.as_str()).or_else(|| {
        parts
            .headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
    });
    if let Some(authority) = authority {
        out.encoder.authority(&mut out.block, authority);
    }
    if !connect {
        let path = parts.uri.path_and_query().map_or("", |p| p.as_str());
        let path = match path {
            "" if parts.method == Method::OPTIONS => "*",
            "" => "/",
            p => p,
        };
        out.encoder.path(&mut out.block, path);
    }
    for (name, value) in &parts.headers {
        let allowed = !connection_specific(name) || (name == header::TE && value == "trailers");
        if allowed && name != header::HOST {
            out.encoder.header(&mut out.block, name, value);
        }
    }
    frame::headers(&mut out.buf, id, &out.block, end, out.max_frame);
}

fn write_trailers(out: &mut Out, id: u32, trailers: &HeaderMap) {
    out.block.clear();
    out.encoder.begin(&mut out.block);
    for (name, value) in trailers {
        if !connection_specific(name) {
            out.encoder.header(&mut out.block, name, value);
        }
    }
    frame::headers(&mut out.buf, id, &out.block, true, out.max_frame);
}
