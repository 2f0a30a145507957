//! Reaching an endpoint: over TCP when it is in this cluster, through its cluster's
//! gateway when the configuration says `via`. L4 and L7 both dial here, so a remote
//! endpoint is balanced, retried, drained and counted exactly like a local one.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::client::legacy::connect::{Connected, Connection};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::reason::Reason;
use crate::tunnel::{Peer, TunnelError, TunnelStream};

/// Endpoints one request or connection tries in all while they refuse its connection. A
/// refused connection delivered nothing, so it does not spend one of a request's attempts:
/// a scale-down or a rollout can stop several endpoints at once, and the proxy learns of
/// it only after their connections are refused.
pub const MAX_TRIED: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("connecting to {0}: {1}")]
    Connect(SocketAddr, std::io::Error),
    #[error("connecting to {0}: timed out")]
    Timeout(SocketAddr),
    #[error(transparent)]
    Tunnel(#[from] TunnelError),
}

impl DialError {
    pub fn reason(&self) -> Reason {
        match self {
            Self::Connect(..) => Reason::Connect,
            Self::Timeout(_) => Reason::Timeout,
            Self::Tunnel(TunnelError::Timeout(_)) => Reason::Timeout,
            Self::Tunnel(_) => Reason::Connect,
        }
    }
}

/// A connection to an endpoint, direct or tunnelled.
pub enum Upstream {
    Tcp(TcpStream),
    Tunnel(Box<TunnelStream>),
}

/// Connect to `addr`, through `via`'s gateway if given.
pub async fn dial(
    addr: SocketAddr,
    via: Option<&Arc<Peer>>,
    timeout: Duration,
) -> Result<Upstream, DialError> {
    match via {
        None => {
            let s = tokio::time::timeout(timeout, TcpStream::connect(addr))
                .await
                .map_err(|_| DialError::Timeout(addr))?
                .map_err(|e| DialError::Connect(addr, e))?;
            let _ = s.set_nodelay(true);
            Ok(Upstream::Tcp(s))
        }
        Some(peer) => {
            let s = tokio::time::timeout(timeout, peer.open(addr))
                .await
                .map_err(|_| DialError::Timeout(addr))??;
            Ok(Upstream::Tunnel(Box::new(s)))
        }
    }
}

/// Dial for hyper's pooled client, whose connector errors are `std::io::Error`s.
pub async fn dial_for_pool(
    addr: SocketAddr,
    via: Option<Arc<Peer>>,
    timeout: Duration,
) -> Result<hyper_util::rt::TokioIo<Upstream>, std::io::Error> {
    dial(addr, via.as_ref(), timeout)
        .await
        .map(hyper_util::rt::TokioIo::new)
        .map_err(|e| match e {
            DialError::Connect(_, e) => e,
            e => std::io::Error::new(std::io::ErrorKind::ConnectionRefused, e),
        })
}

impl Connection for Upstream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl AsyncRead for Upstream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Upstream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Upstream::Tunnel(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Upstream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Upstream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Upstream::Tunnel(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Upstream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Upstream::Tunnel(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Upstream::Tcp(s) => s.is_write_vectored(),
            Upstream::Tunnel(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Upstream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Upstream::Tunnel(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Upstream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Upstream::Tunnel(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
