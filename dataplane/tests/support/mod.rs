//! Helpers the dataplane's test files share.

#![allow(dead_code, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use sluice_dataplane::config::Timeouts;
use sluice_dataplane::{AppProtocol, EndpointConfig, ProxyConfig, ServiceConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A proxy with one HTTP service, `web`, in front of `upstream`; its listen address.
pub async fn http_proxy(
    upstream: SocketAddr,
    timeouts: Timeouts,
) -> (sluice_dataplane::Bound, SocketAddr) {
    let config = ProxyConfig {
        services: vec![ServiceConfig {
            name: "web".into(),
            listen: "127.0.0.1:0".parse().unwrap(),
            protocol: AppProtocol::Http,
            endpoints: vec![EndpointConfig::new(upstream)],
            timeouts,
            retry_ratio: 0.2,
            exported: false,
        }],
        ..Default::default()
    };
    let bound = sluice_dataplane::build(&config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = bound.proxy.addr_of("web").unwrap();
    (bound, addr)
}

/// One HTTP/1.1 GET with `Connection: close`; the whole response as text.
pub async fn get(addr: SocketAddr, host: &str, path: &str) -> String {
    raw(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
}

/// Send raw bytes; what comes back until the proxy closes (or 5 s), as text.
pub async fn raw(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Write `msg` and expect it echoed back.
pub async fn roundtrip<S: AsyncReadExt + AsyncWriteExt + Unpin>(s: &mut S, msg: &[u8]) {
    s.write_all(msg).await.unwrap();
    let mut buf = vec![0u8; msg.len()];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut buf))
        .await
        .expect("echo in time")
        .unwrap();
    assert_eq!(buf, msg);
}
