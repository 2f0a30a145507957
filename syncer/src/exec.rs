//! `kubectl exec` through a logical cluster, the syncer's leg: the control plane's upgraded
//! request for `/exec/<namespace>/<pod>` is sent on, headers and query as they came, to the
//! cluster's own `pods/exec` with the syncer's credentials; the cluster's answer comes back
//! as it is — a refusal with its Status, or a switch of protocols, after which bytes are
//! copied both ways until either side closes. The syncer reads nothing of the session.

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tracing::Instrument;

/// The endpoint's response body ([`crate::logs`] serves it).
pub type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, std::io::Error>;

/// The headers of a WebSocket (or SPDY) upgrade that travel to the cluster and back.
const UPGRADE_HEADERS: [header::HeaderName; 5] = [
    header::UPGRADE,
    header::CONNECTION,
    header::SEC_WEBSOCKET_KEY,
    header::SEC_WEBSOCKET_VERSION,
    header::SEC_WEBSOCKET_PROTOCOL,
];
const ANSWER_HEADERS: [header::HeaderName; 4] = [
    header::UPGRADE,
    header::CONNECTION,
    header::SEC_WEBSOCKET_ACCEPT,
    header::SEC_WEBSOCKET_PROTOCOL,
];

fn answer(status: StatusCode, text: String) -> Response<Body> {
    let mut r = Response::new(
        Full::new(Bytes::from(text))
            .map_err(|e: std::convert::Infallible| match e {})
            .boxed_unsync(),
    );
    *r.status_mut() = status;
    r
}

/// Send the upgrade `req` for pod `pod` of namespace `ns` to the cluster and pass its
/// answer back (the namespace was checked to be one the syncer synced).
pub async fn relay(
    mut req: Request<hyper::body::Incoming>,
    downstream: &kube::Client,
    ns: &str,
    pod: &str,
) -> Response<Body> {
    let mut uri = format!("/api/v1/namespaces/{ns}/pods/{pod}/exec");
    if let Some(q) = req.uri().query() {
        uri.push('?');
        uri.push_str(q);
    }
    let mut onward = Request::get(&uri);
    for h in UPGRADE_HEADERS {
        for v in req.headers().get_all(&h) {
            onward = onward.header(&h, v);
        }
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
    for h in ANSWER_HEADERS {
        if let Some(v) = resp.headers().get(&h) {
            back.headers_mut().insert(h, v.clone());
        }
    }
    let control_side = hyper::upgrade::on(&mut req);
    let cluster_side = hyper::upgrade::on(resp);
    let span = tracing::info_span!("exec relay", namespace = %ns, %pod);
    tokio::spawn(
        async move {
            let (control, cluster) = match tokio::try_join!(control_side, cluster_side) {
                Ok(both) => both,
                Err(e) => {
                    tracing::debug!(error = %e, "exec: an upgrade did not complete");
                    return;
                }
            };
            let (mut control, mut cluster) = (TokioIo::new(control), TokioIo::new(cluster));
            match tokio::io::copy_bidirectional(&mut control, &mut cluster).await {
                Ok((up, down)) => tracing::info!(up, down, "exec session ended"),
                Err(e) => tracing::debug!(error = %e, "exec session ended"),
            }
        }
        .instrument(span),
    );
    back
}
