//! `kubectl exec`, `attach` and `port-forward` through a logical cluster, the syncer's leg:
//! the control plane's upgraded request for `/exec/<namespace>/<pod>` (or `/attach/…`,
//! `/portforward/…`) is sent on, headers and query as they came, to the cluster's own
//! `pods/exec` (`attach`, `portforward`) with the syncer's credentials; the cluster's
//! answer comes back as it is — a refusal with its Status, or a switch of protocols, after
//! which bytes are copied both ways until either side closes. The syncer reads nothing of
//! the session.

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use sluice_kube::upgrade;

/// The endpoint's response body ([`crate::logs`] serves it).
pub type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, std::io::Error>;

/// A plain answer of the endpoint's (a refusal, or the head of a switch of protocols).
pub(crate) fn answer(status: StatusCode, text: String) -> Response<Body> {
    let mut r = Response::new(
        Full::new(Bytes::from(text))
            .map_err(|e: std::convert::Infallible| match e {})
            .boxed_unsync(),
    );
    *r.status_mut() = status;
    r
}

/// The connect subresources relayed.
pub const SUBRESOURCES: [&str; 3] = ["exec", "attach", "portforward"];

/// Send the upgrade `req` for `subresource` (one of [`SUBRESOURCES`]) of pod `pod` of
/// namespace `ns` to the cluster and pass its answer back (the namespace was checked to be
/// one the syncer synced).
pub async fn relay(
    mut req: Request<hyper::body::Incoming>,
    downstream: &kube::Client,
    subresource: &str,
    ns: &str,
    pod: &str,
) -> Response<Body> {
    let mut uri = format!("/api/v1/namespaces/{ns}/pods/{pod}/{subresource}");
    if let Some(q) = req.uri().query() {
        uri.push('?');
        uri.push_str(q);
    }
    let mut onward = Request::get(&uri);
    if let Some(h) = onward.headers_mut() {
        upgrade::copy_headers(&upgrade::REQUEST_HEADERS, req.headers(), h);
    }
    let Ok(onward) = onward.body(kube::client::Body::empty()) else {
        return answer(StatusCode::BAD_REQUEST, "bad query\n".into());
    };
    let resp = match downstream.send(onward).await {
        Ok(r) => r,
        Err(e) => {
            return answer(
                StatusCode::BAD_GATEWAY,
                format!("the cluster's API server did not answer: {e}\n"),
            );
        }
    };
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        return resp.map(|b| {
            b.map_err(|e| std::io::Error::other(e.to_string()))
                .boxed_unsync()
        });
    }
    let mut back = answer(StatusCode::SWITCHING_PROTOCOLS, String::new());
    upgrade::copy_headers(&upgrade::ANSWER_HEADERS, resp.headers(), back.headers_mut());
    let control_side = hyper::upgrade::on(&mut req);
    let cluster_side = hyper::upgrade::on(resp);
    upgrade::splice(
        control_side,
        cluster_side,
        tracing::info_span!("connect relay", subresource, namespace = %ns, %pod),
    );
    back
}
