//! The client-facing HTTP/2 server of h2c and gRPC services: the proxy's own framing
//! ([`crate::http2`]), one task per connection.
//!
//! On the `h2` crate (and on hyper's server before it) a gRPC request through the proxy
//! cost 1.2–1.4× HAProxy's CPU, and a bare proxy on `h2` alone 1.1× (docs/benchmarks.md):
//! every frame and every stream operation went through the crate's shared stream store
//! and its lock. Here the connection's state is the task's own. A stream's handler
//! future is polled with a waker of its own that queues the stream's id
//! ([`StreamWaker`]), so a wake-up polls only the streams that can move; a response is
//! encoded straight into the connection's write buffer in the same wake-up, and a
//! request whose body came with its headers is handed over with that body complete.
//!
//! What a client controls is bounded as before: 1,024 concurrent streams, a 64 KiB
//! header list (a 431 past it), 1 MiB receive windows per stream and per connection, a
//! client that resets more streams than it lets finish (rapid reset) or keeps making the
//! server reset its streams gets GOAWAY, a client that stops reading is cut off by the
//! write deadline and stops being read from (its PINGs and SETTINGS cannot pile up
//! answers), and the preface must come within [`HEADER_READ_TIMEOUT`]. Protocol errors
//! are RFC 9113's: a stream's are RST_STREAM, the connection's GOAWAY.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use h2::Reason;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Request, Response};
use hyper::body::Body;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::h2_conn::{Out, ReadyQueue, StreamWaker, Streams, Written, write_data};
use super::h2_head::{connection_specific, request, trailers};
use super::h2_recv::{Chunks, Releases, RequestBody, Shared, reset_reason_of};
use super::local::ProxyBody;
use super::server::{HEADER_READ_TIMEOUT, MAX_HEADER_BYTES};
use crate::deadline::{WRITE_TIMEOUT, WriteDeadline};
use crate::http2::frame::{self, Head, flag, kind, setting};
use crate::http2::hpack::{Decoder, Field, HpackError};

/// Streams a client may have open at once.
const MAX_CONCURRENT_STREAMS: usize = 1024;
/// Receive windows, 1 MiB per stream and per connection (hyper's server defaults): a
/// stream whose endpoint stops reading holds at most its own window of the client's
/// bytes (`tests/h2_streams.rs`).
const STREAM_WINDOW: u32 = 1024 * 1024;
const CONNECTION_WINDOW: u32 = 1024 * 1024;
/// Most bytes queued toward the client before the server stops polling response bodies.
const WRITE_HIGH_WATER: usize = 256 * 1024;
/// Most bytes queued toward the client before it stops reading the client's frames too
/// (a client that sends PINGs or SETTINGS but reads no answers).
const READ_STOP: usize = 1024 * 1024;
/// How long a connection ended by GOAWAY drains what the client still sends, so that
/// closing it does not reset the GOAWAY away before the client read it.
const LINGER: Duration = Duration::from_secs(1);
/// Most bytes of one encoded header block (HEADERS and its CONTINUATIONs) kept while it
/// arrives; past it the connection ends (a CONTINUATION flood).
const MAX_HEADER_BLOCK: usize = 2 * MAX_HEADER_BYTES;
/// CVE-2023-44487 (rapid reset): a client that resets more streams before their answer
/// than it lets finish (by this many), or makes the server reset this many of its
/// streams for protocol errors, gets GOAWAY.
const MAX_CLIENT_RESETS: u32 = 128;
const MAX_LOCAL_ERROR_RESETS: u32 = 256;
/// Bytes read from the client at a time.
const READ_CHUNK: usize = 32 * 1024;

/// Why a connection ended before its client closed it.
#[derive(Debug, thiserror::Error)]
enum ConnError {
    /// A connection error the client caused: GOAWAY with this reason.
    #[error("{1} ({0:?})")]
    Protocol(Reason, &'static str),
    #[error("header block: {0}")]
    Hpack(#[from] HpackError),
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl ConnError {
    fn reason(&self) -> Option<Reason> {
        match self {
            ConnError::Protocol(r, _) => Some(*r),
            ConnError::Hpack(_) => Some(Reason::COMPRESSION_ERROR),
            ConnError::Io(_) => None,
        }
    }
}

fn protocol(what: &'static str) -> ConnError {
    ConnError::Protocol(Reason::PROTOCOL_ERROR, what)
}

/// Serve HTTP/2 (prior knowledge) on `io`, each request answered by `handler`; the
/// error code of the GOAWAY that ended the connection for the client's error, if one did.
pub async fn serve<I, F, Fut>(io: I, handler: F) -> Option<Reason>
where
    I: AsyncRead + AsyncWrite + Unpin,
    F: Fn(Request<RequestBody>) -> Fut,
    Fut: Future<Output = Response<ProxyBody>>,
{
    let mut conn = Connection::new(WriteDeadline::new(io, WRITE_TIMEOUT), handler);
    let preface = std::future::poll_fn(|cx| conn.poll_preface(cx));
    match tokio::time::timeout(HEADER_READ_TIMEOUT, preface).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "client HTTP/2 preface refused");
            return None;
        }
        Err(_) => {
            tracing::debug!("client sent no HTTP/2 preface in time");
            return None;
        }
    }
    let ended = std::future::poll_fn(|cx| conn.poll(cx)).await;
    if let Err(e) = ended {
        tracing::debug!(error = %e, "client HTTP/2 connection ended with an error");
        if let Some(reason) = e.reason() {
            // Tell the client why, then close the way nginx's lingering close does: end
            // the write side, and read what the client still had in flight, so the
            // close sends no reset that would discard the GOAWAY unread.
            conn.streams.clear();
            frame::goaway(&mut conn.out.buf, conn.last_id, reason);
            let _ = tokio::time::timeout(LINGER, async {
                std::future::poll_fn(|cx| conn.poll_flush(cx)).await?;
                conn.io.shutdown().await?;
                let mut sink = [0u8; 16 * 1024];
                while conn.io.read(&mut sink).await? > 0 {}
                Ok::<_, io::Error>(())
            })
            .await;
            return Some(reason);
        }
    }
    None
}

/// Where a stream's answer stands.
enum Phase<Fut> {
    /// Headers received in this turn; handed to the handler at its end, when the body
    /// that came with them is known.
    Waiting(http::request::Parts),
    Handling(Pin<Box<Fut>>),
    /// Response head sent; the body's frames follow, `pending` the part of one that
    /// waits for flow-control window.
    Sending {
        body: ProxyBody,
        pending: Option<(Bytes, bool)>,
    },
}

/// The client's side of a stream.
enum Recv {
    /// Before the handler has it: what arrived so far.
    Early {
        data: Chunks,
        trailers: Option<HeaderMap>,
    },
    Arriving(Arc<Shared>),
    /// Handed over complete.
    Handed,
}

struct Stream<Fut> {
    wake: Arc<StreamWaker>,
    waker: Waker,
    phase: Phase<Fut>,
    recv: Recv,
    /// The client sent END_STREAM.
    client_done: bool,
    /// What the client may still send on the stream.
    recv_window: i64,
    /// What the server may still send on the stream.
    send_window: i64,
    /// The request's content-length, and the DATA bytes received.
    expect_len: Option<u64>,
    received: u64,
    /// In the list of streams waiting for the connection's window.
    blocked: bool,
}

impl<Fut> Stream<Fut> {
    /// Has response bytes that only its own window holds back.
    fn waits_for_stream_window(&self) -> bool {
        !self.blocked
            && matches!(
                self.phase,
                Phase::Sending {
                    pending: Some(_),
                    ..
                }
            )
    }
}

/// What became of a stream polled once.
enum Driven {
    /// Waiting on its handler or body (its waker is registered).
    Waiting,
    /// The write buffer is full: poll it again once it drained.
    Deferred,
    /// Waiting on the connection's send window.
    Blocked,
    /// Its response ended; the stream can go.
    Finished,
    /// It broke off: reset with this reason.
    Broken(Reason),
}

/// A header block arriving in CONTINUATION frames.
struct Continuing {
    stream: u32,
    end_stream: bool,
    block: BytesMut,
}

struct Connection<I, F, Fut> {
    io: I,
    handler: F,
    rbuf: BytesMut,
    out: Out,
    decoder: Decoder,
    fields: Vec<Field>,
    continuing: Option<Continuing>,
    streams: Streams<Stream<Fut>>,
    /// Highest stream id the client opened.
    last_id: u32,
    /// The first frame must be the client's SETTINGS.
    got_settings: bool,
    /// The peer's SETTINGS_INITIAL_WINDOW_SIZE.
    peer_initial_window: i64,
    /// What the client may still send on the connection, and what was taken from
    /// bodies since the window was last topped up.
    recv_window: i64,
    unannounced: usize,
    releases: Arc<Releases>,
    ready: Arc<ReadyQueue>,
    runnable: VecDeque<u32>,
    blocked: Vec<u32>,
    opened: Vec<u32>,
    scratch: Vec<u32>,
    /// Streams the client reset before their answer, less answers given.
    client_resets: u32,
    local_resets: u32,
    /// The client said GOAWAY: no new streams; the connection ends with the last.
    client_goaway: bool,
}

impl<I, F, Fut> Connection<I, F, Fut>
where
    I: AsyncRead + AsyncWrite + Unpin,
    F: Fn(Request<RequestBody>) -> Fut,
    Fut: Future<Output = Response<ProxyBody>>,
{
    fn new(io: I, handler: F) -> Self {
        let mut out = Out::default();
        frame::settings(
            &mut out.buf,
            &[
                (
                    setting::MAX_CONCURRENT_STREAMS,
                    MAX_CONCURRENT_STREAMS as u32,
                ),
                (setting::INITIAL_WINDOW_SIZE, STREAM_WINDOW),
                (setting::MAX_HEADER_LIST_SIZE, MAX_HEADER_BYTES as u32),
            ],
        );
        frame::window_update(&mut out.buf, 0, CONNECTION_WINDOW - frame::DEFAULT_WINDOW);
        Self {
            io,
            handler,
            rbuf: BytesMut::with_capacity(READ_CHUNK),
            out,
            decoder: Decoder::default(),
            fields: Vec::new(),
            continuing: None,
            streams: Streams::default(),
            last_id: 0,
            got_settings: false,
            peer_initial_window: i64::from(frame::DEFAULT_WINDOW),
            recv_window: i64::from(CONNECTION_WINDOW),
            unannounced: 0,
            releases: Arc::default(),
            ready: Arc::default(),
            runnable: VecDeque::new(),
            blocked: Vec::new(),
            opened: Vec::new(),
            scratch: Vec::new(),
            client_resets: 0,
            local_resets: 0,
            client_goaway: false,
        }
    }

    /// Read the client's preface (the server's SETTINGS go out meanwhile).
    fn poll_preface(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ConnError>> {
        while self.rbuf.len() < frame::PREFACE.len() {
            let _ = self.poll_write_some(cx)?;
            let n = ready!(self.poll_read_some(cx))?;
            if n == 0 {
                return Poll::Ready(Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()));
            }
            if !frame::PREFACE.starts_with(&self.rbuf[..self.rbuf.len().min(frame::PREFACE.len())])
            {
                return Poll::Ready(Err(protocol("not the HTTP/2 preface")));
            }
        }
        self.rbuf.advance(frame::PREFACE.len());
        Poll::Ready(Ok(()))
    }

    fn poll_read_some(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.rbuf.reserve(READ_CHUNK);
        tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, &mut self.rbuf)
    }

    /// Write some of what is queued; `Ready(true)` when bytes went out.
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

    /// Serve until the client closes (`Ok`) or the connection breaks.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ConnError>> {
        loop {
            let write_pending = self.poll_write_some(cx)?.is_pending();
            if self.client_goaway && self.streams.is_empty() {
                return self.poll_flush(cx).map_err(ConnError::from);
            }
            let mut read = false;
            // A client that does not read its answers is not read from either.
            if self.out.buf.len() < READ_STOP
                && let Poll::Ready(n) = self.poll_read_some(cx)?
            {
                if n == 0 {
                    // The client is gone: its streams (and their requests) with it.
                    return Poll::Ready(Ok(()));
                }
                read = true;
            }
            // Frames read in this turn, or with the preface.
            self.frames()?;
            self.dispatch();
            self.give_back(cx);
            self.drive(cx);
            // Round again while bytes came in, or frames wait for a socket that took the
            // last ones. Otherwise every source (socket, streams, bodies' releases) holds
            // this task's waker.
            let more_to_write = !self.out.buf.is_empty() && !write_pending;
            if !read && !more_to_write {
                return Poll::Pending;
            }
        }
    }

    /// Handle every whole frame read.
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
            kind::PRIORITY => {
                if head.stream == 0 {
                    return Err(protocol("PRIORITY on stream 0"));
                }
                if head.len != 5 {
                    self.stream_error(head.stream, Reason::FRAME_SIZE_ERROR)?;
                }
                Ok(())
            }
            kind::RST_STREAM => self.rst_stream(head, &payload),
            kind::SETTINGS => self.settings(head, &payload),
            kind::PUSH_PROMISE => Err(protocol("PUSH_PROMISE from a client")),
            kind::PING => {
                if head.stream != 0 {
                    return Err(protocol("PING on a stream"));
                }
                if head.len != 8 {
                    return Err(ConnError::Protocol(Reason::FRAME_SIZE_ERROR, "PING size"));
                }
                if !head.has(flag::ACK) {
                    frame::ping_ack(&mut self.out.buf, &payload);
                }
                Ok(())
            }
            kind::GOAWAY => {
                if head.stream != 0 {
                    return Err(protocol("GOAWAY on a stream"));
                }
                if head.len < 8 {
                    return Err(ConnError::Protocol(Reason::FRAME_SIZE_ERROR, "GOAWAY size"));
                }
                self.client_goaway = true;
                Ok(())
            }
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
        // The last INITIAL_WINDOW_SIZE of the frame is applied once, after it.
        let mut initial_window = None;
        for s in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([s[0], s[1]]);
            let value = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
            match id {
                setting::HEADER_TABLE_SIZE => self.out.encoder.set_limit(value),
                setting::ENABLE_PUSH if value > 1 => return Err(protocol("ENABLE_PUSH")),
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
        let Some(s) = self.streams.get_mut(&head.stream) else {
            if head.stream > self.last_id {
                return Err(protocol("WINDOW_UPDATE on an idle stream"));
            }
            return Ok(());
        };
        if increment == 0 {
            return self.stream_error(head.stream, Reason::PROTOCOL_ERROR);
        }
        s.send_window += increment;
        if s.send_window > frame::MAX_WINDOW {
            return self.stream_error(head.stream, Reason::FLOW_CONTROL_ERROR);
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
        if head.stream > self.last_id {
            return Err(protocol("RST_STREAM on an idle stream"));
        }
        let reason = Reason::from(frame::u32_at(payload).unwrap_or(0));
        let Some(s) = self.remove(head.stream, reason) else {
            return Ok(());
        };
        if matches!(s.phase, Phase::Waiting(_) | Phase::Handling(_)) {
            self.client_resets += 1;
            if self.client_resets > MAX_CLIENT_RESETS {
                return Err(ConnError::Protocol(
                    Reason::ENHANCE_YOUR_CALM,
                    "too many streams reset before their answer",
                ));
            }
        }
        // Dropping the stream drops its handler: the request to the endpoint is cancelled.
        Ok(())
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
        let Some(s) = self.streams.get_mut(&head.stream) else {
            if head.stream > self.last_id {
                return Err(protocol("DATA on an idle stream"));
            }
            // A stream closed or reset already: its bytes still count on the connection.
            self.unannounced += data.len();
            return Ok(());
        };
        if s.client_done {
            self.unannounced += data.len();
            return self.stream_error(head.stream, Reason::STREAM_CLOSED);
        }
        if len > s.recv_window {
            self.unannounced += data.len();
            return self.stream_error(head.stream, Reason::FLOW_CONTROL_ERROR);
        }
        s.recv_window -= len;
        s.received += data.len() as u64;
        let end = head.has(flag::END_STREAM);
        if padding > 0 && !end {
            // No reader takes padding: the stream's window gets it back now.
            s.recv_window += padding as i64;
            frame::window_update(&mut self.out.buf, head.stream, padding as u32);
        }
        if s.expect_len
            .is_some_and(|n| s.received > n || end && s.received != n)
        {
            self.unannounced += data.len();
            return self.stream_error(head.stream, Reason::PROTOCOL_ERROR);
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
            Recv::Handed => self.unannounced += n,
        }
        if end {
            s.client_done = true;
            if let Recv::Arriving(shared) = &s.recv {
                shared.finish(None);
            }
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

    /// A whole header block: a new stream's request, or a stream's trailers.
    fn header_block(&mut self, id: u32, end_stream: bool, block: Bytes) -> Result<(), ConnError> {
        if self.fields.capacity() > 256 {
            self.fields = Vec::new();
        }
        self.fields.clear();
        // Decoded whatever becomes of the stream: the table stays in step with the
        // client's. Fields past the list's limit are decoded but not kept.
        let list = self
            .decoder
            .decode(&block, &mut self.fields, MAX_HEADER_BYTES)?;
        if let Some(s) = self.streams.get_mut(&id) {
            if s.client_done {
                return self.stream_error(id, Reason::STREAM_CLOSED);
            }
            if !end_stream || list > MAX_HEADER_BYTES {
                return self.stream_error(id, Reason::PROTOCOL_ERROR);
            }
            let Some(trailers) = trailers(&mut self.fields) else {
                return self.stream_error(id, Reason::PROTOCOL_ERROR);
            };
            if s.expect_len.is_some_and(|n| n != s.received) {
                return self.stream_error(id, Reason::PROTOCOL_ERROR);
            }
            s.client_done = true;
            match &mut s.recv {
                Recv::Early { trailers: t, .. } => *t = Some(trailers),
                Recv::Arriving(shared) => shared.finish(Some(trailers)),
                Recv::Handed => {}
            }
            return Ok(());
        }
        if id <= self.last_id {
            // Trailers or headers of a stream already closed (reset, or refused).
            return Ok(());
        }
        if id.is_multiple_of(2) {
            return Err(protocol("a client opened an even stream"));
        }
        self.last_id = id;
        if self.client_goaway {
            frame::rst_stream(&mut self.out.buf, id, Reason::REFUSED_STREAM);
            return Ok(());
        }
        if self.streams.len() >= MAX_CONCURRENT_STREAMS {
            frame::rst_stream(&mut self.out.buf, id, Reason::REFUSED_STREAM);
            return Ok(());
        }
        if list > MAX_HEADER_BYTES {
            // RFC 9113 §10.5.1: 431, and the rest of the request refused.
            let out = &mut self.out;
            out.block.clear();
            out.encoder.begin(&mut out.block);
            out.encoder.status(&mut out.block, 431);
            frame::headers(&mut out.buf, id, &out.block, true, out.max_frame);
            if !end_stream {
                // Answered: the rest of the request is not wanted (RFC 9113 §8.1).
                frame::rst_stream(&mut out.buf, id, Reason::NO_ERROR);
            }
            return self.count_local_reset();
        }
        let Some((parts, expect_len)) = request(&mut self.fields) else {
            return self.stream_error_new(id);
        };
        if end_stream && expect_len.is_some_and(|n| n != 0) {
            return self.stream_error_new(id);
        }
        let wake = Arc::new(StreamWaker {
            id,
            queued: AtomicBool::new(false),
            ready: self.ready.clone(),
        });
        self.streams.insert(
            id,
            Stream {
                waker: Waker::from(wake.clone()),
                wake,
                phase: Phase::Waiting(parts),
                recv: Recv::Early {
                    data: Chunks::None,
                    trailers: None,
                },
                client_done: end_stream,
                recv_window: i64::from(STREAM_WINDOW),
                send_window: self.peer_initial_window,
                expect_len,
                received: 0,
                blocked: false,
            },
        );
        self.opened.push(id);
        Ok(())
    }

    /// Take stream `id` out of the connection, its request ended with `reason` for a
    /// reader still taking its body; bytes it received that no reader will take are
    /// given back to the connection's window (or a client that cancels streams early
    /// would shrink its own connection's window for good).
    fn remove(&mut self, id: u32, reason: Reason) -> Option<Stream<Fut>> {
        let s = self.streams.remove(&id)?;
        match &s.recv {
            Recv::Early { data, .. } => self.unannounced += data.len(),
            Recv::Arriving(shared) => shared.reset(reason),
            Recv::Handed => {}
        }
        Some(s)
    }

    /// Reset stream `id` for the client's error.
    fn stream_error(&mut self, id: u32, reason: Reason) -> Result<(), ConnError> {
        self.remove(id, reason);
        frame::rst_stream(&mut self.out.buf, id, reason);
        self.count_local_reset()
    }

    /// Refuse a new stream `id` as malformed (RFC 9113 §8.1.1).
    fn stream_error_new(&mut self, id: u32) -> Result<(), ConnError> {
        frame::rst_stream(&mut self.out.buf, id, Reason::PROTOCOL_ERROR);
        self.count_local_reset()
    }

    fn count_local_reset(&mut self) -> Result<(), ConnError> {
        self.local_resets += 1;
        if self.local_resets > MAX_LOCAL_ERROR_RESETS {
            return Err(ConnError::Protocol(
                Reason::ENHANCE_YOUR_CALM,
                "too many malformed streams",
            ));
        }
        Ok(())
    }

    /// Hand the streams opened in this turn to the handler, each with its body: complete
    /// when it came with the headers, else still arriving.
    fn dispatch(&mut self) {
        for id in self.opened.drain(..) {
            let Some(s) = self.streams.get_mut(&id) else {
                continue;
            };
            let Phase::Waiting(parts) = &mut s.phase else {
                continue;
            };
            let parts = std::mem::replace(parts, Request::new(()).into_parts().0);
            let body = match std::mem::replace(&mut s.recv, Recv::Handed) {
                Recv::Early { data, trailers } if s.client_done => {
                    RequestBody::complete(data, trailers, self.releases.clone())
                }
                Recv::Early { data, .. } => {
                    let shared = Shared::new(id, self.releases.clone(), data);
                    s.recv = Recv::Arriving(shared.clone());
                    RequestBody::arriving(shared)
                }
                other => {
                    s.recv = other;
                    continue;
                }
            };
            let handling = (self.handler)(Request::from_parts(parts, body));
            s.phase = Phase::Handling(Box::pin(handling));
            self.runnable.push_back(id);
        }
    }

    /// Give the client back the window its bodies' readers freed.
    fn give_back(&mut self, cx: &Context<'_>) {
        let half = CONNECTION_WINDOW as usize / 2;
        self.releases.set_lazy(self.recv_window >= half as i64);
        self.unannounced += self.releases.collect(cx, &mut self.scratch);
        for id in self.scratch.drain(..) {
            if let Some(s) = self.streams.get_mut(&id)
                && !s.client_done
                && let Recv::Arriving(shared) = &s.recv
            {
                let n = shared.take_unannounced();
                if n > 0 {
                    s.recv_window += n as i64;
                    frame::window_update(&mut self.out.buf, id, n as u32);
                }
            }
        }
        // Batched while more than half the window is open; once less is, every byte
        // taken goes back at once (a stalled stream holding most of the window must not
        // hold back what the streams beside it freed).
        if self.unannounced >= half || self.unannounced > 0 && self.recv_window < half as i64 {
            let n = std::mem::take(&mut self.unannounced);
            self.recv_window += n as i64;
            frame::window_update(&mut self.out.buf, 0, n as u32);
        }
    }

    /// Poll the streams that were woken or unblocked.
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
                Driven::Finished => {
                    self.client_resets = self.client_resets.saturating_sub(1);
                    if let Some(s) = self.remove(id, Reason::CANCEL)
                        && !s.client_done
                    {
                        // The answer is complete: the rest of the request is not needed
                        // (RFC 9113 §8.1).
                        frame::rst_stream(&mut self.out.buf, id, Reason::NO_ERROR);
                    }
                }
                Driven::Broken(reason) => {
                    self.remove(id, reason);
                    frame::rst_stream(&mut self.out.buf, id, reason);
                }
            }
        }
    }
}

/// Poll one stream as far as it goes: its handler, then its response's frames.
fn drive<Fut>(s: &mut Stream<Fut>, id: u32, out: &mut Out) -> Driven
where
    Fut: Future<Output = Response<ProxyBody>>,
{
    let mut cx = Context::from_waker(&s.waker);
    loop {
        match &mut s.phase {
            Phase::Waiting(_) => return Driven::Waiting,
            Phase::Handling(handling) => {
                let Poll::Ready(response) = handling.as_mut().poll(&mut cx) else {
                    return Driven::Waiting;
                };
                let (head, body) = response.into_parts();
                let end = body.is_end_stream();
                let len = (!end).then(|| body.size_hint().exact()).flatten();
                write_head(out, id, &head, end, len);
                if end {
                    return Driven::Finished;
                }
                s.phase = Phase::Sending {
                    body,
                    pending: None,
                };
            }
            Phase::Sending { body, pending } => {
                if out.buf.len() >= WRITE_HIGH_WATER {
                    return Driven::Deferred;
                }
                if let Some((data, end)) = pending {
                    let end = *end;
                    match write_data(out, id, data, end, &mut s.send_window) {
                        Written::All if end => return Driven::Finished,
                        Written::All => *pending = None,
                        Written::Stream => return Driven::Waiting,
                        Written::Connection => return Driven::Blocked,
                    }
                    continue;
                }
                match Pin::new(&mut *body).poll_frame(&mut cx) {
                    Poll::Pending => return Driven::Waiting,
                    Poll::Ready(None) => {
                        frame::data(&mut out.buf, id, &[], true);
                        return Driven::Finished;
                    }
                    Poll::Ready(Some(Err(e))) => {
                        tracing::debug!(error = %e, "response to the client ended early");
                        return Driven::Broken(reset_reason_of(&e));
                    }
                    Poll::Ready(Some(Ok(f))) => match f.into_data() {
                        Ok(data) => {
                            let end = body.is_end_stream();
                            if !data.is_empty() || end {
                                *pending = Some((data, end));
                            }
                        }
                        Err(f) => {
                            if let Ok(trailers) = f.into_trailers() {
                                write_trailers(out, id, &trailers);
                                return Driven::Finished;
                            }
                        }
                    },
                }
            }
        }
    }
}

fn write_head(out: &mut Out, id: u32, head: &http::response::Parts, end: bool, len: Option<u64>) {
    out.block.clear();
    out.encoder.begin(&mut out.block);
    out.encoder.status(&mut out.block, head.status.as_u16());
    for (name, value) in &head.headers {
        if !connection_specific(name) {
            out.encoder.header(&mut out.block, name, value);
        }
    }
    if let Some(len) = len
        && !head.headers.contains_key(header::CONTENT_LENGTH)
    {
        out.encoder.header(
            &mut out.block,
            &header::CONTENT_LENGTH,
            &HeaderValue::from(len),
        );
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
