//! What every handler answers with: the request's context, bodies, JSON and error
//! responses, streamed text, and reading a body within the size limit.

use std::convert::Infallible;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited, StreamBody, combinators::BoxBody};
use hyper::body::Frame;
use tokio_stream::StreamExt;

use crate::auth::User;
use crate::errors::{ApiError, ApiResult};
use crate::request::{Query, Target};

pub type Body = BoxBody<Bytes, Infallible>;
pub type Resp = Response<Body>;

/// Everything a handler needs to know about the request.
pub struct Ctx {
    pub method: Method,
    pub target: Target,
    pub query: Query,
    pub headers: HeaderMap,
    pub user: User,
    /// Warnings for the `Warning` response header (unknown fields under `Warn`).
    pub warnings: Vec<String>,
    /// Annotations for the request's audit event (admission policies).
    pub audit_annotations: Vec<(String, String)>,
    /// The query as sent (`Query` keeps one value per key; exec's `command` repeats).
    pub raw_query: String,
    /// The connection's upgrade, for a request that switches protocols (`pods/exec`).
    pub upgrade: Option<hyper::upgrade::OnUpgrade>,
}

impl Ctx {
    pub fn accept(&self) -> &str {
        self.headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    pub fn content_type(&self) -> &str {
        self.headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    pub fn dry_run(&self) -> bool {
        self.query.get("dryRun") == Some("All")
    }
}

/// A response's audit annotations, carried to the audit log in its extensions.
#[derive(Clone, Debug, Default)]
pub struct AuditAnnotations(pub Vec<(String, String)>);

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

pub fn json(code: StatusCode, body: impl Into<Bytes>) -> Resp {
    let mut r = Response::new(full(body));
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

pub fn json_value(code: StatusCode, v: &serde_json::Value) -> Resp {
    json(code, serde_json::to_vec(v).unwrap_or_default())
}

/// The one mapping from [`ApiError`] to the wire.
pub fn error_response(e: &ApiError) -> Resp {
    let code = StatusCode::from_u16(e.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = json_value(code, &e.to_status());
    if let ApiError::TooManyRequests(t) = e {
        resp.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(t.retry_after_seconds),
        );
    }
    resp
}

/// Read a request body up to the size limit.
pub async fn read_body(body: hyper::body::Incoming, limit: usize) -> ApiResult<Bytes> {
    match Limited::new(body, limit).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(ApiError::too_large(limit))
        }
        Err(e) => Err(ApiError::BadRequest(format!("reading request body: {e}"))),
    }
}

/// A `text/plain` response whose body is what arrives on `rx`, until it closes.
pub fn streamed(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Resp {
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx)
        .map(|b| Ok::<_, Infallible>(Frame::data(b)));
    let mut r = Response::new(StreamBody::new(stream).boxed());
    *r.status_mut() = StatusCode::OK;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    r
}
