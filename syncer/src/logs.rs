//! The syncer's log endpoint: `kubectl logs` against a logical cluster is served from the
//! physical cluster the pod runs on, and the syncer is the part that holds that cluster's
//! credentials. The control plane forwards `GET /logs/<namespace>/<pod>?<query>` (the
//! downstream namespace, kubectl's query: `container`, `follow`, `previous`, `tailLines`,
//! ...) here with the bearer token both share, and the syncer streams the cluster's
//! `pods/log` back, for the namespaces it synced only. Its URL is published on the syncer's
//! heartbeat Lease.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::watch;

/// Annotation on a syncer's heartbeat Lease: the URL of its log endpoint.
pub const ANNOTATION_LOGS_URL: &str = sluice_api::liveness::ANNOTATION_SYNCER_LOGS;

type Body = UnsyncBoxBody<Bytes, std::io::Error>;

fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut r = Response::new(
        Full::new(Bytes::from(text.to_string()))
            .map_err(|e: Infallible| match e {})
            .boxed_unsync(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    r
}

/// Whether two secrets are equal, in time that depends only on their lengths.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `/logs/<namespace>/<pod>` → the two names, if they are names.
fn target(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/logs/")?;
    let (ns, pod) = rest.split_once('/')?;
    let name = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    };
    (name(ns) && name(pod)).then_some((ns, pod))
}

/// Whether namespace `ns` of the cluster is one the syncer made (labelled
/// `sluice.dev/synced`).
async fn synced(downstream: &kube::Client, ns: &str) -> bool {
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(downstream.clone());
    matches!(
        namespaces.get_opt(ns).await,
        Ok(Some(n)) if n.metadata.labels.as_ref().and_then(|l| l.get(sluice_api::sync::LABEL_SYNCED)).map(String::as_str) == Some("true")
    )
}

async fn handle(
    req: Request<hyper::body::Incoming>,
    downstream: kube::Client,
    token: &str,
) -> Response<Body> {
    let authorized = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| !token.is_empty() && same(t.as_bytes(), token.as_bytes()));
    if !authorized {
        return plain(StatusCode::UNAUTHORIZED, "unauthorized\n");
    }
    if req.method() != http::Method::GET {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "GET only\n");
    }
    let Some((ns, pod)) = target(req.uri().path()) else {
        return plain(
            StatusCode::NOT_FOUND,
            "not found: GET /logs/<namespace>/<pod>\n",
        );
    };
    // Only namespaces Sluice synced: the endpoint is no window into the cluster's own.
    if !synced(&downstream, ns).await {
        return plain(
            StatusCode::NOT_FOUND,
            &format!("not found: namespace {ns} is not one Sluice synced to this cluster\n"),
        );
    }
    let mut uri = format!("/api/v1/namespaces/{ns}/pods/{pod}/log");
    if let Some(q) = req.uri().query() {
        uri.push('?');
        uri.push_str(q);
    }
    let Ok(request) = Request::get(&uri).body(kube::client::Body::empty()) else {
        return plain(StatusCode::BAD_REQUEST, "bad query\n");
    };
    match downstream.send(request).await {
        Ok(resp) => resp.map(|b| {
            b.map_err(|e| std::io::Error::other(e.to_string()))
                .boxed_unsync()
        }),
        Err(e) => plain(
            StatusCode::BAD_GATEWAY,
            &format!("the cluster's API server did not answer: {e}\n"),
        ),
    }
}

/// Serve the log endpoint on `addr` until `shutdown` changes; returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    downstream: kube::Client,
    token: String,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let token: std::sync::Arc<str> = token.into();
    tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                _ = shutdown.changed() => return,
                a = listener.accept() => match a {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::debug!(error = %e, "logs accept failed");
                        continue;
                    }
                },
            };
            let (downstream, token) = (downstream.clone(), token.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let (downstream, token) = (downstream.clone(), token.clone());
                    async move { Ok::<_, Infallible>(handle(req, downstream, &token).await) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::target;

    #[test]
    fn only_names_reach_the_cluster() {
        assert_eq!(target("/logs/shop-abc/web-1"), Some(("shop-abc", "web-1")));
        assert_eq!(target("/logs/shop/../x"), None);
        assert_eq!(target("/logs/shop/a/b"), None);
        assert_eq!(target("/logs//x"), None);
        assert_eq!(target("/metrics"), None);
    }
}
