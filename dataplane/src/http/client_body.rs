//! A client's request body as either server hands it over: hyper's (HTTP/1.1, and what
//! the lean path hands on) or an HTTP/2 stream of the `h2` crate (h2c and gRPC services).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use super::h2_body::H2Body;
use super::local::BodyError;

/// The body of a downstream request.
pub enum ClientBody {
    Hyper(Incoming),
    H2(H2Body),
}

impl From<Incoming> for ClientBody {
    fn from(b: Incoming) -> Self {
        ClientBody::Hyper(b)
    }
}

impl From<H2Body> for ClientBody {
    fn from(b: H2Body) -> Self {
        ClientBody::H2(b)
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match self.get_mut() {
            ClientBody::Hyper(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
            ClientBody::H2(b) => Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ClientBody::Hyper(b) => b.is_end_stream(),
            ClientBody::H2(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ClientBody::Hyper(b) => b.size_hint(),
            ClientBody::H2(b) => b.size_hint(),
        }
    }
}
