//! Why the proxy failed a request, a connection or a tunnel stream: one enum, mapped here
//! and only here to the metrics label, the `x-sluice-error` header and the HTTP status a
//! client gets.

use http::StatusCode;

/// A failure reason. The label is stable: dashboards and tests select on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The client's request could not be parsed or forwarded as sent.
    BadRequest,
    /// The request head was larger than the proxy accepts.
    HeadersTooLarge,
    /// No endpoint of the service serves (none, or all draining or at weight 0).
    NoEndpoint,
    /// No ingress route for the request's host.
    NoRoute,
    /// No byte reached the endpoint (connect refused, tunnel stream refused).
    Connect,
    /// The exchange broke after the request was (perhaps) sent.
    Reset,
    /// A 503 from a draining endpoint.
    Draining,
    /// The endpoint or gateway did not answer in time.
    Timeout,
    /// A TLS or QUIC handshake with a gateway failed, or a peer was not trusted.
    Handshake,
    /// The gateway refused a target that is not an endpoint of an exported service.
    NotExported,
    /// The gateway could not reach the target.
    Unreachable,
    /// A tunnel peer broke the tunnel protocol.
    Protocol,
    /// A method the listener does not serve: a gateway anything but CONNECT, an HTTP
    /// service CONNECT.
    Method,
    /// The tunnel's own configuration (identity, bind) is broken.
    Config,
}

impl Reason {
    /// The metrics label and `x-sluice-error` value.
    pub const fn label(self) -> &'static str {
        match self {
            Self::BadRequest => "bad_request",
            Self::HeadersTooLarge => "headers_too_large",
            Self::NoEndpoint => "no_endpoint",
            Self::NoRoute => "no_route",
            Self::Connect => "connect",
            Self::Reset => "reset",
            Self::Draining => "draining",
            Self::Timeout => "timeout",
            Self::Handshake => "handshake",
            Self::NotExported => "not_exported",
            Self::Unreachable => "unreachable",
            Self::Protocol => "protocol",
            Self::Method => "method",
            Self::Config => "config",
        }
    }

    /// The status of the response the proxy (or the gateway) makes itself for it.
    pub const fn status(self) -> StatusCode {
        match self {
            Self::BadRequest => StatusCode::BAD_REQUEST,
            Self::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Self::NoEndpoint => StatusCode::SERVICE_UNAVAILABLE,
            Self::NoRoute => StatusCode::NOT_FOUND,
            Self::NotExported => StatusCode::FORBIDDEN,
            Self::Method => StatusCode::METHOD_NOT_ALLOWED,
            Self::Timeout => StatusCode::GATEWAY_TIMEOUT,
            Self::Connect
            | Self::Reset
            | Self::Draining
            | Self::Handshake
            | Self::Unreachable
            | Self::Protocol
            | Self::Config => StatusCode::BAD_GATEWAY,
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

#[cfg(test)]
mod tests {
    use super::Reason;

    #[test]
    fn client_errors_are_4xx_and_upstream_failures_5xx() {
        for r in [
            Reason::BadRequest,
            Reason::HeadersTooLarge,
            Reason::NoRoute,
            Reason::NotExported,
            Reason::Method,
        ] {
            assert!(r.status().is_client_error(), "{r}");
        }
        for r in [
            Reason::NoEndpoint,
            Reason::Connect,
            Reason::Reset,
            Reason::Draining,
            Reason::Timeout,
            Reason::Unreachable,
        ] {
            assert!(r.status().is_server_error(), "{r}");
        }
    }
}
