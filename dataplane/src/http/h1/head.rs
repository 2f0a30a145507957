//! HTTP/1.1 heads on the lean path: a client's request head is parsed once and written
//! for the upstream in the same pass (hop-by-hop headers dropped, this hop's
//! `traceparent` added); an upstream's response head likewise for the client.

use std::fmt::Write as _;

use bytes::{BufMut, BytesMut};

use super::body::Framing;
use crate::http::attempts::idempotent;
use crate::http::headers::{DRAINING_HEADER, HOP_BY_HOP, connection_option, lists_token};
use crate::http::local::LocalError;
use crate::reason::Reason;
use crate::trace::{TRACEPARENT, TraceParent};

/// Headers per head (hyper's limit too).
pub const MAX_HEADERS: usize = 100;
/// Request bodies up to this size are buffered by the lean path (for retries); larger
/// ones go to the hyper path, which streams them keeping a copy for retries
/// ([`crate::http::replay`]).
pub const LEAN_BODY: u64 = 64 * 1024;

/// What to do with the bytes a client sent so far.
pub enum Verdict {
    /// Not a whole head yet.
    Partial,
    /// A request the lean path forwards; its upstream head is in the output buffer.
    Lean(RequestHead),
    /// Valid HTTP the lean path leaves to hyper: HTTP/1.0 or HTTP/2, upgrades,
    /// `Expect`, chunked or large bodies, requests without Host or in absolute form.
    HandOver,
    /// Not HTTP: answered with this error, then the connection closes.
    Reject(LocalError),
}

/// A request head the lean path forwards.
pub struct RequestHead {
    /// Bytes of the head in the client's buffer.
    pub len: usize,
    pub content_length: usize,
    pub idempotent: bool,
    /// HEAD: the response has no body whatever its headers say.
    pub head_method: bool,
    /// The client asked to close after this exchange.
    pub close: bool,
    pub span: tracing::Span,
}

/// Hop-by-hop headers are never forwarded; `te` is forwarded only as `trailers`, and
/// `traceparent` is replaced by this hop's.
fn hop_by_hop(name: &str) -> bool {
    HOP_BY_HOP
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h.as_str()))
}

/// Whether a `Connection` value names options beyond `close` and `keep-alive`: headers
/// then have to be checked against it one by one, which most heads can skip.
fn has_options(connection: &[u8]) -> bool {
    connection.split(|b| *b == b',').any(|t| {
        let t = t.trim_ascii();
        !(t.is_empty() || t.eq_ignore_ascii_case(b"close") || t.eq_ignore_ascii_case(b"keep-alive"))
    })
}

/// The values of a head's `Connection` headers.
fn connection_values<'a>(
    headers: &'a [httparse::Header<'a>],
) -> impl Iterator<Item = &'a [u8]> + 'a {
    headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("connection"))
        .map(|h| h.value)
}

fn bad_request(detail: impl Into<String>) -> Verdict {
    Verdict::Reject(LocalError::new(Reason::BadRequest, detail))
}

/// Parse a content length: digits only, and the same value if repeated.
fn content_length(previous: Option<u64>, value: &[u8]) -> Result<u64, ()> {
    let v = value.trim_ascii();
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return Err(());
    }
    let n = v.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    match previous {
        Some(p) if p != n => Err(()),
        _ => Ok(n),
    }
}

/// Parse the request head at the start of `buf`; for a lean request, write its
/// upstream head into `out` (cleared first).
pub fn request(buf: &[u8], service: &str, out: &mut BytesMut) -> Verdict {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Verdict::Partial,
        // HTTP/2's preface ("PRI * HTTP/2.0") and other versions: hyper answers them.
        Err(httparse::Error::Version) => return Verdict::HandOver,
        Err(httparse::Error::TooManyHeaders) => {
            return Verdict::Reject(LocalError::new(
                Reason::HeadersTooLarge,
                format!("more than {MAX_HEADERS} headers"),
            ));
        }
        Err(e) => return bad_request(format!("malformed request: {e}")),
    };
    let (Some(method), Some(path), Some(1)) = (req.method, req.path, req.version) else {
        return Verdict::HandOver;
    };
    if !(path.starts_with('/') || (path == "*" && method == "OPTIONS")) {
        return Verdict::HandOver;
    }
    let mut length = None;
    let mut close = false;
    let mut host = false;
    let mut parent = None;
    let mut options = false;
    for h in req.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("content-length") {
            match content_length(length, h.value) {
                Ok(n) => length = Some(n),
                Err(()) => return bad_request("invalid or conflicting content-length"),
            }
        } else if name.eq_ignore_ascii_case("host") {
            if host {
                return Verdict::HandOver;
            }
            host = true;
        } else if name.eq_ignore_ascii_case("connection") {
            if lists_token(h.value, "upgrade") {
                return Verdict::HandOver;
            }
            close |= lists_token(h.value, "close");
            options |= has_options(h.value);
        } else if name.eq_ignore_ascii_case("transfer-encoding")
            || name.eq_ignore_ascii_case("upgrade")
            || name.eq_ignore_ascii_case("expect")
        {
            return Verdict::HandOver;
        } else if name.eq_ignore_ascii_case(TRACEPARENT) {
            parent = std::str::from_utf8(h.value)
                .ok()
                .and_then(TraceParent::parse);
        }
    }
    let content_length = length.unwrap_or(0);
    if !host || content_length > LEAN_BODY {
        return Verdict::HandOver;
    }
    let ours = parent.map_or_else(TraceParent::root, |p| p.child());

    out.clear();
    out.put_slice(method.as_bytes());
    out.put_u8(b' ');
    out.put_slice(path.as_bytes());
    out.put_slice(b" HTTP/1.1\r\n");
    for h in req.headers.iter() {
        if hop_by_hop(h.name)
            || h.name.eq_ignore_ascii_case(TRACEPARENT)
            || (h.name.eq_ignore_ascii_case("te") && !h.value.eq_ignore_ascii_case(b"trailers"))
            || (options && connection_option(connection_values(req.headers), h.name))
        {
            continue;
        }
        out.put_slice(h.name.as_bytes());
        out.put_slice(b": ");
        out.put_slice(h.value);
        out.put_slice(b"\r\n");
    }
    let _ = write!(out, "{TRACEPARENT}: {ours}\r\n\r\n");

    let span = tracing::debug_span!(
        "request",
        service,
        method,
        path,
        trace_id = %format_args!("{:032x}", ours.trace_id),
        span_id = %format_args!("{:016x}", ours.span_id),
        parent_span_id = parent.map(|p| format!("{:016x}", p.span_id)),
    );
    Verdict::Lean(RequestHead {
        len,
        content_length: content_length as usize,
        idempotent: idempotent(method),
        head_method: method == "HEAD",
        close,
        span,
    })
}

/// An upstream's response head.
pub struct ResponseHead {
    /// Bytes of the head in the upstream buffer.
    pub len: usize,
    pub status: u16,
    pub framing: Framing,
    /// The endpoint said it is draining (`x-sluice-draining`).
    pub draining: bool,
    /// The upstream connection can carry another request after this body.
    pub reusable: bool,
    /// The client connection must close after this body.
    pub close_client: bool,
}

/// What the upstream sent so far.
pub enum Response {
    Partial,
    /// A 1xx head of this many bytes, to skip.
    Informational(usize),
    Complete(ResponseHead),
}

#[derive(Debug, thiserror::Error)]
#[error("malformed response: {0}")]
pub struct BadResponse(pub String);

/// Parse the response head at the start of `buf`; when complete, write the client's
/// head into `out` (cleared first). `close_client`: the client asked to close.
pub fn response(
    buf: &[u8],
    head_method: bool,
    close_client: bool,
    out: &mut BytesMut,
) -> Result<Response, BadResponse> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(Response::Partial),
        Err(e) => return Err(BadResponse(e.to_string())),
    };
    let (Some(status), Some(version)) = (resp.code, resp.version) else {
        return Err(BadResponse("no status".into()));
    };
    if status == 101 {
        return Err(BadResponse("101 to a request without upgrade".into()));
    }
    if (100..200).contains(&status) {
        return Ok(Response::Informational(len));
    }
    let mut length = None;
    let mut chunked = None;
    let mut close = version == 0;
    let mut draining = false;
    let mut options = false;
    for h in resp.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            length = Some(
                content_length(length, h.value)
                    .map_err(|()| BadResponse("invalid content-length".into()))?,
            );
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            // Chunked only if it is the last coding (RFC 9112 §6.3).
            chunked = Some(
                h.value
                    .rsplit(|b| *b == b',')
                    .next()
                    .is_some_and(|t| t.trim_ascii().eq_ignore_ascii_case(b"chunked")),
            );
        } else if h.name.eq_ignore_ascii_case("connection") {
            if lists_token(h.value, "close") {
                close = true;
            } else if version == 0 && lists_token(h.value, "keep-alive") {
                close = false;
            }
            options |= has_options(h.value);
        } else if h.name.eq_ignore_ascii_case(DRAINING_HEADER) {
            draining = true;
        }
    }
    let framing = if head_method || status == 204 || status == 304 {
        Framing::Empty
    } else {
        match (chunked, length) {
            (Some(true), _) => Framing::Chunked,
            (Some(false), _) => Framing::UntilClose,
            (None, Some(n)) => Framing::Length(n),
            (None, None) => Framing::UntilClose,
        }
    };
    let close_client = close_client || framing == Framing::UntilClose;

    out.clear();
    let reason = resp.reason.unwrap_or("");
    let _ = write!(out, "HTTP/1.1 {status} {reason}\r\n");
    for h in resp.headers.iter() {
        // With Transfer-Encoding present, a Content-Length is wrong (RFC 9112 §6.3) and,
        // passed on, would let the client and us disagree on where the body ends.
        if ["connection", "keep-alive", "proxy-connection"]
            .iter()
            .any(|n| h.name.eq_ignore_ascii_case(n))
            || (chunked.is_some() && h.name.eq_ignore_ascii_case("content-length"))
            // The framing headers stay whatever Connection says: the body is passed
            // through as they frame it.
            || (options
                && !h.name.eq_ignore_ascii_case("transfer-encoding")
                && !h.name.eq_ignore_ascii_case("content-length")
                && connection_option(connection_values(resp.headers), h.name))
        {
            continue;
        }
        out.put_slice(h.name.as_bytes());
        out.put_slice(b": ");
        out.put_slice(h.value);
        out.put_slice(b"\r\n");
    }
    if close_client {
        out.put_slice(b"connection: close\r\n");
    }
    out.put_slice(b"\r\n");
    Ok(Response::Complete(ResponseHead {
        len,
        status,
        framing,
        draining,
        reusable: !close && framing != Framing::UntilClose,
        close_client,
    }))
}

/// A local error as an HTTP/1.1 response (the hyper path's [`crate::http::local::response`]).
pub fn local(e: &LocalError, head_method: bool, close: bool, out: &mut BytesMut) {
    out.clear();
    let _ = write!(
        out,
        "HTTP/1.1 {} {}\r\ncontent-type: text/plain; charset=utf-8\r\nx-sluice-error: {}\r\ncontent-length: {}\r\n{}\r\n",
        e.status().as_u16(),
        e.status().canonical_reason().unwrap_or(""),
        e.reason.label(),
        e.detail.len() + 1,
        if close { "connection: close\r\n" } else { "" },
    );
    if !head_method {
        out.put_slice(e.detail.as_bytes());
        out.put_u8(b'\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    fn lean(raw: &[u8]) -> (RequestHead, String) {
        let mut out = BytesMut::new();
        match request(raw, "web", &mut out) {
            Verdict::Lean(h) => (h, String::from_utf8(out.to_vec()).unwrap()),
            _ => panic!("not lean: {}", String::from_utf8_lossy(raw)),
        }
    }

    #[test]
    fn a_request_head_is_rewritten_for_the_upstream() {
        let raw = b"GET /a?b=1 HTTP/1.1\r\nHost: web\r\nConnection: keep-alive, x-foo\r\nX-Foo: hop\r\nKeep-Alive: 5\r\nTE: gzip\r\nTraceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\nX-A: 1\r\n\r\nnext";
        let (h, up) = lean(raw);
        assert_eq!(h.len, raw.len() - 4);
        assert!(!h.close && h.idempotent && !h.head_method);
        assert!(
            up.starts_with("GET /a?b=1 HTTP/1.1\r\nHost: web\r\nX-A: 1\r\n"),
            "{up}"
        );
        assert!(
            up.contains("traceparent: 00-0af7651916cd43dd8448eb211c80319c-"),
            "{up}"
        );
        assert!(!up.contains("b7ad6b7169203331"), "this hop's span: {up}");
        assert!(!up.to_ascii_lowercase().contains("keep-alive"), "{up}");
        assert!(!up.to_ascii_lowercase().contains("te: gzip"), "{up}");
        assert!(!up.contains("X-Foo"), "a connection option: {up}");
        assert!(up.ends_with("\r\n\r\n"));
    }

    #[test]
    fn requests_the_lean_path_leaves_to_hyper() {
        for raw in [
            &b"GET / HTTP/1.0\r\nHost: a\r\n\r\n"[..],
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999\r\n\r\n",
            b"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET / HTTP/1.1\r\n\r\n",
        ] {
            let v = request(raw, "web", &mut BytesMut::new());
            assert!(
                matches!(v, Verdict::HandOver),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn malformed_requests_are_rejected() {
        for raw in [
            &b"GARBAGE\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
        ] {
            let v = request(raw, "web", &mut BytesMut::new());
            assert!(
                matches!(v, Verdict::Reject(ref e) if e.status() == StatusCode::BAD_REQUEST),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
        assert!(matches!(
            request(b"GET / HTTP/1.1\r\nHo", "web", &mut BytesMut::new()),
            Verdict::Partial
        ));
    }

    fn complete(raw: &[u8], head_method: bool, close: bool) -> (ResponseHead, String) {
        let mut out = BytesMut::new();
        match response(raw, head_method, close, &mut out).unwrap() {
            Response::Complete(h) => (h, String::from_utf8(out.to_vec()).unwrap()),
            _ => panic!("incomplete"),
        }
    }

    #[test]
    fn response_framing() {
        let (h, out) = complete(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            false,
            false,
        );
        assert_eq!(h.framing, Framing::Length(5));
        assert!(h.reusable && !h.close_client);
        assert_eq!(out, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n");
        let (h, _) = complete(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            false,
            false,
        );
        assert_eq!(h.framing, Framing::Chunked);
        let (h, out) = complete(
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
            false,
        );
        assert_eq!(h.framing, Framing::Chunked);
        assert!(
            !out.to_ascii_lowercase().contains("content-length"),
            "{out}"
        );
        let (h, _) = complete(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true, false);
        assert_eq!(h.framing, Framing::Empty);
        let (h, out) = complete(b"HTTP/1.0 200 OK\r\n\r\nuntil close", false, false);
        assert_eq!(h.framing, Framing::UntilClose);
        assert!(!h.reusable && h.close_client);
        assert!(out.contains("connection: close\r\n"), "{out}");
        let (h, out) = complete(
            b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nx-sluice-draining: 1\r\nContent-Length: 0\r\n\r\n",
            false,
            true,
        );
        assert!(h.draining && !h.reusable && h.close_client && h.status == 503);
        assert_eq!(out.matches("onnection").count(), 1, "{out}");
        let (h, out) = complete(
            b"HTTP/1.1 200 OK\r\nConnection: x-hop, content-length\r\nX-Hop: 1\r\nX-End: 2\r\nContent-Length: 2\r\n\r\n",
            false,
            false,
        );
        assert_eq!(h.framing, Framing::Length(2));
        assert_eq!(
            out, "HTTP/1.1 200 OK\r\nX-End: 2\r\nContent-Length: 2\r\n\r\n",
            "connection options go, framing stays"
        );
        let mut out = BytesMut::new();
        assert!(matches!(
            response(
                b"HTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 200",
                false,
                false,
                &mut out
            ),
            Ok(Response::Informational(28))
        ));
        assert!(
            response(
                b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
                false,
                false,
                &mut out
            )
            .is_err()
        );
    }
}
