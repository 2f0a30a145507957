//! Bodies over HTTP/2 streams of the `h2` crate, both ways and on both sides of the
//! proxy: a received stream's DATA and trailers as a [`Body`] ([`H2Body`]: a client's
//! request, an endpoint's response), and any body written to a stream with HTTP/2 flow
//! control ([`pipe`]: a request to the endpoint, a response to the client).

use std::error::Error as StdError;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use h2::{RecvStream, SendStream};
use hyper::body::{Body, Frame, SizeHint};
use tokio::task::AbortHandle;

use super::local::BodyError;

/// Why a body stopped before all of it was written to the stream.
#[derive(Debug, thiserror::Error)]
pub enum PipeError {
    /// The body being written failed (the client's request, the endpoint's response).
    #[error("the body broke off: {0}")]
    Source(BodyError),
    /// The stream written to failed.
    #[error(transparent)]
    Stream(#[from] h2::Error),
    #[error("the peer closed the stream")]
    Closed,
    #[error("the peer reset the stream: {0:?}")]
    Reset(h2::Reason),
}

impl PipeError {
    /// The reason to reset the stream written to with, when the body it carried broke:
    /// the reset the body's own stream got (an endpoint's CANCEL reaches the client as
    /// CANCEL, as hyper's server passed it on), else INTERNAL_ERROR.
    pub fn reset_reason(&self) -> h2::Reason {
        match self {
            PipeError::Source(e) => reset_reason_of(e),
            _ => h2::Reason::INTERNAL_ERROR,
        }
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

/// Write `body` to `stream` with HTTP/2 flow control: its DATA as the peer's window
/// allows, then its trailers or an empty DATA frame ending the stream.
pub async fn pipe<B>(body: &mut B, stream: &mut SendStream<Bytes>) -> Result<(), PipeError>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BodyError>,
{
    loop {
        // Waiting for the body's next bytes, but not past the peer's reset: the stream is
        // then gone (and on the upstream side a retry may be reading the same client
        // body). Asked only while waiting: poll_reset takes the connection's lock.
        let next = std::future::poll_fn(|cx| {
            if let Poll::Ready(frame) = Pin::new(&mut *body).poll_frame(cx) {
                return Poll::Ready(Ok(frame));
            }
            stream.poll_reset(cx).map(|reset| {
                Err(match reset {
                    Ok(reason) => PipeError::Reset(reason),
                    Err(e) => PipeError::Stream(e),
                })
            })
        })
        .await?;
        let Some(frame) = next else { break };
        let frame = frame.map_err(|e| PipeError::Source(e.into()))?;
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

/// A received stream's body: DATA frames (their flow-control window given back as they
/// are taken), then trailers.
pub struct H2Body {
    recv: RecvStream,
    part: Part,
    /// A task still sending the other direction (the request body behind an endpoint's
    /// response), ended with this body: a response dropped for a retry must not leave it
    /// reading the client's body.
    body_task: Option<AbortHandle>,
}

impl H2Body {
    /// The body of `recv`; `body_task` is aborted when it is dropped.
    pub fn new(recv: RecvStream, body_task: Option<AbortHandle>) -> Self {
        Self {
            recv,
            part: Part::Data,
            body_task,
        }
    }
}

impl Drop for H2Body {
    fn drop(&mut self) {
        if let Some(task) = &self.body_task {
            task.abort();
        }
    }
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
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.part == Part::Data {
            match ready!(self.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    // Window given back as the reader takes the bytes: back-pressure.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_body_passes_its_streams_reset_on() {
        let cancel: BodyError = h2::Error::from(h2::Reason::CANCEL).into();
        assert_eq!(PipeError::Source(cancel).reset_reason(), h2::Reason::CANCEL);
        let other: BodyError = "no reason".into();
        assert_eq!(
            PipeError::Source(other).reset_reason(),
            h2::Reason::INTERNAL_ERROR
        );
        assert_eq!(PipeError::Closed.reset_reason(), h2::Reason::INTERNAL_ERROR);
    }
}
