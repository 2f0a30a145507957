//! HTTP/2 streams through the proxy end as they end on either side, on a gRPC service
//! and on an HTTP service that a client speaks h2c to: a client's cancel reaches the
//! endpoint as a reset, an endpoint's reset reaches the client with its reason, a
//! response larger than every window reaches a slow reader whole, trailers arrive, a
//! stream whose endpoint stops reading leaves its siblings' bodies flowing, and CONNECT
//! is refused.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use h2::RecvStream;
use h2::server::SendResponse;
use http::{HeaderMap, Request, Response};
use sluice_dataplane::AppProtocol;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc};

mod support;

const MIB: usize = 1024 * 1024;

/// Bytes of the large response: more than the proxy's windows toward the client (1 MiB
/// per stream and connection) and the endpoint (2 MiB per stream).
const LARGE: usize = 8 * 1024 * 1024;

/// What the endpoint saw of a stream.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// The client's side reset the stream, with this reason.
    Reset(h2::Reason),
}

/// The test side of an endpoint: what it saw, and the signal to reset `/reset`.
struct Endpoint {
    addr: SocketAddr,
    seen: mpsc::UnboundedReceiver<Seen>,
    reset_now: Arc<Notify>,
}

/// An h2c endpoint answering by path: `/cancel` sends a head and waits (reporting the
/// reset it then sees), `/reset` sends a head and a DATA frame and resets with
/// ENHANCE_YOUR_CALM when told, `/large` sends [`LARGE`] bytes and trailers, `/stall`
/// never reads its request body, `/len` reads it and answers with its length.
async fn endpoint() -> Endpoint {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (seen, rx) = mpsc::unbounded_channel();
    let reset_now = Arc::new(Notify::new());
    let reset = reset_now.clone();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let (seen, reset) = (seen.clone(), reset.clone());
            tokio::spawn(async move {
                // A connection window wide enough that a stream left unread does not
                // stall the endpoint's own connection: what is measured is the proxy's.
                let handshake = h2::server::Builder::new()
                    .initial_connection_window_size(16 * 1024 * 1024)
                    .handshake::<_, Bytes>(sock);
                let Ok(mut conn) = handshake.await else {
                    return;
                };
                while let Some(Ok((req, respond))) = conn.accept().await {
                    tokio::spawn(answer(req, respond, seen.clone(), reset.clone()));
                }
            });
        }
    });
    Endpoint {
        addr,
        seen: rx,
        reset_now,
    }
}

async fn answer(
    req: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    seen: mpsc::UnboundedSender<Seen>,
    reset: Arc<Notify>,
) {
    let (head, mut body) = req.into_parts();
    match head.uri.path() {
        // Holds the stream and never reads its body.
        "/stall" => {
            let _hold = (body, respond);
            std::future::pending::<()>().await;
            return;
        }
        // Reads the whole body, then answers with its length.
        "/len" => {
            let mut len = 0;
            while let Some(Ok(data)) = body.data().await {
                len += data.len();
                let _ = body.flow_control().release_capacity(data.len());
            }
            let resp = Response::builder().header("x-len", len).body(()).unwrap();
            let _ = respond.send_response(resp, true);
            return;
        }
        _ => {}
    }
    let Ok(mut send) = respond.send_response(Response::new(()), false) else {
        return;
    };
    match head.uri.path() {
        "/cancel" => {
            if let Ok(reason) = std::future::poll_fn(|cx| send.poll_reset(cx)).await {
                let _ = seen.send(Seen::Reset(reason));
            }
        }
        "/reset" => {
            let _ = send.send_data(Bytes::from_static(b"partial"), false);
            reset.notified().await;
            send.send_reset(h2::Reason::ENHANCE_YOUR_CALM);
        }
        "/large" => {
            let mut left = LARGE;
            while left > 0 {
                let n = left.min(64 * 1024);
                send.reserve_capacity(n);
                let Some(Ok(got)) = std::future::poll_fn(|cx| send.poll_capacity(cx)).await else {
                    return;
                };
                let got = got.min(n);
                if got == 0 {
                    continue;
                }
                if send.send_data(Bytes::from(vec![b'x'; got]), false).is_err() {
                    return;
                }
                left -= got;
            }
            let mut trailers = HeaderMap::new();
            trailers.insert("grpc-status", "0".parse().unwrap());
            let _ = send.send_trailers(trailers);
        }
        _ => send.send_reset(h2::Reason::INTERNAL_ERROR),
    }
}

/// An h2c client connection to `addr`.
async fn client(addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
    let sock = TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::handshake(sock).await.unwrap();
    tokio::spawn(conn);
    send
}

fn request(path: &str) -> Request<()> {
    Request::post(format!("http://web{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap()
}

async fn within<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .expect("in time")
}

async fn cancel_reaches_the_endpoint(protocol: AppProtocol) {
    let mut up = endpoint().await;
    let (_p, addr) = support::proxy_of(protocol, vec![up.addr], Default::default(), 1.0).await;
    let mut send = client(addr).await.ready().await.unwrap();
    let (response, mut body) = send.send_request(request("/cancel"), false).unwrap();
    let response = within(response).await.unwrap();
    assert_eq!(response.status(), 200);
    body.send_reset(h2::Reason::CANCEL);
    assert_eq!(
        within(up.seen.recv()).await,
        Some(Seen::Reset(h2::Reason::CANCEL))
    );
}

async fn reset_reaches_the_client(protocol: AppProtocol) {
    let up = endpoint().await;
    let (_p, addr) = support::proxy_of(protocol, vec![up.addr], Default::default(), 1.0).await;
    let mut send = client(addr).await.ready().await.unwrap();
    let (response, _body) = send.send_request(request("/reset"), true).unwrap();
    let resp = within(response).await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let first = within(body.data()).await.unwrap().unwrap();
    assert_eq!(first, "partial");
    // The response is under way: the endpoint's reset must end it as a reset, not as a
    // short but clean answer.
    up.reset_now.notify_one();
    let err = match within(body.data()).await {
        Some(Err(e)) => e,
        other => panic!("the body went on after the endpoint's reset: {other:?}"),
    };
    assert_eq!(err.reason(), Some(h2::Reason::ENHANCE_YOUR_CALM), "{err}");
}

async fn large_response_reaches_a_slow_reader(protocol: AppProtocol) {
    let up = endpoint().await;
    let (_p, addr) = support::proxy_of(protocol, vec![up.addr], Default::default(), 1.0).await;
    let mut send = client(addr).await.ready().await.unwrap();
    let (response, _body) = send.send_request(request("/large"), true).unwrap();
    let resp = within(response).await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut got = 0;
    while let Some(data) = within(body.data()).await {
        let data = data.unwrap();
        got += data.len();
        body.flow_control().release_capacity(data.len()).unwrap();
        if got < 2 * 1024 * 1024 {
            // Slow at first, so every window in between fills.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    assert_eq!(got, LARGE);
    let trailers = within(body.trailers()).await.unwrap().expect("trailers");
    assert_eq!(trailers["grpc-status"], "0");
}

#[tokio::test]
async fn a_client_cancel_reaches_the_endpoint_grpc() {
    cancel_reaches_the_endpoint(AppProtocol::Grpc).await;
}

#[tokio::test]
async fn a_client_cancel_reaches_the_endpoint_h2c_on_http() {
    cancel_reaches_the_endpoint(AppProtocol::Http).await;
}

#[tokio::test]
async fn an_endpoint_reset_reaches_the_client_grpc() {
    reset_reaches_the_client(AppProtocol::Grpc).await;
}

#[tokio::test]
async fn an_endpoint_reset_reaches_the_client_h2c_on_http() {
    reset_reaches_the_client(AppProtocol::Http).await;
}

#[tokio::test]
async fn a_large_response_reaches_a_slow_reader_grpc() {
    large_response_reaches_a_slow_reader(AppProtocol::Grpc).await;
}

#[tokio::test]
async fn a_large_response_reaches_a_slow_reader_h2c_on_http() {
    large_response_reaches_a_slow_reader(AppProtocol::Http).await;
}

async fn a_stalled_stream_leaves_its_siblings_flowing(protocol: AppProtocol) {
    let up = endpoint().await;
    let (_p, addr) = support::proxy_of(protocol, vec![up.addr], Default::default(), 1.0).await;
    let mut send = client(addr).await.ready().await.unwrap();
    // More than the proxy's stream window (1 MiB) toward an endpoint that reads nothing:
    // the proxy holds what it cannot pass on.
    let (_stalled, mut stalled_body) = send.send_request(request("/stall"), false).unwrap();
    let mut sent = 0;
    while sent < 2 * MIB {
        stalled_body.reserve_capacity(16 * 1024);
        let capacity = std::future::poll_fn(|cx| stalled_body.poll_capacity(cx));
        // No window for a while: the stream is stalled (were it only slow, the streams
        // below would start early and pass all the same).
        let n = match tokio::time::timeout(Duration::from_millis(500), capacity).await {
            Ok(Some(Ok(n))) => n.min(16 * 1024),
            Ok(other) => panic!("stalled stream: {other:?}"),
            Err(_) => break,
        };
        stalled_body
            .send_data(Bytes::from(vec![b's'; n]), false)
            .unwrap();
        sent += n;
    }
    assert!(
        (MIB..2 * MIB).contains(&sent),
        "the stalled stream filled the proxy's stream window and stopped: {sent} bytes"
    );
    // Bodies on the same connection still get through.
    for _ in 0..3 {
        let mut send = send.clone().ready().await.unwrap();
        let (response, mut body) = send.send_request(request("/len"), false).unwrap();
        body.send_data(Bytes::from(vec![b'x'; 256 * 1024]), true)
            .unwrap();
        let resp = within(response).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["x-len"], "262144");
    }
}

#[tokio::test]
async fn a_stalled_stream_leaves_its_siblings_flowing_grpc() {
    a_stalled_stream_leaves_its_siblings_flowing(AppProtocol::Grpc).await;
}

#[tokio::test]
async fn a_stalled_stream_leaves_its_siblings_flowing_h2c_on_http() {
    a_stalled_stream_leaves_its_siblings_flowing(AppProtocol::Http).await;
}

#[tokio::test]
async fn connect_is_refused() {
    let up = endpoint().await;
    let (_p, addr) =
        support::proxy_of(AppProtocol::Grpc, vec![up.addr], Default::default(), 1.0).await;
    let mut send = client(addr).await.ready().await.unwrap();
    let req = Request::connect("web:443").body(()).unwrap();
    let (response, _body) = send.send_request(req, false).unwrap();
    let resp = within(response).await.unwrap();
    assert_eq!(resp.status(), 405);
    assert_eq!(resp.headers()["x-sluice-error"], "method");
}
