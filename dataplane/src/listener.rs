//! A service's listener: its accepted connections go to L4 ([`crate::tcp`]) or L7
//! ([`crate::http`]) by protocol, sniffed when the service says `detect`.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::accept::{bind, spawn_accept};
use crate::config::{AppProtocol, ServiceConfig};
use crate::service::Service;

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
        AppProtocol::Tcp | AppProtocol::Detect => crate::tcp::serve(svc, stream).await,
        AppProtocol::Http | AppProtocol::H2c | AppProtocol::Grpc => {
            crate::http::serve(svc, stream).await
        }
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
