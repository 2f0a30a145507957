//! Request bodies stream through the proxy: a bidirectional gRPC call gets each reply
//! before it sends its next message, an upload larger than the retry copy arrives whole,
//! and an upload cut off by one endpoint is replayed whole on another.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sluice_dataplane::AppProtocol;
use sluice_local::echo::{self, EchoConfig};
use sluice_local::grpc_stream::EchoStream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod support;

async fn backend() -> echo::Bound {
    echo::build(EchoConfig::on(
        [127, 0, 0, 1].into(),
        "east",
        "echo",
        "shop",
    ))
    .await
    .unwrap()
}

async fn proxy(
    protocol: AppProtocol,
    endpoints: Vec<SocketAddr>,
) -> (sluice_dataplane::Bound, SocketAddr) {
    support::proxy_of(protocol, endpoints, Default::default(), 1.0).await
}

/// The `bodyBytes` an echo reply reports, from a raw HTTP/1.1 response.
fn body_bytes(resp: &str) -> u64 {
    let body = resp.split("\r\n\r\n").nth(1).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("{resp}"));
    v["bodyBytes"].as_u64().unwrap()
}

async fn upload(addr: SocketAddr, method: &str, len: usize) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "{method} /upload HTTP/1.1\r\nHost: web\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&vec![b'x'; len]).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(20), s.read_to_string(&mut out))
        .await
        .expect("an answer in time")
        .unwrap();
    out
}

#[tokio::test]
async fn a_bidirectional_grpc_call_streams_through_the_proxy() {
    let b = backend().await;
    let (_p, addr) = proxy(AppProtocol::Grpc, vec![b.http]).await;
    let mut call = EchoStream::open(addr, "shop").await.unwrap();
    // Each reply must come while the call's request side is still open: a proxy that
    // waited for the whole request body would time out on the first one.
    for _ in 0..20 {
        let cluster = call.round_trip(Duration::from_secs(5)).await.unwrap();
        assert_eq!(cluster, "east");
    }
    call.close(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn an_upload_larger_than_the_retry_copy_arrives_whole() {
    let b = backend().await;
    let (_p, addr) = proxy(AppProtocol::Http, vec![b.http]).await;
    let len = 6 * 1024 * 1024;
    let resp = upload(addr, "POST", len).await;
    assert!(
        resp.starts_with("HTTP/1.1 200"),
        "{}",
        &resp[..resp.len().min(300)]
    );
    assert_eq!(body_bytes(&resp), len as u64);
}

#[tokio::test]
async fn an_upload_cut_off_by_one_endpoint_is_replayed_whole_on_another() {
    let b = backend().await;
    // An endpoint that reads part of each request, then closes the connection.
    let cutter = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
    let cut_addr = cutter.local_addr().unwrap();
    let cut = Arc::new(AtomicU64::new(0));
    let counted = cut.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = cutter.accept().await {
            counted.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 32 * 1024];
                let _ = s.read_exact(&mut buf).await;
            });
        }
    });
    let (_p, addr) = proxy(AppProtocol::Http, vec![cut_addr, b.http]).await;
    let len = 200 * 1000;
    for _ in 0..12 {
        let resp = upload(addr, "PUT", len).await;
        assert!(
            resp.starts_with("HTTP/1.1 200"),
            "{}",
            &resp[..resp.len().min(300)]
        );
        assert_eq!(body_bytes(&resp), len as u64);
    }
    assert!(
        cut.load(Ordering::Relaxed) > 0,
        "no request went to the cutting endpoint"
    );
}
