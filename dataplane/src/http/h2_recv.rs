//! A body received on one of the proxy's HTTP/2 connections: a client's request on the
//! server ([`super::h2_server`]), an endpoint's response on the upstream client
//! ([`super::h2_upstream_conn`]) — the DATA and trailers the connection received for one
//! stream, taken by whoever forwards them. The flow-control window the taken bytes free
//! goes back to the connection ([`Releases`]), which tells the peer: a reader that stops
//! taking stops the peer.
//!
//! A body complete before it is handed over (a unary gRPC call's HEADERS and DATA come
//! in one read) is [`RequestBody::complete`]: no lock, no waker. One still arriving is
//! shared with the connection behind a mutex.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use std::error::Error as StdError;

use bytes::Bytes;
use futures::task::AtomicWaker;
use http::HeaderMap;
use hyper::body::{Body, Frame, SizeHint};

use super::local::BodyError;

/// A stream's window is topped up once this much of it was taken (half of it, as h2 and
/// hyper do): fewer WINDOW_UPDATE frames, and the client never waits on a full window
/// while the reader keeps up.
pub const STREAM_UPDATE_AT: usize = 512 * 1024;

/// What a connection's bodies give back to it, across tasks: the bytes taken (the
/// connection's window) and the streams whose own window wants topping up.
#[derive(Default)]
pub struct Releases {
    taken: AtomicUsize,
    streams: Mutex<Vec<u32>>,
    waker: AtomicWaker,
    /// The connection's window is at least half open: bytes taken wait for its next
    /// turn (the peer's next frame, the next request) instead of waking it.
    lazy: AtomicBool,
}

impl Releases {
    /// `n` bytes were taken from a body (or dropped with it).
    fn taken(&self, n: usize) {
        // The connection is woken on the first release since it last looked, so it
        // always learns of bytes it has to give back — unless its window has room
        // enough that they can wait: a unary call's body then costs no wake-up. Its
        // window shrinks only by the peer's DATA, which wakes it anyway.
        if n > 0
            && self.taken.fetch_add(n, Ordering::AcqRel) == 0
            && !self.lazy.load(Ordering::Acquire)
        {
            self.waker.wake();
        }
    }

    /// Whether bytes taken may wait for the connection's next turn (set before each
    /// [`Releases::collect`], from the connection's window).
    pub fn set_lazy(&self, lazy: bool) {
        self.lazy.store(lazy, Ordering::Release);
    }

    fn stream_wants_update(&self, id: u32) {
        lock(&self.streams).push(id);
        self.waker.wake();
    }

    /// The bytes taken since the last call, and the streams to top up; wakes `cx` on the
    /// next release.
    pub fn collect(&self, cx: &Context<'_>, streams: &mut Vec<u32>) -> usize {
        self.waker.register(cx.waker());
        let mut pending = lock(&self.streams);
        streams.append(&mut pending);
        drop(pending);
        self.taken.swap(0, Ordering::AcqRel)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock left plain data behind; carry on with it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// DATA frames held for a reader: most bodies are one frame, kept without a queue.
#[derive(Default)]
pub enum Chunks {
    #[default]
    None,
    One(Bytes),
    Many(VecDeque<Bytes>),
}

impl Chunks {
    pub fn push(&mut self, data: Bytes) {
        match std::mem::take(self) {
            Chunks::None => *self = Chunks::One(data),
            Chunks::One(first) => *self = Chunks::Many(VecDeque::from([first, data])),
            Chunks::Many(mut q) => {
                q.push_back(data);
                *self = Chunks::Many(q);
            }
        }
    }

    fn pop(&mut self) -> Option<Bytes> {
        match self {
            Chunks::None => None,
            Chunks::One(_) => match std::mem::take(self) {
                Chunks::One(b) => Some(b),
                _ => None,
            },
            Chunks::Many(q) => q.pop_front(),
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            Chunks::None => true,
            Chunks::One(_) => false,
            Chunks::Many(q) => q.is_empty(),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Chunks::None => 0,
            Chunks::One(b) => b.len(),
            Chunks::Many(q) => q.iter().map(Bytes::len).sum(),
        }
    }
}

/// How the client's side of a stream ended, as a body still arriving sees it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum End {
    Open,
    Ended,
    Reset(h2::Reason),
}

struct State {
    data: Chunks,
    trailers: Option<HeaderMap>,
    end: End,
    waker: Option<Waker>,
    /// Taken since the connection last topped up the stream's window.
    unannounced: usize,
    /// The reader is gone: what arrives is given back at once.
    dropped: bool,
}

/// A body still arriving, shared by the connection (which adds to it) and its reader.
pub struct Shared {
    id: u32,
    releases: Arc<Releases>,
    state: Mutex<State>,
}

impl Shared {
    /// The body of stream `id`, with what arrived before it was handed over.
    pub fn new(id: u32, releases: Arc<Releases>, data: Chunks) -> Arc<Self> {
        Arc::new(Self {
            id,
            releases,
            state: Mutex::new(State {
                data,
                trailers: None,
                end: End::Open,
                waker: None,
                unannounced: 0,
                dropped: false,
            }),
        })
    }

    /// A DATA frame's bytes; `false` when the reader is gone (the connection gives the
    /// window back itself).
    pub fn push(&self, data: Bytes) -> bool {
        let mut s = lock(&self.state);
        if s.dropped {
            return false;
        }
        s.data.push(data);
        wake(&mut s);
        true
    }

    /// The client ended the stream, with trailers or without.
    pub fn finish(&self, trailers: Option<HeaderMap>) {
        let mut s = lock(&self.state);
        s.trailers = trailers;
        s.end = End::Ended;
        wake(&mut s);
    }

    /// The stream was reset (by the client, or by the server after its response).
    pub fn reset(&self, reason: h2::Reason) {
        let mut s = lock(&self.state);
        if s.end == End::Open {
            s.end = End::Reset(reason);
            wake(&mut s);
        }
    }

    /// The bytes taken since the last top-up of the stream's window.
    pub fn take_unannounced(&self) -> usize {
        std::mem::take(&mut lock(&self.state).unannounced)
    }
}

fn wake(s: &mut State) {
    if let Some(w) = s.waker.take() {
        w.wake();
    }
}

/// The reason to reset a stream with when the body it carried broke with `e`: the reset
/// the body's own stream got (an endpoint's CANCEL reaches the client as CANCEL, as
/// hyper's server passed it on), else INTERNAL_ERROR.
pub fn reset_reason_of(e: &BodyError) -> h2::Reason {
    let mut cause: Option<&(dyn StdError + 'static)> = Some(e.as_ref());
    while let Some(c) = cause {
        if let Some(reason) = c.downcast_ref::<h2::Error>().and_then(h2::Error::reason) {
            return reason;
        }
        cause = c.source();
    }
    h2::Reason::INTERNAL_ERROR
}

/// A body received on an HTTP/2 stream (named for its first use, the client's request
/// on the server).
pub struct RequestBody {
    kind: Kind,
}

enum Kind {
    Complete {
        data: Chunks,
        trailers: Option<HeaderMap>,
        releases: Arc<Releases>,
    },
    Arriving(Arc<Shared>),
}

impl RequestBody {
    /// A body whose every byte (and trailers) arrived before it was handed over.
    pub fn complete(data: Chunks, trailers: Option<HeaderMap>, releases: Arc<Releases>) -> Self {
        Self {
            kind: Kind::Complete {
                data,
                trailers,
                releases,
            },
        }
    }

    /// A body still arriving.
    pub fn arriving(shared: Arc<Shared>) -> Self {
        Self {
            kind: Kind::Arriving(shared),
        }
    }
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        match &mut self.kind {
            Kind::Complete { data, releases, .. } => releases.taken(data.len()),
            Kind::Arriving(shared) => {
                let mut s = lock(&shared.state);
                s.dropped = true;
                let n = s.data.len();
                s.data = Chunks::None;
                drop(s);
                shared.releases.taken(n);
            }
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match &mut self.kind {
            Kind::Complete {
                data,
                trailers,
                releases,
            } => {
                if let Some(d) = data.pop() {
                    releases.taken(d.len());
                    return Poll::Ready(Some(Ok(Frame::data(d))));
                }
                Poll::Ready(trailers.take().map(|t| Ok(Frame::trailers(t))))
            }
            Kind::Arriving(shared) => {
                let mut s = lock(&shared.state);
                if let Some(d) = s.data.pop() {
                    s.unannounced += d.len();
                    let update = s.end == End::Open && s.unannounced >= STREAM_UPDATE_AT;
                    drop(s);
                    shared.releases.taken(d.len());
                    if update {
                        shared.releases.stream_wants_update(shared.id);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(d))));
                }
                if let Some(t) = s.trailers.take() {
                    return Poll::Ready(Some(Ok(Frame::trailers(t))));
                }
                match s.end {
                    End::Ended => Poll::Ready(None),
                    End::Reset(reason) => {
                        let e: BodyError = Box::new(h2::Error::from(reason));
                        Poll::Ready(Some(Err(e)))
                    }
                    End::Open => {
                        if !s.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                            s.waker = Some(cx.waker().clone());
                        }
                        Poll::Pending
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Complete { data, trailers, .. } => data.is_empty() && trailers.is_none(),
            Kind::Arriving(shared) => {
                let s = lock(&shared.state);
                s.end == End::Ended && s.data.is_empty() && s.trailers.is_none()
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Complete { data, .. } => SizeHint::with_exact(data.len() as u64),
            Kind::Arriving(_) => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn taken_bytes_go_back_to_the_connection() {
        let releases = Arc::new(Releases::default());
        let shared = Shared::new(1, releases.clone(), Chunks::One(Bytes::from("ab")));
        let mut body = RequestBody::arriving(shared.clone());
        assert!(shared.push(Bytes::from("cde")));
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", "0".parse().unwrap());
        shared.finish(Some(trailers));
        let got = (&mut body).collect().await.unwrap();
        assert_eq!(got.trailers().unwrap()["grpc-status"], "0");
        assert_eq!(got.to_bytes(), "abcde");
        let waker = futures::task::noop_waker();
        let mut streams = Vec::new();
        assert_eq!(
            releases.collect(&Context::from_waker(&waker), &mut streams),
            5
        );
        assert!(body.is_end_stream());
    }

    #[tokio::test]
    async fn a_dropped_reader_gives_its_window_back_and_takes_no_more() {
        let releases = Arc::new(Releases::default());
        let shared = Shared::new(3, releases.clone(), Chunks::One(Bytes::from("abc")));
        drop(RequestBody::arriving(shared.clone()));
        assert!(!shared.push(Bytes::from("more")));
        let waker = futures::task::noop_waker();
        let mut streams = Vec::new();
        assert_eq!(
            releases.collect(&Context::from_waker(&waker), &mut streams),
            3
        );
        let complete =
            RequestBody::complete(Chunks::One(Bytes::from("xy")), None, releases.clone());
        drop(complete);
        assert_eq!(
            releases.collect(&Context::from_waker(&waker), &mut streams),
            2
        );
    }

    #[test]
    fn a_broken_body_passes_its_streams_reset_on() {
        let cancel: BodyError = h2::Error::from(h2::Reason::CANCEL).into();
        assert_eq!(reset_reason_of(&cancel), h2::Reason::CANCEL);
        let other: BodyError = "no reason".into();
        assert_eq!(reset_reason_of(&other), h2::Reason::INTERNAL_ERROR);
    }

    #[tokio::test]
    async fn a_reset_stream_breaks_the_body_with_its_reason() {
        let releases = Arc::new(Releases::default());
        let shared = Shared::new(5, releases, Chunks::None);
        let mut body = RequestBody::arriving(shared.clone());
        shared.reset(h2::Reason::CANCEL);
        let e = body.frame().await.unwrap().unwrap_err();
        let reason = e.downcast_ref::<h2::Error>().and_then(h2::Error::reason);
        assert_eq!(reason, Some(h2::Reason::CANCEL));
    }
}
