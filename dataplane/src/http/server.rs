//! The client-facing hyper server (HTTP/1.1 and HTTP/2) with the limits every listener
//! of the proxy applies: header size and read timeout, a write deadline toward clients
//! that stop reading, HTTP/2 reset floods.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;

use super::local::ProxyBody;
use crate::deadline::{WRITE_TIMEOUT, WriteDeadline};

/// A client must send its request headers within this time (slowloris).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest request head (HTTP/1.1) and header list (HTTP/2).
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Serve HTTP/1.1 and HTTP/2 on `stream` with the limits every client-facing listener
/// gets (header size and read timeout, HTTP/2 reset floods).
pub async fn serve_http<I, F, Fut>(stream: I, h2_only: bool, handler: F)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<ProxyBody>> + Send + 'static,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_HEADER_BYTES)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(1024)
        .max_header_list_size(MAX_HEADER_BYTES as u32)
        // CVE-2023-44487 (rapid reset): a client that resets streams faster than they
        // are served gets GOAWAY.
        .max_pending_accept_reset_streams(Some(64))
        .max_local_error_reset_streams(Some(256));
    let builder = if h2_only {
        builder.http2_only()
    } else {
        builder
    };
    let handler = Arc::new(handler);
    let service = service_fn(move |req| {
        let handler = handler.clone();
        async move { Ok::<_, Infallible>(handler(req).await) }
    });
    if let Err(e) = builder
        .serve_connection(
            TokioIo::new(WriteDeadline::new(stream, WRITE_TIMEOUT)),
            service,
        )
        .await
    {
        tracing::debug!(error = %e, "client connection ended with an error");
    }
}
