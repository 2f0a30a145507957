//! `kubectl debug` through a logical cluster, the syncer's leg: the control plane, having
//! checked the change, sends `PATCH /ephemeralcontainers/<namespace>/<pod>` with the Pod's
//! ephemeral containers (a strategic merge patch), and the syncer makes it on the cluster's
//! own `pods/ephemeralcontainers` with its credentials; the cluster's answer (the Pod, or its
//! refusal as a Status) goes back as it is.

use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};

use crate::connect::{Body, answer};

/// The endpoint's path prefix.
pub const PREFIX: &str = "/ephemeralcontainers/";

/// Bytes of a patch taken (kube's own request limit).
pub const MAX_PATCH: usize = 3 << 20;

/// The only patch the control plane sends.
const STRATEGIC: &str = "application/strategic-merge-patch+json";

/// Make the patch `req` carries on pod `pod` of namespace `ns` (one the syncer synced) and
/// pass the cluster's answer back.
pub async fn relay(
    req: Request<hyper::body::Incoming>,
    downstream: &kube::Client,
    ns: &str,
    pod: &str,
) -> Response<Body> {
    if req
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| v.as_bytes())
        != Some(STRATEGIC.as_bytes())
    {
        return answer(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("a {STRATEGIC} body only\n"),
        );
    }
    let body = match Limited::new(req.into_body(), MAX_PATCH).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return answer(StatusCode::PAYLOAD_TOO_LARGE, format!("the patch: {e}\n")),
    };
    let uri = format!(
        "/api/v1/namespaces/{ns}/pods/{pod}/ephemeralcontainers?fieldManager={}",
        sluice_api::sync::FIELD_MANAGER
    );
    let Ok(onward) = Request::patch(&uri)
        .header(header::CONTENT_TYPE, STRATEGIC)
        .body(kube::client::Body::from(body.to_vec()))
    else {
        return answer(StatusCode::BAD_REQUEST, "bad request\n".into());
    };
    match downstream.send(onward).await {
        Ok(resp) => resp.map(|b| {
            b.map_err(|e| std::io::Error::other(e.to_string()))
                .boxed_unsync()
        }),
        Err(e) => answer(
            StatusCode::BAD_GATEWAY,
            format!("the cluster's API server did not answer: {e}\n"),
        ),
    }
}
