//! Header rules both HTTP paths share: hop-by-hop headers and connection options
//! (RFC 9110 §7.6.1), and the header by which an endpoint says it drains.

use http::header::{self, HeaderName};

/// A response header by which an endpoint says it is draining (its 503 is retried).
pub const DRAINING_HEADER: &str = "x-sluice-draining";

/// Hop-by-hop headers, never forwarded (RFC 9110 §7.6.1).
pub const HOP_BY_HOP: [HeaderName; 5] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Whether the comma-separated header `value` lists `token` (ASCII case-insensitive).
pub(crate) fn lists_token(value: &[u8], token: &str) -> bool {
    value
        .split(|b| *b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

/// Whether the header `name` is a connection option: named in a `Connection` header, so
/// meant for this hop only and never forwarded (RFC 9110 §7.6.1).
pub(crate) fn connection_option<'a>(
    connection: impl IntoIterator<Item = &'a [u8]>,
    name: &str,
) -> bool {
    connection.into_iter().any(|v| lists_token(v, name))
}

/// Drop a response's hop-by-hop headers, those named in its `Connection` included.
pub(crate) fn strip_hop_by_hop(headers: &mut http::HeaderMap) {
    let options: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .filter_map(|t| HeaderName::from_bytes(t.trim_ascii()).ok())
        .collect();
    for name in HOP_BY_HOP.iter().chain(&options) {
        headers.remove(name);
    }
}
