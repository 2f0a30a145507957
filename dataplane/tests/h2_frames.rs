//! The proxy's HTTP/2 server frame by frame, against a client that writes raw frames:
//! requests answered, flow control honoured, and what a hostile client sends — malformed
//! headers, oversized header lists, CONTINUATION floods, bad frames of every kind, PING
//! floods without reading — answered with RFC 9113's errors (RST_STREAM for a stream's,
//! GOAWAY for the connection's) while the proxy keeps serving everyone else.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use h2::Reason;
use http::{HeaderMap, Response};
use sluice_dataplane::AppProtocol;
use sluice_dataplane::http2::frame::{self, Head, flag, kind, setting};
use sluice_dataplane::http2::hpack::{Decoder, Field, Name};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

mod support;

/// An h2c endpoint: `/len` answers with its request body's length (`x-len`), `/bytes/N`
/// with N bytes and `grpc-status: 0` trailers, `/early` with 200 before reading anything.
async fn endpoint() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(sock).await else {
                    return;
                };
                while let Some(Ok((req, mut respond))) = conn.accept().await {
                    tokio::spawn(async move {
                        let (head, mut body) = req.into_parts();
                        let path = head.uri.path().to_string();
                        if path == "/early" {
                            let _ = respond.send_response(Response::new(()), true);
                            let _hold = body;
                            tokio::time::sleep(Duration::from_secs(5)).await;
                            return;
                        }
                        if let Some(n) = path.strip_prefix("/bytes/") {
                            let n: usize = n.parse().unwrap();
                            let Ok(mut send) = respond.send_response(Response::new(()), false)
                            else {
                                return;
                            };
                            let _ = send.send_data(Bytes::from(vec![b'x'; n]), false);
                            let mut trailers = HeaderMap::new();
                            trailers.insert("grpc-status", "0".parse().unwrap());
                            let _ = send.send_trailers(trailers);
                            return;
                        }
                        let mut len = 0;
                        while let Some(Ok(data)) = body.data().await {
                            len += data.len();
                            let _ = body.flow_control().release_capacity(data.len());
                        }
                        let resp = Response::builder().header("x-len", len).body(()).unwrap();
                        let _ = respond.send_response(resp, true);
                    });
                }
            });
        }
    });
    addr
}

async fn proxy() -> (sluice_dataplane::Bound, SocketAddr) {
    support::proxy_of(
        AppProtocol::Grpc,
        vec![endpoint().await],
        Default::default(),
        1.0,
    )
    .await
}

/// A header block of literal fields, never indexed (RFC 7541 §6.2.3).
fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    fn int(out: &mut Vec<u8>, pattern: u8, prefix: u8, n: usize) {
        let mask = (1usize << prefix) - 1;
        if n < mask {
            out.push(pattern | n as u8);
            return;
        }
        out.push(pattern | mask as u8);
        let mut rest = n - mask;
        while rest >= 0x80 {
            out.push(0x80 | (rest & 0x7f) as u8);
            rest >>= 7;
        }
        out.push(rest as u8);
    }
    let mut out = Vec::new();
    for (n, v) in fields {
        out.push(0x10);
        int(&mut out, 0, 7, n.len());
        out.extend_from_slice(n.as_bytes());
        int(&mut out, 0, 7, v.len());
        out.extend_from_slice(v.as_bytes());
    }
    out
}

fn post(path: &str) -> Vec<u8> {
    block(&[
        (":method", "POST"),
        (":scheme", "http"),
        (":authority", "web"),
        (":path", path),
        ("content-type", "application/grpc"),
    ])
}

/// A frame read back, its header block decoded if it has one.
#[derive(Debug)]
struct Got {
    head: Head,
    payload: Bytes,
    fields: Vec<Field>,
}

impl Got {
    fn status(&self) -> Option<String> {
        self.fields
            .iter()
            .find(|f| f.name == Name::Status)
            .map(|f| String::from_utf8_lossy(&f.value).into_owned())
    }

    fn code(&self) -> Reason {
        let at = if self.head.kind == kind::GOAWAY { 4 } else { 0 };
        Reason::from(frame::u32_at(&self.payload[at..]).unwrap())
    }
}

/// A client writing raw frames.
struct Raw {
    sock: TcpStream,
    buf: BytesMut,
    decoder: Decoder,
}

impl Raw {
    /// Connected, preface and an empty SETTINGS sent.
    async fn connect(addr: SocketAddr) -> Raw {
        Self::with_settings(addr, &[]).await
    }

    async fn with_settings(addr: SocketAddr, settings: &[(u16, u32)]) -> Raw {
        let mut sock = TcpStream::connect(addr).await.unwrap();
        let mut out = BytesMut::from(frame::PREFACE);
        frame::settings(&mut out, settings);
        sock.write_all(&out).await.unwrap();
        Raw {
            sock,
            buf: BytesMut::new(),
            decoder: Decoder::default(),
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.sock.write_all(bytes).await.unwrap();
    }

    async fn frame(&mut self, len: usize, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        let mut out = BytesMut::new();
        frame::head(&mut out, len, kind, flags, stream);
        out.put_slice(payload);
        // The peer may have closed already: what it answered is still there to read.
        let _ = self.sock.write_all(&out).await;
    }

    async fn headers(&mut self, stream: u32, block: &[u8], end_stream: bool) {
        let mut out = BytesMut::new();
        frame::headers(&mut out, stream, block, end_stream, 16_384);
        self.send(&out).await;
    }

    async fn data(&mut self, stream: u32, payload: &[u8], end: bool) {
        let mut out = BytesMut::new();
        frame::data(&mut out, stream, payload, end);
        self.send(&out).await;
    }

    /// The next frame, or `None` once the proxy closed the connection.
    async fn next(&mut self) -> Option<Got> {
        loop {
            if let Some(head) = Head::parse(&self.buf)
                && self.buf.len() >= frame::HEAD_LEN + head.len
            {
                let _ = self.buf.split_to(frame::HEAD_LEN);
                let payload = self.buf.split_to(head.len).freeze();
                let mut fields = Vec::new();
                if head.kind == kind::HEADERS {
                    self.decoder
                        .decode(&payload, &mut fields, usize::MAX)
                        .unwrap();
                }
                return Some(Got {
                    head,
                    payload,
                    fields,
                });
            }
            let read =
                tokio::time::timeout(Duration::from_secs(20), self.sock.read_buf(&mut self.buf))
                    .await
                    .expect("the proxy answers in time");
            match read {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    /// The next frame of `kind` (on `stream`, unless looking for GOAWAY), skipping others.
    async fn next_of(&mut self, kind: u8, stream: u32) -> Option<Got> {
        while let Some(got) = self.next().await {
            if got.head.kind == kind && (kind == kind::GOAWAY || got.head.stream == stream) {
                return Some(got);
            }
        }
        None
    }
}

/// A request in raw frames, answered; the proxy serves on after each test.
async fn serves(addr: SocketAddr) {
    let mut c = Raw::connect(addr).await;
    c.headers(1, &post("/len"), false).await;
    c.data(1, b"hello", true).await;
    let got = c.next_of(kind::HEADERS, 1).await.unwrap();
    assert_eq!(got.status().as_deref(), Some("200"));
    assert!(
        got.fields
            .iter()
            .any(|f| f.name == Name::Header("x-len".parse().unwrap()) && f.value == "5"),
        "{:?}",
        got.fields
    );
}

#[tokio::test]
async fn a_request_in_raw_frames_is_answered() {
    let (_p, addr) = proxy().await;
    serves(addr).await;
    // A body in many DATA frames (padded ones too), the length still right.
    let mut c = Raw::connect(addr).await;
    c.headers(3, &post("/len"), false).await;
    for _ in 0..10 {
        c.data(3, &[b'a'; 1000], false).await;
    }
    c.frame(4, kind::DATA, flag::PADDED, 3, &[2, b'z', 0, 0])
        .await;
    c.data(3, b"", true).await;
    let got = c.next_of(kind::HEADERS, 3).await.unwrap();
    let len = got
        .fields
        .iter()
        .find(|f| f.name == Name::Header("x-len".parse().unwrap()));
    assert_eq!(len.unwrap().value, "10001");
}

#[tokio::test]
async fn a_malformed_request_is_reset_and_the_connection_serves_on() {
    let (_p, addr) = proxy().await;
    let mut c = Raw::connect(addr).await;
    let malformed: Vec<Vec<u8>> = vec![
        block(&[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/"),
            ("X-Upper", "1"),
        ]),
        block(&[(":method", "GET"), (":path", "/")]),
        block(&[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/"),
            ("connection", "close"),
        ]),
        block(&[
            ("a", "b"),
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/"),
        ]),
    ];
    let mut id = 1;
    for b in &malformed {
        c.headers(id, b, true).await;
        let rst = c.next_of(kind::RST_STREAM, id).await.unwrap();
        assert_eq!(rst.code(), Reason::PROTOCOL_ERROR, "stream {id}");
        id += 2;
    }
    // A content-length the DATA does not match.
    let mut with_len = post("/len");
    with_len.extend(block(&[("content-length", "3")]));
    c.headers(id, &with_len, false).await;
    c.data(id, b"four", true).await;
    assert_eq!(
        c.next_of(kind::RST_STREAM, id).await.unwrap().code(),
        Reason::PROTOCOL_ERROR
    );
    id += 2;
    c.headers(id, &post("/len"), false).await;
    c.data(id, b"ok", true).await;
    let got = c.next_of(kind::HEADERS, id).await.unwrap();
    assert_eq!(got.status().as_deref(), Some("200"));
}

#[tokio::test]
async fn an_oversized_header_list_gets_431_and_a_continuation_flood_goaway() {
    let (p, addr) = proxy().await;
    let mut c = Raw::connect(addr).await;
    // 70 KiB of headers over HEADERS and CONTINUATION frames.
    let big = "v".repeat(10 * 1024);
    let mut fields = vec![
        (":method", "GET"),
        (":scheme", "http"),
        (":authority", "web"),
        (":path", "/len"),
    ];
    let names: Vec<String> = (0..7).map(|i| format!("x-big-{i}")).collect();
    for n in &names {
        fields.push((n.as_str(), big.as_str()));
    }
    c.headers(1, &block(&fields), true).await;
    let got = c.next_of(kind::HEADERS, 1).await.unwrap();
    assert_eq!(got.status().as_deref(), Some("431"));
    // The connection serves on.
    c.headers(3, &post("/len"), true).await;
    assert_eq!(
        c.next_of(kind::HEADERS, 3)
            .await
            .unwrap()
            .status()
            .as_deref(),
        Some("200")
    );

    // CONTINUATION frames that never end the block.
    let mut c = Raw::connect(addr).await;
    c.frame(0, kind::HEADERS, 0, 1, &[]).await;
    let chunk = vec![0u8; 16 * 1024];
    for _ in 0..16 {
        c.frame(chunk.len(), kind::CONTINUATION, 0, 1, &chunk).await;
    }
    let goaway = c.next_of(kind::GOAWAY, 0).await.unwrap();
    assert_eq!(goaway.code(), Reason::ENHANCE_YOUR_CALM);
    assert!(c.next().await.is_none(), "the connection is closed");
    serves(addr).await;
    // The cut-off is counted by the code the client got (once the connection's lingering
    // close is over).
    let counted = "sluice_proxy_h2_goaways_total{service=\"web\",reason=\"ENHANCE_YOUR_CALM\"} 1";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let metrics = support::get(p.admin, "x", "/metrics").await;
        if metrics.contains(counted) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{metrics}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn trailers_of_forty_thousand_fields_are_refused_not_built() {
    let (_p, addr) = proxy().await;
    let mut c = Raw::connect(addr).await;
    c.headers(1, &post("/len"), false).await;
    // One byte per field (the static table's accept-encoding), 2.4 MB of header list
    // in a 40 KB block: past the 64 KiB limit, refused before any map is built.
    c.headers(1, &vec![0x90u8; 40_000], true).await;
    let rst = c.next_of(kind::RST_STREAM, 1).await.unwrap();
    assert_eq!(rst.code(), Reason::PROTOCOL_ERROR);
    c.headers(3, &post("/len"), true).await;
    assert_eq!(
        c.next_of(kind::HEADERS, 3)
            .await
            .unwrap()
            .status()
            .as_deref(),
        Some("200")
    );
}

#[tokio::test]
async fn frames_no_client_may_send_end_the_connection_with_goaway() {
    let (_p, addr) = proxy().await;
    let too_large = vec![0u8; 16_385];
    type Write = Box<dyn Fn(&mut BytesMut)>;
    let cases: Vec<(&str, Write, Reason)> = vec![
        (
            "PING of 7 bytes",
            Box::new(|o| {
                frame::head(o, 7, kind::PING, 0, 0);
                o.put_slice(&[0; 7]);
            }),
            Reason::FRAME_SIZE_ERROR,
        ),
        (
            "DATA on stream 0",
            Box::new(|o| frame::data(o, 0, b"x", false)),
            Reason::PROTOCOL_ERROR,
        ),
        (
            "HEADERS on an even stream",
            Box::new(|o| frame::headers(o, 2, &post("/len"), true, 16_384)),
            Reason::PROTOCOL_ERROR,
        ),
        (
            "a frame past SETTINGS_MAX_FRAME_SIZE",
            Box::new(move |o| frame::data(o, 1, &too_large, false)),
            Reason::FRAME_SIZE_ERROR,
        ),
        (
            "PUSH_PROMISE",
            Box::new(|o| {
                frame::head(o, 4, kind::PUSH_PROMISE, flag::END_HEADERS, 1);
                o.put_u32(2);
            }),
            Reason::PROTOCOL_ERROR,
        ),
        (
            "an HPACK index in neither table",
            Box::new(|o| frame::headers(o, 1, &[0xff, 0x10], true, 16_384)),
            Reason::COMPRESSION_ERROR,
        ),
        (
            "a connection window past 2^31-1",
            Box::new(|o| frame::window_update(o, 0, 0x7fff_ffff)),
            Reason::FLOW_CONTROL_ERROR,
        ),
        (
            "INITIAL_WINDOW_SIZE past 2^31-1",
            Box::new(|o| frame::settings(o, &[(setting::INITIAL_WINDOW_SIZE, 1 << 31)])),
            Reason::FLOW_CONTROL_ERROR,
        ),
        (
            "CONTINUATION without HEADERS",
            Box::new(|o| frame::head(o, 0, kind::CONTINUATION, flag::END_HEADERS, 1)),
            Reason::PROTOCOL_ERROR,
        ),
        (
            "DATA on a stream never opened",
            Box::new(|o| frame::data(o, 7, b"x", false)),
            Reason::PROTOCOL_ERROR,
        ),
    ];
    for (what, write, want) in cases {
        let mut c = Raw::connect(addr).await;
        let mut out = BytesMut::new();
        write(&mut out);
        c.send(&out).await;
        let goaway = c.next_of(kind::GOAWAY, 0).await;
        assert_eq!(goaway.map(|g| g.code()), Some(want), "{what}");
    }
    // Before SETTINGS, nothing else.
    let mut sock = TcpStream::connect(addr).await.unwrap();
    let mut out = BytesMut::from(frame::PREFACE);
    frame::ping_ack(&mut out, &[0; 8]);
    sock.write_all(&out).await.unwrap();
    let mut c = Raw {
        sock,
        buf: BytesMut::new(),
        decoder: Decoder::default(),
    };
    assert_eq!(
        c.next_of(kind::GOAWAY, 0).await.unwrap().code(),
        Reason::PROTOCOL_ERROR
    );
    serves(addr).await;
}

#[tokio::test]
async fn a_response_waits_for_the_clients_window() {
    let (_p, addr) = proxy().await;
    let mut c = Raw::with_settings(addr, &[(setting::INITIAL_WINDOW_SIZE, 100)]).await;
    c.headers(1, &post("/bytes/1000"), true).await;
    assert_eq!(
        c.next_of(kind::HEADERS, 1)
            .await
            .unwrap()
            .status()
            .as_deref(),
        Some("200")
    );
    let mut got = 0;
    while got < 100 {
        let data = c.next_of(kind::DATA, 1).await.unwrap();
        got += data.head.len;
    }
    assert_eq!(got, 100, "no more than the stream's window");
    // Nothing more comes until the window opens.
    let more = tokio::time::timeout(Duration::from_millis(300), c.next()).await;
    assert!(more.is_err(), "{more:?}");
    let mut out = BytesMut::new();
    frame::window_update(&mut out, 1, 10_000);
    c.send(&out).await;
    while got < 1000 {
        let f = c.next().await.unwrap();
        if f.head.kind == kind::DATA {
            got += f.head.len;
        }
    }
    assert_eq!(got, 1000);
    let trailers = c.next_of(kind::HEADERS, 1).await.unwrap();
    assert!(trailers.head.has(flag::END_STREAM));
    assert!(
        trailers.fields.iter().any(|f| f.value == "0"),
        "{:?}",
        trailers.fields
    );
}

#[tokio::test]
async fn an_answer_before_the_request_ends_stops_the_client_with_no_error() {
    let (_p, addr) = proxy().await;
    let mut c = Raw::connect(addr).await;
    c.headers(1, &post("/early"), false).await;
    c.data(1, b"more to come", false).await;
    let head = c.next_of(kind::HEADERS, 1).await.unwrap();
    assert_eq!(head.status().as_deref(), Some("200"));
    let rst = c.next_of(kind::RST_STREAM, 1).await.unwrap();
    assert_eq!(rst.code(), Reason::NO_ERROR);
    // DATA the client had in flight for the stream is taken and dropped.
    c.data(1, b"late", false).await;
    c.headers(3, &post("/len"), true).await;
    assert_eq!(
        c.next_of(kind::HEADERS, 3)
            .await
            .unwrap()
            .status()
            .as_deref(),
        Some("200")
    );
}

#[tokio::test]
async fn streams_reset_with_their_bodies_give_the_connection_window_back() {
    let (_p, addr) = proxy().await;
    let mut c = Raw::connect(addr).await;
    // 100 streams, each with 16 KiB of body, reset by the client (most in the read that
    // opened them, before any answer): 1.6 MB on a connection window of 1 MiB, which
    // only holds if the dropped bodies' bytes are given back.
    let chunk = vec![b'x'; 16 * 1024];
    let mut out = BytesMut::new();
    let mut id = 1;
    for _ in 0..100 {
        frame::headers(&mut out, id, &post("/len"), false, 16_384);
        frame::data(&mut out, id, &chunk, false);
        frame::rst_stream(&mut out, id, Reason::CANCEL);
        id += 2;
    }
    c.send(&out).await;
    c.headers(id, &post("/len"), false).await;
    c.data(id, &chunk, true).await;
    let got = c.next_of(kind::HEADERS, id).await.expect("no GOAWAY");
    let len = got
        .fields
        .iter()
        .find(|f| f.name == Name::Header("x-len".parse().unwrap()));
    assert_eq!(len.unwrap().value, "16384");
}

#[tokio::test]
async fn a_client_that_pings_without_reading_stops_being_read() {
    let (_p, addr) = proxy().await;
    let mut c = Raw::connect(addr).await;
    let mut pings = BytesMut::new();
    for i in 0..1000u64 {
        frame::head(&mut pings, 8, kind::PING, 0, 0);
        pings.put_u64(i);
    }
    // 51 MB of PINGs, whose answers the client never reads: the proxy stops reading once
    // its answers pile up, so the client's writes stop being taken (until the write
    // deadline closes the connection).
    let flood = async {
        for _ in 0..3000 {
            c.sock.write_all(&pings).await?;
        }
        Ok::<_, std::io::Error>(())
    };
    let sent = tokio::time::timeout(Duration::from_secs(10), flood).await;
    assert!(!matches!(sent, Ok(Ok(()))), "the proxy read every PING");
    serves(addr).await;
}
