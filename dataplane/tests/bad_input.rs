//! Hostile clients: malformed HTTP, oversized headers, HTTP/2 rapid reset
//! (CVE-2023-44487), slowloris. Each gets a clear error or is cut off, and the proxy
//! keeps serving everyone else.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use sluice_local::echo::{self, EchoConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod support;
use support::{http_proxy, raw};

async fn setup() -> (echo::Bound, sluice_dataplane::Bound, SocketAddr) {
    let backend = echo::build(EchoConfig::on(
        [127, 0, 0, 1].into(),
        "east",
        "echo",
        "shop",
    ))
    .await
    .unwrap();
    let (proxy, addr) = http_proxy(backend.http, Default::default()).await;
    (backend, proxy, addr)
}

async fn serves(addr: SocketAddr) {
    let resp = raw(
        addr,
        b"GET /ok HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.contains("\"path\":\"/ok\""), "{resp}");
}

#[tokio::test]
async fn malformed_and_oversized_requests_get_4xx() {
    let (_b, _p, addr) = setup().await;
    let resp = raw(addr, b"GARBAGE\r\n\r\n").await;
    assert!(resp.starts_with("HTTP/1.1 400"), "{resp:?}");
    let resp = raw(addr, b"GET / HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n").await;
    assert!(resp.starts_with("HTTP/1.1 400"), "{resp:?}");
    let big = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n",
        "a".repeat(100 * 1024)
    );
    let resp = raw(addr, big.as_bytes()).await;
    assert!(resp.starts_with("HTTP/1.1 431"), "{resp:?}");
    serves(addr).await;
}

#[tokio::test]
async fn http2_rapid_reset_is_cut_off_and_others_are_served() {
    let (_b, p, addr) = setup().await;
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    let conn = tokio::spawn(conn);
    let start = Instant::now();
    let mut sent = 0u32;
    let mut client = client;
    for _ in 0..20_000 {
        let req = http::Request::builder()
            .uri(format!("http://{addr}/reset"))
            .body(())
            .unwrap();
        client = match client.ready().await {
            Ok(c) => c,
            Err(_) => break,
        };
        match client.send_request(req, true) {
            // Dropping the response future resets the stream (RST_STREAM CANCEL).
            Ok((resp, _)) => drop(resp),
            Err(_) => break,
        }
        sent += 1;
    }
    let ended = tokio::time::timeout(Duration::from_secs(10), conn).await;
    println!(
        "rapid reset: {sent} streams opened and reset in {:?}; connection: {ended:?}",
        start.elapsed()
    );
    serves(addr).await;
    let t = Instant::now();
    serves(addr).await;
    println!("next request served in {:?}", t.elapsed());
    // Nothing stays in flight once the reset streams are gone.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(p.proxy.active(), vec![("web".into(), String::new(), 0)]);
}

#[tokio::test]
async fn slowloris_connections_do_not_starve_others_and_are_closed() {
    let (_b, _p, addr) = setup().await;
    let mut slow = Vec::new();
    for _ in 0..300 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\nX-Slow: ")
            .await
            .unwrap();
        slow.push(s);
    }
    // Connections that send nothing at all.
    for _ in 0..50 {
        slow.push(TcpStream::connect(addr).await.unwrap());
    }
    for _ in 0..20 {
        serves(addr).await;
    }
    // The header timeout (10 s) closes them.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let mut closed = 0;
    for s in &mut slow {
        let mut buf = [0u8; 256];
        match tokio::time::timeout(Duration::from_millis(100), s.read(&mut buf)).await {
            Ok(Ok(_)) | Ok(Err(_)) => closed += 1,
            Err(_) => {}
        }
    }
    assert_eq!(closed, 350, "every slow or silent client was cut off");
    serves(addr).await;
}
