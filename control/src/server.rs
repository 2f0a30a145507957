//! The HTTPS listener: TLS (rustls), HTTP/1.1 or HTTP/2 as ALPN chose, client-certificate
//! identity, and the bounds that keep one client from holding the server: a deadline for
//! the TLS handshake, for a connection's first bytes and for every request head; a limit
//! on connections served at once and on concurrent streams per HTTP/2 connection;
//! keep-alive pings that close HTTP/2 connections whose peer is gone.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio_rustls::TlsAcceptor;

use crate::auth::user_from_cert;
use crate::handlers::handle;
use crate::state::SharedState;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/2 keep-alive: a ping after this much silence, and how long its answer may take.
const H2_PING_INTERVAL: Duration = Duration::from_secs(30);
const H2_PING_TIMEOUT: Duration = Duration::from_secs(20);
/// Largest header block of an HTTP/2 request (kube-apiserver's 1 MiB).
const H2_MAX_HEADER_LIST: u32 = 1 << 20;

pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    state: SharedState,
    mut shutdown: watch::Receiver<bool>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let slots = Arc::new(Semaphore::new(state.limits.max_connections));
    loop {
        // A connection is accepted only when it can be served.
        let slot = tokio::select! {
            _ = shutdown.changed() => return,
            s = slots.clone().acquire_owned() => match s {
                Ok(s) => s,
                Err(_) => return,
            },
        };
        let (tcp, peer) = tokio::select! {
            _ = shutdown.changed() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let state = state.clone();
        let mut conn_shutdown = shutdown.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let cert_user = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| user_from_cert(c));
            let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
            // A client that connects and sends nothing is let go (HTTP/1.1's head deadline
            // covers the rest; HTTP/2's preface is these first bytes).
            let limits = state.limits.clone();
            let mut io = BufReader::new(tls);
            match tokio::time::timeout(limits.header_read_timeout, io.fill_buf()).await {
                Ok(Ok(b)) if !b.is_empty() => {}
                _ => {
                    tracing::debug!(%peer, "nothing sent in time: closed");
                    return;
                }
            }
            let service = service_fn(move |req| {
                let state = state.clone();
                let cert_user = cert_user.clone();
                async move { Ok::<_, Infallible>(handle(state, req, cert_user).await) }
            });
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout);
            builder
                .http2()
                .timer(TokioTimer::new())
                .max_concurrent_streams(limits.max_streams_per_connection)
                .max_header_list_size(H2_MAX_HEADER_LIST)
                .keep_alive_interval(H2_PING_INTERVAL)
                .keep_alive_timeout(H2_PING_TIMEOUT);
            // ALPN decides, as in kube-apiserver: HTTP/2 only when the client asked for it.
            let builder = if h2 {
                builder.http2_only()
            } else {
                builder.http1_only()
            };
            // Upgrades: `pods/exec`, `pods/attach` and `pods/portforward` switch to a
            // WebSocket or SPDY on HTTP/1.1.
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(%peer, error = %e, "connection ended with error");
                    }
                }
                _ = conn_shutdown.changed() => {}
            }
        });
    }
}
