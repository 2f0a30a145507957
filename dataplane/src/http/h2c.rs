//! A service's client connections in HTTP/2 with prior knowledge (h2c, gRPC): the
//! proxy's own server ([`super::h2_server`]) with every request forwarded
//! ([`super::forward`]), and a connection the server ended for the client's error
//! (rapid reset, floods, protocol errors) counted by the GOAWAY code it got.

use std::sync::Arc;

use http::Request;
use http_body_util::Either;
use tokio::io::{AsyncRead, AsyncWrite};

use super::forward;
use super::h2_recv::RequestBody;
use super::h2_server;
use crate::http2::frame::reason_name;
use crate::service::Service;

/// Serve one client connection of `svc` in HTTP/2.
pub async fn serve<I>(svc: Arc<Service>, io: I)
where
    I: AsyncRead + AsyncWrite + Unpin,
{
    let handler = {
        let svc = svc.clone();
        move |req: Request<RequestBody>| forward::handle(svc.clone(), req.map(Either::Right))
    };
    if let Some(reason) = h2_server::serve(io, handler).await {
        svc.metrics.goaway(&svc.name, reason_name(reason));
    }
}
