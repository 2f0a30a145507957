//! The heads of HTTP/2 messages the proxy reads, from HPACK's decoded fields to `http`
//! types: a client's request (RFC 9113 §8.3.1), an endpoint's response (§8.3.2), and
//! trailers, with the fields HTTP/2 forbids refused (§8.2.2). What makes a stream
//! malformed is decided here; the connection resets it.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Method, Request, Response, StatusCode, Uri, Version};

use crate::http2::hpack::{Field, Name};

/// HTTP/2 has no connection-specific headers (RFC 9113 §8.2.2): `forward` strips an
/// endpoint's; TE belongs in requests only.
pub fn connection_specific(name: &HeaderName) -> bool {
    name == header::CONNECTION
        || name == header::TE
        || name == header::TRANSFER_ENCODING
        || name == header::UPGRADE
        || matches!(name.as_str(), "keep-alive" | "proxy-connection")
}

/// Add a decoded header to `headers`; a content-length is parsed into `expect_len`, and
/// two that disagree (or a value no header may have) make the head malformed (`None`).
fn add_header(
    headers: &mut HeaderMap,
    expect_len: &mut Option<u64>,
    name: HeaderName,
    value: bytes::Bytes,
) -> Option<()> {
    let value = HeaderValue::from_maybe_shared(value).ok()?;
    if name == header::CONTENT_LENGTH {
        let n = value.to_str().ok()?.parse::<u64>().ok()?;
        if expect_len.is_some_and(|e| e != n) {
            return None;
        }
        *expect_len = Some(n);
    }
    headers.append(name, value);
    Some(())
}

/// A request's head from its decoded fields (RFC 9113 §8.3.1), and its content-length;
/// `None` when malformed.
pub fn request(fields: &mut Vec<Field>) -> Option<(http::request::Parts, Option<u64>)> {
    let (mut method, mut scheme, mut authority, mut path) = (None, None, None, None);
    let mut headers = HeaderMap::with_capacity(fields.len());
    let mut regular = false;
    let mut expect_len = None;
    for f in fields.drain(..) {
        let slot = match f.name {
            Name::Method => &mut method,
            Name::Scheme => &mut scheme,
            Name::Authority => &mut authority,
            Name::Path => &mut path,
            Name::Status | Name::Protocol | Name::Malformed(_) => return None,
            Name::Header(name) => {
                regular = true;
                if connection_specific(&name) && !(name == header::TE && f.value == "trailers") {
                    return None;
                }
                add_header(&mut headers, &mut expect_len, name, f.value)?;
                continue;
            }
        };
        // Pseudo-headers come first, once each.
        if regular || slot.is_some() {
            return None;
        }
        *slot = Some(f.value);
    }
    let method = Method::from_bytes(&method?).ok()?;
    let mut uri = http::uri::Parts::default();
    if let Some(a) = authority {
        uri.authority = Some(Authority::from_maybe_shared(a).ok()?);
    }
    if method == Method::CONNECT {
        // Refused by the handler (an HTTP service proxies no tunnels); it must still be
        // well-formed to reach it.
        if scheme.is_some() || path.is_some() || uri.authority.is_none() {
            return None;
        }
    } else {
        uri.scheme = Some(match &scheme?[..] {
            b"http" => Scheme::HTTP,
            b"https" => Scheme::HTTPS,
            other => Scheme::try_from(other).ok()?,
        });
        let path = path?;
        if path.is_empty() {
            return None;
        }
        uri.path_and_query = Some(PathAndQuery::from_maybe_shared(path).ok()?);
        if uri.authority.is_none() {
            // A URI with a scheme needs an authority; the Host header speaks for it.
            uri.scheme = None;
        }
    }
    let mut req = Request::new(());
    *req.method_mut() = method;
    *req.uri_mut() = Uri::from_parts(uri).ok()?;
    *req.version_mut() = Version::HTTP_2;
    *req.headers_mut() = headers;
    Some((req.into_parts().0, expect_len))
}

/// A response's head from its decoded fields (RFC 9113 §8.3.2), and its content-length;
/// `None` when malformed. An informational (1xx) head is returned like any other: the
/// caller skips it.
pub fn response(fields: &mut Vec<Field>) -> Option<(http::response::Parts, Option<u64>)> {
    let mut status = None;
    let mut headers = HeaderMap::with_capacity(fields.len());
    let mut expect_len = None;
    for f in fields.drain(..) {
        match f.name {
            Name::Status if status.is_none() && headers.is_empty() => {
                status = Some(StatusCode::from_bytes(&f.value).ok()?);
            }
            Name::Header(name) => {
                if connection_specific(&name) {
                    return None;
                }
                add_header(&mut headers, &mut expect_len, name, f.value)?;
            }
            _ => return None,
        }
    }
    let mut resp = Response::new(());
    *resp.status_mut() = status?;
    *resp.version_mut() = Version::HTTP_2;
    *resp.headers_mut() = headers;
    Some((resp.into_parts().0, expect_len))
}

/// Trailers from a decoded block: no pseudo-headers, no connection-specific headers.
pub fn trailers(fields: &mut Vec<Field>) -> Option<HeaderMap> {
    let mut map = HeaderMap::with_capacity(fields.len());
    for f in fields.drain(..) {
        let Name::Header(name) = f.name else {
            return None;
        };
        if connection_specific(&name) {
            return None;
        }
        map.append(name, HeaderValue::from_maybe_shared(f.value).ok()?);
    }
    Some(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http2::hpack::Decoder;
    use bytes::BytesMut;

    fn field(name: &str, value: &str) -> Field {
        let mut block = BytesMut::new();
        // Literal without indexing, new name: decoded back as the server would see it.
        block.extend_from_slice(&[0x00, name.len() as u8]);
        block.extend_from_slice(name.as_bytes());
        block.extend_from_slice(&[value.len() as u8]);
        block.extend_from_slice(value.as_bytes());
        let mut out = Vec::new();
        Decoder::default()
            .decode(&block.freeze(), &mut out, usize::MAX)
            .unwrap();
        out.remove(0)
    }

    fn get(path: &str) -> Vec<Field> {
        vec![
            field(":method", "GET"),
            field(":scheme", "http"),
            field(":authority", "web.example"),
            field(":path", path),
        ]
    }

    #[test]
    fn a_request_head_is_built_from_its_fields() {
        let mut fields = get("/a?b=c");
        fields.push(field("content-length", "3"));
        fields.push(field("te", "trailers"));
        let (parts, len) = request(&mut fields).unwrap();
        assert_eq!(parts.method, Method::GET);
        assert_eq!(parts.uri, "http://web.example/a?b=c");
        assert_eq!(parts.version, Version::HTTP_2);
        assert_eq!(len, Some(3));
        assert_eq!(parts.headers["te"], "trailers");
    }

    #[test]
    fn malformed_requests_are_refused() {
        let cases: Vec<Vec<Field>> = vec![
            // Missing :path; a pseudo-header after a header; twice; unknown; a
            // connection-specific header; TE other than trailers; uppercase; two lengths.
            get("/").into_iter().take(3).collect(),
            [vec![field("x", "1")], get("/")].concat(),
            [get("/"), vec![field(":path", "/b")]].concat(),
            [get("/"), vec![field(":foo", "1")]].concat(),
            [get("/"), vec![field("connection", "close")]].concat(),
            [get("/"), vec![field("te", "gzip")]].concat(),
            [get("/"), vec![field("X-Up", "1")]].concat(),
            [
                get("/"),
                vec![field("content-length", "1"), field("content-length", "2")],
            ]
            .concat(),
            [get("/"), vec![field("x", "a\u{1}b")]].concat(),
            get(""),
        ];
        for (i, mut fields) in cases.into_iter().enumerate() {
            assert!(request(&mut fields).is_none(), "case {i}");
        }
    }

    #[test]
    fn connect_is_well_formed_with_an_authority_only() {
        let mut fields = vec![field(":method", "CONNECT"), field(":authority", "db:5432")];
        let (parts, _) = request(&mut fields).unwrap();
        assert_eq!(parts.method, Method::CONNECT);
        let mut with_path = vec![
            field(":method", "CONNECT"),
            field(":authority", "db:5432"),
            field(":path", "/"),
        ];
        assert!(request(&mut with_path).is_none());
    }

    #[test]
    fn a_response_head_is_built_from_its_fields() {
        let mut fields = vec![
            field(":status", "200"),
            field("content-type", "application/grpc"),
            field("content-length", "7"),
        ];
        let (parts, len) = response(&mut fields).unwrap();
        assert_eq!(parts.status, 200);
        assert_eq!(parts.version, Version::HTTP_2);
        assert_eq!(parts.headers["content-type"], "application/grpc");
        assert_eq!(len, Some(7));
        let mut early = vec![field(":status", "103")];
        assert!(response(&mut early).unwrap().0.status.is_informational());
    }

    #[test]
    fn malformed_responses_are_refused() {
        let cases: Vec<Vec<Field>> = vec![
            // No :status; after a header; twice; a request's pseudo-header; not a code;
            // connection-specific headers (TE too: it belongs in requests); two lengths.
            vec![field("x", "1")],
            vec![field("x", "1"), field(":status", "200")],
            vec![field(":status", "200"), field(":status", "204")],
            vec![field(":status", "200"), field(":path", "/")],
            vec![field(":status", "2xx")],
            vec![field(":status", "200"), field("connection", "close")],
            vec![field(":status", "200"), field("te", "trailers")],
            vec![
                field(":status", "200"),
                field("content-length", "1"),
                field("content-length", "2"),
            ],
        ];
        for (i, mut fields) in cases.into_iter().enumerate() {
            assert!(response(&mut fields).is_none(), "case {i}");
        }
    }

    #[test]
    fn trailers_carry_no_pseudo_headers() {
        let mut ok = vec![field("grpc-status", "0")];
        assert_eq!(trailers(&mut ok).unwrap()["grpc-status"], "0");
        let mut bad = vec![field(":status", "200")];
        assert!(trailers(&mut bad).is_none());
    }
}
