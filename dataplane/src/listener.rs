//! Accepting connections for a service and handing each to L4 or L7 by protocol.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::config::{AppProtocol, ServiceConfig};
use crate::http::ProxyBody;
use crate::service::Service;

/// A client must send its request headers within this time (slowloris).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest request head (HTTP/1.1) and header list (HTTP/2).
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// How long detection waits for a client's first bytes before treating it as TCP.
const DETECT_TIMEOUT: Duration = Duration::from_millis(300);

/// A listening service.
pub struct Running {
    pub config: ServiceConfig,
    pub addr: SocketAddr,
    pub svc: Arc<RwLock<Arc<Service>>>,
    stop: watch::Sender<bool>,
}

impl Running {
    pub fn service(&self) -> Arc<Service> {
        self.svc
            .read()
            .map(|s| s.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Whether a configured service means this listener: the address it got, or the one
    /// it was configured with (with port 0, only for the same service name: every
    /// port-0 service gets a listener of its own).
    pub fn serves(&self, sc: &ServiceConfig) -> bool {
        self.addr == sc.listen
            || (self.config.listen == sc.listen
                && (sc.listen.port() != 0 || self.config.name == sc.name))
    }

    /// Stop accepting; connections already accepted run on.
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }
}

/// A non-blocking tokio listener on `addr` (port 0: any free port).
pub fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let std = std::net::TcpListener::bind(addr)?;
    std.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(std)
}

/// Accept on `listener` until `stopped` turns true, handing each connection to `serve`
/// (which spawns what it needs). Accept errors (EMFILE and friends) back off instead of
/// spinning. Every listener of the proxy — services, ingress, gateway — accepts here.
pub fn spawn_accept<F>(
    listener: tokio::net::TcpListener,
    mut stopped: watch::Receiver<bool>,
    what: &'static str,
    serve: F,
) where
    F: Fn(TcpStream, SocketAddr) + Send + 'static,
{
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stopped.changed() => return,
                a = listener.accept() => match a {
                    Ok((stream, peer)) => {
                        crate::busy_poll::activity();
                        serve(stream, peer)
                    }
                    Err(e) => {
                        tracing::warn!(listener = what, error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                },
            }
        }
    });
}

/// Bind the service's listener and start accepting.
pub fn start(config: &ServiceConfig, svc: Service) -> std::io::Result<Running> {
    let listener = bind(config.listen)?;
    let addr = listener.local_addr()?;
    let svc = Arc::new(RwLock::new(Arc::new(svc)));
    let (stop, stopped) = watch::channel(false);
    let shared = svc.clone();
    spawn_accept(listener, stopped, "service", move |stream, _| {
        let svc = shared
            .read()
            .map(|s| s.clone())
            .unwrap_or_else(|p| p.into_inner().clone());
        tokio::spawn(connection(svc, stream));
    });
    tracing::info!(service = %config.name, %addr, protocol = ?config.protocol, "listening");
    Ok(Running {
        config: config.clone(),
        addr,
        svc,
        stop,
    })
}

async fn connection(svc: Arc<Service>, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let protocol = match svc.protocol {
        AppProtocol::Detect => sniff(&stream).await,
        p => p,
    };
    match protocol {
        AppProtocol::Tcp | AppProtocol::Detect => crate::tcp::proxy(svc, stream).await,
        AppProtocol::Http => serve_service(svc, stream, false).await,
        AppProtocol::H2c | AppProtocol::Grpc => serve_service(svc, stream, true).await,
    }
}

/// Does the client speak HTTP? Its first bytes tell: an HTTP/2 preface or a method.
async fn sniff(stream: &TcpStream) -> AppProtocol {
    let mut buf = [0u8; 16];
    let deadline = tokio::time::Instant::now() + DETECT_TIMEOUT;
    loop {
        let n = match tokio::time::timeout_at(deadline, stream.peek(&mut buf)).await {
            Ok(Ok(n)) => n,
            _ => return AppProtocol::Tcp,
        };
        match looks_http(&buf[..n]) {
            Some(true) => return AppProtocol::Http,
            Some(false) => return AppProtocol::Tcp,
            None if n == 0 => return AppProtocol::Tcp,
            None => tokio::time::sleep(Duration::from_millis(1)).await,
        }
    }
}

/// `Some(true)` HTTP, `Some(false)` not, `None` too few bytes to tell.
fn looks_http(b: &[u8]) -> Option<bool> {
    const PREFIXES: [&[u8]; 10] = [
        b"PRI * HTTP/2",
        b"GET ",
        b"POST ",
        b"PUT ",
        b"HEAD ",
        b"DELETE ",
        b"OPTIONS ",
        b"PATCH ",
        b"TRACE ",
        b"CONNECT ",
    ];
    let mut undecided = false;
    for p in PREFIXES {
        let n = b.len().min(p.len());
        if b[..n] == p[..n] {
            if b.len() >= p.len() {
                return Some(true);
            }
            undecided = true;
        }
    }
    if undecided { None } else { Some(false) }
}

async fn serve_service(svc: Arc<Service>, stream: TcpStream, h2_only: bool) {
    if h2_only {
        serve_http(stream, true, move |req| {
            crate::http::handle(svc.clone(), req)
        })
        .await
    } else {
        crate::http::h1::serve(svc, stream).await
    }
}

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
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(error = %e, "client connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use super::looks_http;

    #[test]
    fn detection() {
        assert_eq!(looks_http(b"GET / HTTP/1.1\r\n"), Some(true));
        assert_eq!(looks_http(b"PRI * HTTP/2.0\r\n"), Some(true));
        assert_eq!(looks_http(b"GE"), None);
        assert_eq!(looks_http(b"\x16\x03\x01"), Some(false));
        assert_eq!(looks_http(b"SSH-2.0"), Some(false));
    }
}
