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

use std::error::Error as StdError;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use futures::future::{Either, select};
use h2::client::SendRequest;
use h2::{RecvStream, SendStream};
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};

use super::replay::{ReplayBody, ReplayError};
use crate::dial::{DialError, Upstream, dial};
use crate::tunnel::Peer;

/// Largest header list the endpoint may send back (as the client-facing server's).
const MAX_HEADER_LIST: u32 = super::server::MAX_HEADER_BYTES as u32;

/// Why a request to the endpoint failed.
#[derive(Debug, thiserror::Error)]
pub enum H2Error {
    /// No connection to the endpoint: nothing was sent.
    #[error("connecting: {0}")]
    Dial(#[from] DialError),
    /// The connection could not start HTTP/2: nothing was sent.
    #[error("HTTP/2 handshake: {0}")]
    Handshake(h2::Error),
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
        // A GOAWAY that ends the connection gracefully fails only the streams it did not
        // cover: those the endpoint never saw.
        let refused = e.reason() == Some(h2::Reason::REFUSED_STREAM)
            || (e.is_go_away() && e.reason() == Some(h2::Reason::NO_ERROR));
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
    conn: Mutex<Option<SendRequest<Bytes>>>,
    /// Held while dialing, so that a burst of requests makes one connection.
    dialing: tokio::sync::Mutex<()>,
}

impl H2Upstream {
    pub fn new(addr: SocketAddr, via: Option<Arc<Peer>>, timeout: Duration) -> Self {
        Self {
            addr,
            via,
            timeout,
            conn: Mutex::new(None),
            dialing: tokio::sync::Mutex::new(()),
        }
    }

    fn cached(&self) -> Option<SendRequest<Bytes>> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn forget(&self) {
        *self.conn.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// A sender ready for one more stream: the shared connection's, or a new
    /// connection's when there is none or it has closed.
    async fn ready(&self) -> Result<SendRequest<Bytes>, H2Error> {
        if let Some(s) = self.cached() {
            match s.ready().await {
                Ok(s) => return Ok(s),
                // Closed (GOAWAY, reset, the endpoint gone): dial again below.
                Err(_) => self.forget(),
            }
        }
        let _dialing = self.dialing.lock().await;
        if let Some(s) = self.cached() {
            return s.ready().await.map_err(H2Error::Handshake);
        }
        let io = dial(self.addr, self.via.as_ref(), self.timeout).await?;
        let (send, conn) = h2::client::Builder::new()
            .max_header_list_size(MAX_HEADER_LIST)
            .handshake::<Upstream, Bytes>(io)
            .await
            .map_err(H2Error::Handshake)?;
        let addr = self.addr;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(endpoint = %addr, error = %e, "upstream HTTP/2 connection ended");
            }
        });
        *self.conn.lock().unwrap_or_else(|p| p.into_inner()) = Some(send.clone());
        send.ready().await.map_err(H2Error::Handshake)
    }

    /// Send `req` and wait for the response head; the request body goes on streaming
    /// after it if it has not ended.
    pub async fn request(&self, req: Request<ReplayBody>) -> Result<Response<H2Body>, H2Error> {
        let (parts, body) = req.into_parts();
        let end = body.is_end_stream();
        let mut send = self.ready().await?;
        let (response, stream) = match send.send_request(Request::from_parts(parts, ()), end) {
            Ok(r) => r,
            // The stream was not opened: nothing reached the endpoint.
            Err(e) => {
                self.forget();
                return Err(H2Error::Refused(e));
            }
        };
        let response = if end {
            response.await
        } else {
            match select(Box::pin(send_body(body, stream)), response).await {
                Either::Left(((), response)) => response.await,
                Either::Right((response, rest)) => {
                    tokio::spawn(rest);
                    response
                }
            }
        };
        let (parts, recv) = response.map_err(H2Error::of_stream)?.into_parts();
        Ok(Response::from_parts(
            parts,
            H2Body {
                recv,
                part: Part::Data,
            },
        ))
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

#[derive(Debug, thiserror::Error)]
enum PipeError {
    #[error(transparent)]
    Client(#[from] ReplayError),
    #[error(transparent)]
    Endpoint(#[from] h2::Error),
    #[error("the endpoint closed the stream")]
    Closed,
}

async fn pipe(body: &mut ReplayBody, stream: &mut SendStream<Bytes>) -> Result<(), PipeError> {
    while let Some(frame) = body.frame().await {
        let frame = frame?;
        let end = body.is_end_stream();
        match frame.into_data() {
            Ok(data) => send_data(stream, data, end).await?,
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    stream.send_trailers(trailers)?;
                    return Ok(());
                }
            }
        }
        if end {
            return Ok(());
        }
    }
    // The body ended without saying so ahead of its last frame.
    stream.send_data(Bytes::new(), true)?;
    Ok(())
}

/// Send `data` as the stream's window allows.
async fn send_data(
    stream: &mut SendStream<Bytes>,
    mut data: Bytes,
    end: bool,
) -> Result<(), PipeError> {
    if data.is_empty() {
        if end {
            stream.send_data(data, true)?;
        }
        return Ok(());
    }
    while !data.is_empty() {
        stream.reserve_capacity(data.len());
        let n = match std::future::poll_fn(|cx| stream.poll_capacity(cx)).await {
            Some(n) => n?,
            None => return Err(PipeError::Closed),
        };
        if n == 0 {
            continue;
        }
        let chunk = data.split_to(n.min(data.len()));
        stream.send_data(chunk, end && data.is_empty())?;
    }
    Ok(())
}

/// A response body from the endpoint: DATA frames (their flow-control window given back
/// as they are taken), then trailers.
pub struct H2Body {
    recv: RecvStream,
    part: Part,
}

/// What an [`H2Body`] yields next.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Data,
    Trailers,
    Done,
}

impl Body for H2Body {
    type Data = Bytes;
    type Error = Box<dyn StdError + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.part == Part::Data {
            match ready!(self.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    // Window given back as the client takes the bytes: back-pressure.
                    let _ = self.recv.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e.into()))),
                None => self.part = Part::Trailers,
            }
        }
        if self.part == Part::Done {
            return Poll::Ready(None);
        }
        let polled = ready!(self.recv.poll_trailers(cx));
        self.part = Part::Done;
        match polled {
            Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(e.into()))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.part == Part::Done || (self.part == Part::Data && self.recv.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
