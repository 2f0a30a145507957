//! What crosses tasks between the upstream HTTP/2 client's requests and the task that
//! owns their connection ([`super::h2_upstream_conn`]): the queue a request is submitted
//! on ([`ConnShared`]), the slot its response head comes back in ([`Exchange`]), the
//! response body ([`H2Body`]), and why a request failed ([`H2Error`]).
//!
//! Each piece is a small lock held for a push or a take, never two at once, and a
//! wake-up given after the lock is let go: the connection's state itself stays the
//! task's own, unlocked (what the `h2` crate's shared stream store paid for per frame).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use futures::task::AtomicWaker;
use h2::Reason;
use http::{Response, request};
use hyper::body::{Body, Frame, SizeHint};

use super::h2_recv::RequestBody;
use super::local::BodyError;
use super::replay::ReplayBody;
use crate::dial::DialError;
use crate::http2::frame::reason_name;

/// Why a request to the endpoint failed.
#[derive(Debug, thiserror::Error)]
pub enum H2Error {
    /// No connection to the endpoint: nothing was sent.
    #[error("connecting: {0}")]
    Dial(#[from] DialError),
    /// The connection could not start HTTP/2: nothing was sent.
    #[error("HTTP/2 handshake: {0}")]
    Handshake(io::Error),
    /// The dial this request waited for failed: nothing was sent, and the request goes
    /// on to another endpoint rather than dial again behind the others.
    #[error("the connection to the endpoint just failed")]
    DialFailed,
    /// The endpoint refused the stream before processing it (REFUSED_STREAM, or a
    /// GOAWAY that did not cover it), or it never left the proxy: safe to send again.
    #[error("stream refused: {0}")]
    Refused(StreamError),
    /// The exchange broke after the request was (perhaps) processed.
    #[error("{0}")]
    Stream(StreamError),
}

impl H2Error {
    /// Whether the endpoint cannot have acted on the request.
    pub fn nothing_sent(&self) -> bool {
        !matches!(self, H2Error::Stream(_))
    }
}

/// What ended a stream; one connection's failure fails many streams, so it clones.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StreamError {
    #[error("the endpoint reset the stream ({})", reason_name(*.0))]
    Reset(Reason),
    #[error("the endpoint said GOAWAY ({}) before taking the stream", reason_name(*.0))]
    GoAway(Reason),
    #[error("the connection to the endpoint ended: {0}")]
    Closed(&'static str),
    #[error("the endpoint broke HTTP/2: {0}")]
    Protocol(&'static str),
    #[error("the request body broke off: {0}")]
    Body(Arc<str>),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock left plain data behind; carry on with it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A request on its way to the connection task.
pub struct Submit {
    pub parts: request::Parts,
    pub body: ReplayBody,
    pub exchange: Arc<Exchange>,
}

#[derive(Default)]
struct Queue {
    subs: Vec<Submit>,
    cancels: Vec<u32>,
    closed: bool,
}

/// The side of one upstream connection its requests see.
#[derive(Default)]
pub struct ConnShared {
    queue: Mutex<Queue>,
    waker: AtomicWaker,
    /// Takes no more requests (GOAWAY, stream ids spent, the connection ended).
    closed: AtomicBool,
    /// Its endpoint's client is gone: end once the streams in flight have.
    retired: AtomicBool,
}

impl ConnShared {
    /// Hand `sub` to the connection; given back when it takes no more requests.
    #[allow(clippy::result_large_err)]
    pub fn submit(&self, sub: Submit) -> Result<(), Submit> {
        let mut q = lock(&self.queue);
        if q.closed {
            return Err(sub);
        }
        q.subs.push(sub);
        drop(q);
        self.waker.wake();
        Ok(())
    }

    /// Stream `id`'s requester or reader is gone: reset it if it is still open.
    pub fn cancel(&self, id: u32) {
        lock(&self.queue).cancels.push(id);
        self.waker.wake();
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// No new requests will come: end once the streams in flight have.
    pub fn retire(&self) {
        self.retired.store(true, Ordering::Release);
        self.waker.wake();
    }

    pub fn retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// The connection task takes what was submitted and cancelled; `cx` is woken on
    /// the next submission.
    pub fn take(&self, cx: &Context<'_>, subs: &mut Vec<Submit>, cancels: &mut Vec<u32>) {
        self.waker.register(cx.waker());
        let mut q = lock(&self.queue);
        subs.append(&mut q.subs);
        cancels.append(&mut q.cancels);
    }

    /// Take no more requests; those submitted and not yet taken are given back.
    pub fn close(&self) -> Vec<Submit> {
        let mut q = lock(&self.queue);
        q.closed = true;
        self.closed.store(true, Ordering::Release);
        std::mem::take(&mut q.subs)
    }
}

struct ExchangeState {
    /// The stream's id, 0 until the connection opens it.
    id: u32,
    head: Option<Result<Response<H2Body>, H2Error>>,
    waker: Option<Waker>,
    /// The requester is gone.
    cancelled: bool,
}

/// One request's response head, handed from the connection task to the requester.
pub struct Exchange {
    state: Mutex<ExchangeState>,
    /// The stream has closed on the connection: dropping its body resets nothing.
    closed: AtomicBool,
}

impl Exchange {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(ExchangeState {
                id: 0,
                head: None,
                waker: None,
                cancelled: false,
            }),
            closed: AtomicBool::new(false),
        })
    }

    /// The connection opens the stream as `id`; `false` when the requester is gone
    /// (nothing is sent).
    pub fn open(&self, id: u32) -> bool {
        let mut s = lock(&self.state);
        s.id = id;
        !s.cancelled
    }

    pub fn is_cancelled(&self) -> bool {
        lock(&self.state).cancelled
    }

    /// The response head, or why there is none.
    pub fn answer(&self, head: Result<Response<H2Body>, H2Error>) {
        let mut s = lock(&self.state);
        if s.cancelled {
            drop(s);
            // Dropped unlocked: a body's drop may reach back to the connection.
            drop(head);
            return;
        }
        s.head = Some(head);
        let waker = s.waker.take();
        drop(s);
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// The stream is closed on the connection.
    pub fn set_closed(&self) {
        self.closed.store(true, Ordering::Release);
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The requester waits for the head.
    pub fn poll_head(&self, cx: &Context<'_>) -> Poll<Result<Response<H2Body>, H2Error>> {
        let mut s = lock(&self.state);
        if let Some(head) = s.head.take() {
            return Poll::Ready(head);
        }
        if !s.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            s.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    /// The requester is gone: the id of the stream to reset, if it was opened and is
    /// still open.
    pub fn cancel(&self) -> Option<u32> {
        let mut s = lock(&self.state);
        s.cancelled = true;
        let head = s.head.take();
        let id = s.id;
        drop(s);
        drop(head);
        (id != 0 && !self.is_closed()).then_some(id)
    }
}

/// An endpoint's response body: the stream's DATA and trailers as the connection received
/// them, its window given back as they are taken. Dropped before the stream closed (a
/// response dropped for a retry, a client gone), it resets the stream with CANCEL, which
/// also stops the request body still streaming on it.
pub struct H2Body {
    body: RequestBody,
    stream: Option<(u32, Arc<Exchange>, Arc<ConnShared>)>,
}

impl H2Body {
    /// `body` of stream `id`, whose exchange says when the stream has closed.
    pub fn new(body: RequestBody, id: u32, exchange: Arc<Exchange>, conn: Arc<ConnShared>) -> Self {
        Self {
            body,
            stream: Some((id, exchange, conn)),
        }
    }
}

impl Drop for H2Body {
    fn drop(&mut self) {
        if let Some((id, exchange, conn)) = self.stream.take()
            && !exchange.is_closed()
        {
            conn.cancel(id);
        }
    }
}

impl Body for H2Body {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    /// Unknown even when the body is complete: the server adds a content-length for an
    /// exact hint, which a gRPC response must not get.
    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
