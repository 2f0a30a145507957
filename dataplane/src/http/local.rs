//! Responses the proxy makes itself: an error with its [`Reason`], written by either HTTP
//! path (hyper's here, the lean path's in `h1`).

use std::convert::Infallible;

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};

use crate::reason::Reason;

/// Why a response body broke off: hyper's or the h2 crate's error, from either upstream
/// client.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// The body of every response the proxy sends on the hyper path.
pub type ProxyBody = BoxBody<Bytes, BodyError>;

/// A response the proxy makes itself; each path writes it in its own way.
#[derive(Debug)]
pub struct LocalError {
    pub reason: Reason,
    pub detail: String,
}

impl LocalError {
    pub fn new(reason: Reason, detail: impl Into<String>) -> Self {
        Self {
            reason,
            detail: detail.into(),
        }
    }

    pub fn status(&self) -> StatusCode {
        self.reason.status()
    }
}

/// A locally generated response (errors).
pub fn response(e: LocalError) -> Response<ProxyBody> {
    let body = Full::new(Bytes::from(e.detail + "\n"))
        .map_err(|never: Infallible| match never {})
        .boxed();
    let mut r = Response::new(body);
    *r.status_mut() = e.reason.status();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r.headers_mut().insert(
        HeaderName::from_static("x-sluice-error"),
        HeaderValue::from_static(e.reason.label()),
    );
    r
}
