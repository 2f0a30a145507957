//! The lean HTTP/1.1 path against a scripted upstream that answers in every framing
//! HTTP/1.1 has (length, chunked with trailers, until close, 1xx first, HEAD), closes
//! kept-alive connections under the proxy, and sends garbage; clients are hyper's and
//! raw sockets (pipelining). Requests the lean path hands to hyper are served too.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use sluice_dataplane::config::Timeouts;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

mod support;
use support::{http_proxy, raw};

/// Request heads the upstream received, and how many connections it accepted.
#[derive(Clone, Default)]
struct Seen {
    heads: Arc<Mutex<Vec<String>>>,
    connections: Arc<AtomicUsize>,
    /// Half-closed connections (`/half-close`) that the proxy then closed.
    closed_by_proxy: Arc<AtomicUsize>,
}

const BIG: usize = 1024 * 1024;

/// A scripted HTTP/1.1 upstream: the path picks the answer.
async fn upstream() -> (SocketAddr, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Seen::default();
    let s = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((conn, _)) = listener.accept().await else {
                return;
            };
            let id = s.connections.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(serve(conn, id, s.clone()));
        }
    });
    (addr, seen)
}

/// The data of a chunked body (sizes in hex, no extensions).
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(i) = raw.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(std::str::from_utf8(&raw[..i]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            break;
        }
        out.extend_from_slice(&raw[i + 2..i + 2 + size]);
        raw = &raw[i + 2 + size + 2..];
    }
    out
}

async fn serve(mut conn: TcpStream, id: usize, seen: Seen) {
    let mut buf = Vec::new();
    loop {
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        let chunked = head.lines().any(|l| {
            l.split_once(':').is_some_and(|(k, v)| {
                k.eq_ignore_ascii_case("transfer-encoding") && v.trim() == "chunked"
            })
        });
        // A chunked body (the proxy streams a chunked upload as it came) ends with
        // "0\r\n\r\n" (these tests send no trailers); its chunks are decoded.
        let end = loop {
            if !chunked && buf.len() >= head_end + length {
                break head_end + length;
            }
            if chunked && let Some(i) = buf[head_end..].windows(5).position(|w| w == b"0\r\n\r\n") {
                break head_end + i + 5;
            }
            let mut chunk = [0u8; 4096];
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let body = if chunked {
            dechunk(&buf[head_end..end])
        } else {
            buf[head_end..end].to_vec()
        };
        buf.drain(..end);
        seen.heads.lock().unwrap().push(head.clone());
        let mut words = head.split_whitespace();
        let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        let answer: Vec<u8> = match path {
            "/chunked" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nx-trailer: t\r\n\r\n".to_vec(),
            "/until-close" => {
                let _ = conn.write_all(b"HTTP/1.0 200 OK\r\n\r\nuntil close").await;
                return;
            }
            "/early" => b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec(),
            "/big" => {
                let mut r = format!("HTTP/1.1 200 OK\r\nContent-Length: {BIG}\r\n\r\n").into_bytes();
                r.extend((0..BIG).map(|i| (i % 251) as u8));
                r
            }
            "/garbage" => b"NOT HTTP AT ALL\r\n\r\n".to_vec(),
            "/options" => b"HTTP/1.1 200 OK\r\nConnection: x-hop\r\nX-Hop: 1\r\nX-End: 2\r\nContent-Length: 2\r\n\r\nok".to_vec(),
            "/silent" => {
                // Never answers; keeps the connection open.
                tokio::time::sleep(Duration::from_secs(30)).await;
                return;
            }
            "/half-close" => {
                // Keep-alive promised, then this side is done: the proxy should close
                // its end while the connection idles in its pool.
                let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
                let _ = conn.shutdown().await;
                let mut rest = [0u8; 64];
                while let Ok(n) = conn.read(&mut rest).await {
                    if n == 0 {
                        seen.closed_by_proxy.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                }
                return;
            }
            "/then-close" => {
                // Keep-alive promised, then the connection closes while idle.
                let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
                return;
            }
            _ => {
                let text = format!("conn={id} {method} {path} {}", String::from_utf8_lossy(&body));
                let mut r = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n", text.len()).into_bytes();
                r.extend_from_slice(b"\r\n");
                if method != "HEAD" {
                    r.extend_from_slice(text.as_bytes());
                }
                r
            }
        };
        if conn.write_all(&answer).await.is_err() {
            return;
        }
    }
}

async fn proxy(upstream: SocketAddr) -> (sluice_dataplane::Bound, SocketAddr) {
    http_proxy(upstream, Timeouts::default()).await
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn client(addr: SocketAddr) -> Sender {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    send
}

/// Status, headers and the whole body (trailers dropped).
async fn call(
    send: &mut Sender,
    method: &str,
    path: &str,
    body: &[u8],
) -> (u16, http::HeaderMap, Vec<u8>) {
    send.ready().await.unwrap();
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "web")
        .header("connection", "keep-alive")
        .header("keep-alive", "timeout=5")
        .body(Full::new(Bytes::copy_from_slice(body)))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.unwrap().to_bytes().to_vec();
    (parts.status.as_u16(), parts.headers, body)
}

#[tokio::test]
async fn every_response_framing_is_relayed_on_one_client_connection() {
    let (up, seen) = upstream().await;
    let (_p, addr) = proxy(up).await;
    let mut c = client(addr).await;

    let (status, _, body) = call(&mut c, "GET", "/chunked", b"").await;
    assert_eq!((status, body.as_slice()), (200, &b"hello world"[..]));
    let (status, _, body) = call(&mut c, "GET", "/early", b"").await;
    assert_eq!((status, body.as_slice()), (200, &b"ok"[..]));
    let (status, headers, body) = call(&mut c, "HEAD", "/head", b"").await;
    assert_eq!(status, 200);
    assert!(body.is_empty());
    assert_ne!(headers["content-length"], "0", "{headers:?}");
    let (status, _, body) = call(&mut c, "GET", "/big", b"").await;
    assert_eq!(status, 200);
    assert_eq!(body.len(), BIG);
    assert!(body.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
    let upload = vec![b'u'; 40_000];
    let (status, _, body) = call(&mut c, "POST", "/echo", &upload).await;
    assert_eq!(status, 200);
    assert!(body.ends_with(&upload), "{}", body.len());
    // Until-close ends the exchange and the client connection with it.
    let (status, headers, body) = call(&mut c, "GET", "/until-close", b"").await;
    assert_eq!((status, body.as_slice()), (200, &b"until close"[..]));
    assert_eq!(headers["connection"], "close");

    // The upstream got this hop's traceparent and none of the client's hop-by-hop headers.
    let heads = seen.heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 6);
    for h in &heads {
        let lower = h.to_ascii_lowercase();
        assert!(lower.contains("\r\ntraceparent: 00-"), "{h}");
        assert!(!lower.contains("keep-alive"), "{h}");
        assert!(lower.contains("\r\nhost: web\r\n"), "{h}");
    }
    // One upstream connection carried the keep-alive exchanges.
    assert!(seen.connections.load(Ordering::Relaxed) <= 2);
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let (up, _seen) = upstream().await;
    let (_p, addr) = proxy(up).await;
    let out = raw(
        addr,
        b"GET /a HTTP/1.1\r\nHost: web\r\n\r\nPOST /b HTTP/1.1\r\nHost: web\r\nContent-Length: 3\r\n\r\nxyzGET /c HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n",
    )
    .await;
    let a = out.find("GET /a ").unwrap();
    let b = out.find("POST /b xyz").unwrap();
    let c = out.find("GET /c ").unwrap();
    assert!(a < b && b < c, "{out}");
    assert_eq!(out.matches("HTTP/1.1 200 OK").count(), 3, "{out}");
    assert!(out.contains("connection: close"), "{out}");
}

#[tokio::test]
async fn a_connection_the_upstream_closed_while_idle_is_not_used() {
    let (up, seen) = upstream().await;
    let (_p, addr) = proxy(up).await;
    let mut c = client(addr).await;
    for i in 0..5 {
        let (status, _, body) = call(&mut c, "GET", "/then-close", b"").await;
        assert_eq!((status, body.as_slice()), (200, &b"ok"[..]), "round {i}");
        tokio::time::sleep(Duration::from_millis(20)).await;
        // Not idempotent: must not land on the dead connection (it would fail, not retry).
        let (status, _, body) = call(&mut c, "POST", "/after", b"p").await;
        assert_eq!(status, 200, "round {i}: {}", String::from_utf8_lossy(&body));
    }
    assert!(seen.connections.load(Ordering::Relaxed) >= 5);
}

#[tokio::test]
async fn a_garbage_response_is_a_502_and_the_proxy_serves_on() {
    let (up, _seen) = upstream().await;
    let (_p, addr) = proxy(up).await;
    let mut c = client(addr).await;
    let (status, headers, _) = call(&mut c, "POST", "/garbage", b"").await;
    assert_eq!(status, 502);
    assert_eq!(headers["x-sluice-error"], "reset");
    let (status, _, body) = call(&mut c, "GET", "/fine", b"").await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
}

#[tokio::test]
async fn requests_the_lean_path_hands_over_are_served_by_hyper() {
    let (up, seen) = upstream().await;
    let (_p, addr) = proxy(up).await;
    // A lean request first, then a chunked upload: the connection moves to hyper.
    let out = raw(
        addr,
        b"GET /first HTTP/1.1\r\nHost: web\r\n\r\nPOST /chunked-upload HTTP/1.1\r\nHost: web\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    )
    .await;
    assert!(out.contains("GET /first "), "{out}");
    assert!(out.contains("POST /chunked-upload abc"), "{out}");
    // HTTP/1.0.
    let out = raw(addr, b"GET /old HTTP/1.0\r\nHost: web\r\n\r\n").await;
    assert!(out.contains("GET /old"), "{out}");
    assert_eq!(seen.heads.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn an_endpoint_that_does_not_answer_is_a_504_each_time_and_the_connection_serves_on() {
    let (up, _seen) = upstream().await;
    let timeouts = Timeouts {
        request_ms: 300,
        ..Timeouts::default()
    };
    let (_p, addr) = http_proxy(up, timeouts).await;
    let mut c = client(addr).await;
    for round in 0..2 {
        let started = std::time::Instant::now();
        let (status, headers, _) = call(&mut c, "GET", "/silent", b"").await;
        let took = started.elapsed();
        assert_eq!(status, 504, "round {round}");
        assert_eq!(headers["x-sluice-error"], "timeout");
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(3),
            "round {round}: {took:?}"
        );
        // A quick answer after the timeout: the moved timer must not fire on it.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (status, _, body) = call(&mut c, "GET", "/fine", b"").await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }
}

#[tokio::test]
async fn connection_options_stay_on_their_hop_on_both_paths() {
    let (up, seen) = upstream().await;
    let (_p, addr) = proxy(up).await;
    // The lean path (HTTP/1.1), then hyper's (HTTP/1.0).
    for version in ["1.1", "1.0"] {
        let out = raw(
            addr,
            format!(
                "GET /options HTTP/{version}\r\nHost: web\r\nConnection: close, X-Mine\r\nX-Mine: 1\r\nX-Kept: 2\r\n\r\n"
            )
            .as_bytes(),
        )
        .await;
        let lower = out.to_ascii_lowercase();
        assert!(lower.starts_with(&format!("http/{version} 200")), "{out}");
        assert!(lower.contains("\r\nx-end: 2\r\n"), "{out}");
        assert!(
            !lower.contains("x-hop"),
            "the upstream's option reached the client: {out}"
        );
    }
    let heads = seen.heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 2);
    for h in &heads {
        let lower = h.to_ascii_lowercase();
        assert!(lower.contains("\r\nx-kept: 2\r\n"), "{h}");
        assert!(
            !lower.contains("x-mine"),
            "the client's option reached the upstream: {h}"
        );
    }
}

#[tokio::test]
async fn idle_connections_the_upstream_closed_are_reaped_without_traffic() {
    let (up, seen) = upstream().await;
    let (_p, addr) = proxy(up).await;
    let mut c = client(addr).await;
    let (status, _, body) = call(&mut c, "GET", "/half-close", b"").await;
    assert_eq!((status, body.as_slice()), (200, &b"ok"[..]));
    // No more requests: only the pool's reaper can notice the close.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while seen.closed_by_proxy.load(Ordering::Relaxed) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the proxy kept its end of a closed idle connection open"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
