//! Accepting sockets: the bottom layer every listener of the proxy stands on (service
//! listeners, ingress, the east-west gateway).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::watch;

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
