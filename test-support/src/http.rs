//! HTTP/1.1 written by hand on a socket: what a test needs to send malformed, partial or
//! exact bytes and see exactly what comes back.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// One GET with `Connection: close`; the whole response as text.
pub async fn get(addr: SocketAddr, host: &str, path: &str) -> String {
    raw(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
}

/// Send raw bytes; what comes back until the peer closes (or 5 s), as text.
pub async fn raw(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.write_all(bytes)
        .await
        .unwrap_or_else(|e| panic!("write to {addr}: {e}"));
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Write `msg` and expect it echoed back within 5 s.
pub async fn roundtrip<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, msg: &[u8]) {
    s.write_all(msg).await.expect("write");
    let mut buf = vec![0u8; msg.len()];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut buf))
        .await
        .expect("echo in time")
        .expect("read");
    assert_eq!(buf, msg);
}
