//! A request body that streams to the endpoint while keeping a copy, so a failed attempt
//! can be retried on another endpoint with the same bytes.
//!
//! Buffering a whole body before the first attempt (as the proxy once did) breaks
//! streaming: a client-streaming or bidirectional gRPC call never ends its request body,
//! so it never reached the endpoint. Here the first attempt gets the client's bytes as
//! they arrive; a copy is kept up to [`REPLAY_LIMIT`]. A later attempt replays the copy,
//! then carries on with the client's body. Once the copy outgrows the limit it is
//! dropped and the request can no longer be retried; the attempt that holds the body
//! keeps streaming.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body_util::Either;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use prometheus_client::metrics::counter::Counter;

use super::h2_recv::RequestBody;
use super::local::BodyError;

/// A client's request body as either server hands it over: hyper's (HTTP/1.1, and what
/// the lean path hands to hyper) or an HTTP/2 stream of the h2 server (h2c, gRPC).
pub type ClientBody = Either<Incoming, RequestBody>;

/// Most bytes of a request body kept for retries.
pub const REPLAY_LIMIT: usize = 4 * 1024 * 1024;

/// Most bytes all requests' copies hold together in one proxy: under a flood of large
/// uploads requests stop being retryable instead of the proxy's memory growing.
pub const REPLAY_BUDGET: usize = 256 * 1024 * 1024;

/// The process-wide budget the copies draw from.
pub struct ReplayPool {
    held: AtomicUsize,
    limit: usize,
}

impl ReplayPool {
    pub const fn new(limit: usize) -> Self {
        Self {
            held: AtomicUsize::new(0),
            limit,
        }
    }

    /// The proxy's pool, of [`REPLAY_BUDGET`] bytes.
    pub fn global() -> &'static ReplayPool {
        static POOL: ReplayPool = ReplayPool::new(REPLAY_BUDGET);
        &POOL
    }

    /// Bytes the copies hold now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    fn take(&self, n: usize) -> bool {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                h.checked_add(n).filter(|t| *t <= self.limit)
            })
            .is_ok()
    }

    fn give(&self, n: usize) {
        self.held.fetch_sub(n, Ordering::AcqRel);
    }
}

/// Why an attempt's body ended in error.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("reading the request body: {0}")]
    Client(#[from] BodyError),
    #[error("request body over {REPLAY_LIMIT} bytes was already streamed to another endpoint")]
    NotReplayable,
}

/// What all attempts of one request share: the client's body and the copy of what it
/// has yielded so far.
struct Shared {
    /// The client's body; `None` once it ended.
    rest: Option<ClientBody>,
    /// Data frames yielded so far, in order (empty once `owner` is set).
    copy: Vec<Bytes>,
    copied: usize,
    trailers: Option<HeaderMap>,
    /// Set when the copy outgrew the limit: only this attempt may read on.
    owner: Option<u64>,
    attempts: u64,
    pool: &'static ReplayPool,
}

impl Shared {
    /// Give up the copy: only attempt `owner` reads on.
    fn drop_copy(&mut self, owner: u64) {
        self.owner = Some(owner);
        self.copy = Vec::new();
        self.pool.give(std::mem::take(&mut self.copied));
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.pool.give(self.copied);
    }
}

/// The handle a request keeps; it makes one [`ReplayBody`] per attempt.
#[derive(Clone)]
pub struct Replay {
    shared: Arc<Mutex<Shared>>,
    hint: SizeHint,
}

impl Replay {
    /// A request body whose copy draws on the proxy's [`ReplayPool::global`].
    pub fn new(body: ClientBody) -> Self {
        Self::in_pool(body, ReplayPool::global())
    }

    /// A request body whose copy draws on `pool`.
    pub fn in_pool(body: ClientBody, pool: &'static ReplayPool) -> Self {
        let hint = body.size_hint();
        let ended = body.is_end_stream();
        Self {
            shared: Arc::new(Mutex::new(Shared {
                rest: (!ended).then_some(body),
                copy: Vec::new(),
                copied: 0,
                trailers: None,
                owner: None,
                attempts: 0,
                pool,
            })),
            hint,
        }
    }

    /// Whether another attempt can still be given the whole body.
    pub fn replayable(&self) -> bool {
        lock(&self.shared).owner.is_none()
    }

    /// The body for the next attempt, counting the bytes it sends into `sent`.
    pub fn attempt(&self, sent: Counter) -> ReplayBody {
        let id = {
            let mut s = lock(&self.shared);
            s.attempts += 1;
            s.attempts
        };
        ReplayBody {
            shared: self.shared.clone(),
            id,
            next: 0,
            trailers_sent: false,
            hint: self.hint,
            sent,
        }
    }
}

/// One attempt's request body: the copy first, then the client's body.
pub struct ReplayBody {
    shared: Arc<Mutex<Shared>>,
    id: u64,
    /// Index into the copy of the next frame to yield.
    next: usize,
    trailers_sent: bool,
    hint: SizeHint,
    sent: Counter,
}

fn lock(m: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Body for ReplayBody {
    type Data = Bytes;
    type Error = ReplayError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ReplayError>>> {
        let this = &mut *self;
        let mut s = lock(&this.shared);
        if let Some(owner) = s.owner
            && owner != this.id
        {
            return Poll::Ready(Some(Err(ReplayError::NotReplayable)));
        }
        if s.owner.is_none()
            && let Some(data) = s.copy.get(this.next)
        {
            let data = data.clone();
            this.next += 1;
            this.sent.inc_by(data.len() as u64);
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        let Some(rest) = s.rest.as_mut() else {
            if this.trailers_sent {
                return Poll::Ready(None);
            }
            this.trailers_sent = true;
            return Poll::Ready(s.trailers.clone().map(|t| Ok(Frame::trailers(t))));
        };
        match Pin::new(rest).poll_frame(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                s.rest = None;
                this.trailers_sent = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => {
                    if s.owner.is_none() {
                        let n = data.len();
                        if s.copied + n > REPLAY_LIMIT || !s.pool.take(n) {
                            s.drop_copy(this.id);
                        } else {
                            s.copied += n;
                            s.copy.push(data.clone());
                            this.next += 1;
                        }
                    }
                    this.sent.inc_by(data.len() as u64);
                    Poll::Ready(Some(Ok(Frame::data(data))))
                }
                Err(frame) => {
                    if let Some(t) = frame.trailers_ref() {
                        s.trailers = Some(t.clone());
                        s.rest = None;
                        this.trailers_sent = true;
                    }
                    Poll::Ready(Some(Ok(frame)))
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        let s = lock(&self.shared);
        if s.owner.is_some_and(|owner| owner != self.id) {
            // Another attempt streams the body on: this one has nothing whole to send
            // (its next frame is the error), and must not look like an empty body.
            return false;
        }
        // A client body that knows it has ended (its last DATA taken, no trailers) ends
        // this one too: the last DATA frame then carries END_STREAM.
        s.rest.as_ref().is_none_or(|rest| rest.is_end_stream())
            && (s.owner.is_some() || self.next >= s.copy.len())
            && (self.trailers_sent || s.trailers.is_none())
    }

    fn size_hint(&self) -> SizeHint {
        self.hint
    }
}

/// A client's body with `chunks`, for tests of what is built on it. An `Incoming` can
/// only come from hyper: a server hands each request's body over.
#[cfg(test)]
pub(crate) async fn test_incoming(chunks: Vec<Bytes>) -> ClientBody {
    use http_body_util::StreamBody;
    use hyper_util::rt::TokioIo;
    let (client, server) = tokio::io::duplex(1 << 20);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let tx = std::sync::Mutex::new(Some(tx));
    tokio::spawn(async move {
        let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
            if let Some(tx) = tx.lock().unwrap().take() {
                let _ = tx.send(req.into_body());
            }
            async {
                Ok::<_, std::convert::Infallible>(http::Response::new(
                    http_body_util::Empty::<Bytes>::new(),
                ))
            }
        });
        let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .serve_connection(TokioIo::new(server), svc)
            .await;
    });
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(client),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let frames = chunks
        .into_iter()
        .map(|c| Ok::<_, std::convert::Infallible>(Frame::data(c)));
    let body = StreamBody::new(futures::stream::iter(frames.collect::<Vec<_>>()));
    tokio::spawn(async move {
        let _ = send.send_request(http::Request::new(body)).await;
    });
    Either::Left(rx.await.unwrap())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    use super::test_incoming as incoming;

    async fn all(b: ReplayBody) -> Result<Bytes, ReplayError> {
        Ok(b.collect().await?.to_bytes())
    }

    #[tokio::test]
    async fn a_second_attempt_gets_the_whole_body_again() {
        let body = incoming(vec![Bytes::from_static(b"ab"), Bytes::from_static(b"cd")]).await;
        let replay = Replay::new(body);
        let mut first = replay.attempt(Counter::default());
        // The first attempt reads one frame and fails.
        let f = std::future::poll_fn(|cx| Pin::new(&mut first).poll_frame(cx))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(f.into_data().unwrap(), "ab");
        drop(first);
        assert!(replay.replayable());
        let sent = Counter::default();
        assert_eq!(all(replay.attempt(sent.clone())).await.unwrap(), "abcd");
        assert_eq!(sent.get(), 4);
        assert_eq!(
            all(replay.attempt(Counter::default())).await.unwrap(),
            "abcd"
        );
    }

    #[tokio::test]
    async fn copies_draw_on_one_budget_and_give_it_back() {
        static POOL: ReplayPool = ReplayPool::new(3 * 1024 * 1024);
        let chunk = Bytes::from(vec![7u8; 1024 * 1024]);
        // Two bodies of 2 MiB each: the first keeps its copy, the second does not fit.
        let first = Replay::in_pool(incoming(vec![chunk.clone(); 2]).await, &POOL);
        let second = Replay::in_pool(incoming(vec![chunk.clone(); 2]).await, &POOL);
        assert_eq!(
            all(first.attempt(Counter::default())).await.unwrap().len(),
            2 << 20
        );
        assert_eq!(POOL.held(), 2 << 20);
        assert_eq!(
            all(second.attempt(Counter::default())).await.unwrap().len(),
            2 << 20
        );
        assert!(first.replayable());
        assert!(
            !second.replayable(),
            "over the budget: streamed once, not kept"
        );
        assert_eq!(POOL.held(), 2 << 20);
        drop(first);
        drop(second);
        assert_eq!(POOL.held(), 0, "every byte given back");
    }

    #[tokio::test]
    async fn a_body_over_the_limit_streams_once_and_is_not_replayed() {
        let chunk = Bytes::from(vec![7u8; 1024 * 1024]);
        let body = incoming(vec![chunk; 6]).await;
        let replay = Replay::new(body);
        let got = all(replay.attempt(Counter::default())).await.unwrap();
        assert_eq!(got.len(), 6 * 1024 * 1024);
        assert!(!replay.replayable());
        // The client's body has ended, but a later attempt has none of it: it must not
        // look like an empty body (a POST sent with END_STREAM and nothing in it).
        let late = replay.attempt(Counter::default());
        assert!(!late.is_end_stream());
        assert!(matches!(all(late).await, Err(ReplayError::NotReplayable)));
    }
}
