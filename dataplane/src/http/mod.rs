//! L7: HTTP/1.1 and HTTP/2 (gRPC included) balanced per request over pooled upstream
//! connections.
//!
//! A request that could not reach an endpoint (connect error, or refused before any byte
//! was sent) is retried on another one whatever its method; an idempotent request is also
//! retried after a reset or a 503 from a draining endpoint. Retries spend a budget so an
//! outage cannot multiply load ([`attempts`]). A request with no endpoint to try waits,
//! bounded, for one to come ([`hold`]) rather than failing during a move's write pause.
//!
//! Plain HTTP/1.1 requests take [`h1`], a lean path that forwards heads and bodies
//! between sockets; [`forward`] serves the requests of h2c and gRPC services (from
//! [`h2_server`], on the proxy's own HTTP/2 framing, [`crate::http2`]) and those the lean
//! path hands to hyper's server (upgrades, chunked uploads, large bodies).
//!
//! Layers, each importing only those below it: [`server`] (client-facing hyper server
//! with its limits), [`headers`], [`local`] (the proxy's own responses), [`h2_head`],
//! [`h2_recv`] (bodies received on either HTTP/2 connection), [`h2_conn`] (what both
//! HTTP/2 connection tasks share), [`replay`], [`h2_exchange`] (requests and responses
//! crossing to the upstream connection's task), [`h2_upstream_conn`] (that task),
//! [`idle`], [`h2_client`] and [`upstream`] (per-endpoint connections), [`hold`],
//! [`attempts`], then [`forward`], [`h2_server`] and [`h1`], and this module's [`serve`]
//! on top.

pub mod attempts;
pub mod forward;
pub mod h1;
pub mod h2_client;
pub mod h2_conn;
pub mod h2_exchange;
pub mod h2_head;
pub mod h2_recv;
pub mod h2_server;
pub mod h2_upstream_conn;
pub mod h2c;
pub mod headers;
pub mod hold;
pub mod idle;
pub mod local;
pub mod replay;
pub mod server;
pub mod upstream;

use std::sync::Arc;

use tokio::net::TcpStream;

use crate::service::Service;

pub use forward::handle;
pub use local::ProxyBody;

/// Serve one client connection of an HTTP service: HTTP/1.1 on the lean path (which hands
/// what it does not handle to hyper), HTTP/2 only for h2c and gRPC services.
pub async fn serve(svc: Arc<Service>, stream: TcpStream) {
    if svc.h2_only() {
        h2c::serve(svc, stream).await
    } else {
        h1::serve(svc, stream).await
    }
}
