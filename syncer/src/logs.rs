//! The syncer's log endpoint: `kubectl logs` against a logical cluster is served from the
//! physical cluster the pod runs on, and the syncer is the part that holds that cluster's
//! credentials. The control plane forwards `GET /logs/<namespace>/<pod>?<query>` (the
//! downstream namespace, kubectl's query: `container`, `follow`, `previous`, `tailLines`,
//! ...) here, and the syncer streams the cluster's `pods/log` back, for the namespaces it
//! synced only; `GET /exec/<namespace>/<pod>?<query>`, `/attach/…` and `/portforward/…`,
//! upgrades, go on to the cluster's `pods/exec`, `pods/attach` and `pods/portforward`
//! ([`crate::connect`]); `PATCH /ephemeralcontainers/<namespace>/<pod>` adds ephemeral
//! containers there ([`crate::ephemeral`]); `GET /metrics/<namespace>` answers the cluster's own
//! `metrics.k8s.io` Pod metrics of the namespace (`kubectl top pod`); an upgraded
//! `GET /services/<namespace>/<service>/<port>` becomes a byte stream to one of the
//! Service's ready endpoints (an admission webhook's, [`crate::dial`]). Its URL is published
//! on the syncer's heartbeat Lease.
//!
//! Both ends prove who they are per cluster, with certificates the control plane's CA
//! signed: the syncer serves TLS with the certificate of its own kubeconfig (which names
//! `<cluster>.syncer.sluice.internal`, checked by the control plane like a host name), and
//! answers only a client whose certificate names the control plane
//! ([`CONTROL_PLANE_USER`]) — not another cluster's syncer, nor any other identity the CA
//! signed. The listener bounds what a client holds: a TLS handshake and a request head each
//! within [`HEAD_WITHIN`], at most [`MAX_CONNECTIONS`] connections.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use sluice_api::liveness::CONTROL_PLANE_USER;
use tokio::sync::watch;

/// Annotation on a syncer's heartbeat Lease: the URL of its log endpoint.
pub const ANNOTATION_LOGS_URL: &str = sluice_api::liveness::ANNOTATION_SYNCER_LOGS;

/// How long a client may take over its TLS handshake, and over a request head.
pub const HEAD_WITHIN: Duration = Duration::from_secs(10);

/// Connections served at once; more wait in the listen backlog.
pub const MAX_CONNECTIONS: usize = 64;

type Body = crate::connect::Body;

/// Why the log endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum LogsError {
    #[error("binding the log endpoint: {0}")]
    Bind(#[from] std::io::Error),
    #[error("the syncer's TLS identity: {0}")]
    Identity(String),
}

/// The syncer's TLS identity: the certificate and key of its kubeconfig (PEM), and the
/// control plane's CA (DER), the only one whose clients it answers.
#[derive(Clone)]
pub struct Identity {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    pub ca_der: Vec<Vec<u8>>,
}

impl Identity {
    /// The identity of the syncer's kubeconfig for the control plane: its client
    /// certificate and key (inline or in files) and its certificate authority.
    pub fn of(config: &kube::Config) -> Result<Self, LogsError> {
        use base64::Engine;
        use secrecy::ExposeSecret;
        let auth = &config.auth_info;
        let load = |data: Option<&str>,
                    file: Option<&String>,
                    what: &str|
         -> Result<Vec<u8>, LogsError> {
            match (data, file) {
                (Some(d), _) => base64::engine::general_purpose::STANDARD
                    .decode(d.trim())
                    .map_err(|e| LogsError::Identity(format!("{what}: {e}"))),
                (None, Some(f)) => {
                    std::fs::read(f).map_err(|e| LogsError::Identity(format!("{what} {f}: {e}")))
                }
                (None, None) => Err(LogsError::Identity(format!(
                    "the kubeconfig has no {what}: the log endpoint needs the syncer's certificate (`sluice control kubeconfig --syncer`)"
                ))),
            }
        };
        let cert_pem = load(
            auth.client_certificate_data.as_deref(),
            auth.client_certificate.as_ref(),
            "client certificate",
        )?;
        let key_pem = load(
            auth.client_key_data.as_ref().map(|k| k.expose_secret()),
            auth.client_key.as_ref(),
            "client key",
        )?;
        let ca_der = config.root_cert.clone().unwrap_or_default();
        if ca_der.is_empty() {
            return Err(LogsError::Identity(
                "the kubeconfig names no certificate authority".into(),
            ));
        }
        Ok(Self {
            cert_pem,
            key_pem,
            ca_der,
        })
    }

    /// The TLS server configuration: our certificate; a client certificate the CA signed
    /// is required.
    fn server_config(&self) -> Result<rustls::ServerConfig, LogsError> {
        let bad = |e: &dyn std::fmt::Display| LogsError::Identity(e.to_string());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for c in &self.ca_der {
            roots
                .add(CertificateDer::from(c.clone()))
                .map_err(|e| bad(&e))?;
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .map_err(|e| bad(&e))?;
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&self.cert_pem)
            .collect::<Result<_, _>>()
            .map_err(|e| bad(&e))?;
        if certs.is_empty() {
            return Err(LogsError::Identity("no certificate".into()));
        }
        let key = PrivateKeyDer::from_pem_slice(&self.key_pem).map_err(|e| bad(&e))?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(&e))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs, key)
            .map_err(|e| bad(&e))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

/// The common name of a verified client certificate.
fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?.as_str().ok()?;
    Some(cn.to_string())
}

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

/// Whether `s` is a namespace's or a Pod's name (DNS subdomain characters).
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

/// `<prefix><namespace>/<pod>` → the two names, if they are names.
fn target<'a>(path: &'a str, prefix: &str) -> Option<(&'a str, &'a str)> {
    let rest = path.strip_prefix(prefix)?;
    let (ns, pod) = rest.split_once('/')?;
    (is_name(ns) && is_name(pod)).then_some((ns, pod))
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

fn not_synced(ns: &str) -> Response<Body> {
    plain(
        StatusCode::NOT_FOUND,
        &format!("not found: namespace {ns} is not one Sluice synced to this cluster\n"),
    )
}

/// What the control plane asked of the endpoint.
enum Asked<'a> {
    /// `kubectl logs` of a Pod.
    Logs(&'a str),
    /// A connect subresource of a Pod (exec, attach, portforward).
    Connect(&'static str, &'a str),
    /// The namespace's Pod metrics (`kubectl top pod`).
    Metrics,
}

async fn handle(req: Request<hyper::body::Incoming>, downstream: kube::Client) -> Response<Body> {
    let path = req.uri().path().to_string();
    if req.method() == http::Method::PATCH
        && let Some((ns, pod)) = target(&path, crate::ephemeral::PREFIX)
    {
        if !synced(&downstream, ns).await {
            return not_synced(ns);
        }
        return crate::ephemeral::relay(req, &downstream, ns, pod).await;
    }
    if req.method() == http::Method::GET
        && let Some((ns, service, port)) = crate::dial::target(&path)
    {
        if !(is_name(ns) && is_name(service)) {
            return plain(StatusCode::NOT_FOUND, "not found: no such service\n");
        }
        if !synced(&downstream, ns).await {
            return not_synced(ns);
        }
        return crate::dial::relay(req, &downstream, ns, service, port).await;
    }
    if req.method() != http::Method::GET {
        return plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "GET only (PATCH /ephemeralcontainers/<namespace>/<pod>)\n",
        );
    }
    let connect = crate::connect::SUBRESOURCES
        .into_iter()
        .find_map(|sub| Some((sub, target(&path, &format!("/{sub}/"))?)));
    let metrics = path.strip_prefix("/metrics/").filter(|ns| is_name(ns));
    let (what, ns) = match (target(&path, "/logs/"), connect, metrics) {
        (Some((ns, pod)), _, _) => (Asked::Logs(pod), ns),
        (None, Some((sub, (ns, pod))), _) => (Asked::Connect(sub, pod), ns),
        (None, None, Some(ns)) => (Asked::Metrics, ns),
        (None, None, None) => {
            return plain(
                StatusCode::NOT_FOUND,
                "not found: GET /logs/<namespace>/<pod>, /exec/<namespace>/<pod>, /attach/<namespace>/<pod>, /portforward/<namespace>/<pod> or /metrics/<namespace>\n",
            );
        }
    };
    // Only namespaces Sluice synced: the endpoint is no window into the cluster's own.
    if !synced(&downstream, ns).await {
        return not_synced(ns);
    }
    let uri = match what {
        Asked::Connect(subresource, pod) => {
            return crate::connect::relay(req, &downstream, subresource, ns, pod).await;
        }
        Asked::Logs(pod) => {
            let mut uri = format!("/api/v1/namespaces/{ns}/pods/{pod}/log");
            if let Some(q) = req.uri().query() {
                uri.push('?');
                uri.push_str(q);
            }
            uri
        }
        // The namespace's Pod metrics, from the cluster's own metrics API.
        Asked::Metrics => format!(
            "/apis/{}/{}/namespaces/{ns}/pods",
            sluice_api::metrics::GROUP,
            sluice_api::metrics::VERSION
        ),
    };
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

/// One accepted connection: the TLS handshake, the client's identity, then HTTP/1.1.
async fn connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    tls: tokio_rustls::TlsAcceptor,
    downstream: kube::Client,
) {
    let stream = match tokio::time::timeout(HEAD_WITHIN, tls.accept(stream)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "log endpoint: TLS handshake refused");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "log endpoint: TLS handshake timed out");
            return;
        }
    };
    let client = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(|c| common_name(c));
    if client.as_deref() != Some(CONTROL_PLANE_USER) {
        tracing::warn!(%peer, client = ?client, "log endpoint: a client that is not the control plane was refused");
        return;
    }
    let svc = service_fn(move |req| {
        let downstream = downstream.clone();
        async move { Ok::<_, Infallible>(handle(req, downstream).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_WITHIN)
        .serve_connection(TokioIo::new(stream), svc)
        .with_upgrades()
        .await;
}

/// Serve the log endpoint on `addr` as `identity` until `shutdown` changes; returns the
/// bound address.
pub async fn serve(
    addr: SocketAddr,
    downstream: kube::Client,
    identity: &Identity,
    mut shutdown: watch::Receiver<bool>,
) -> Result<SocketAddr, LogsError> {
    let tls = tokio_rustls::TlsAcceptor::from(Arc::new(identity.server_config()?));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    tokio::spawn(async move {
        loop {
            // A free slot first: at the limit, new connections wait in the backlog.
            let slot = tokio::select! {
                _ = shutdown.changed() => return,
                s = slots.clone().acquire_owned() => match s {
                    Ok(s) => s,
                    Err(_) => return,
                },
            };
            let (stream, peer) = tokio::select! {
                _ = shutdown.changed() => return,
                a = listener.accept() => match a {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::debug!(error = %e, "logs accept failed");
                        continue;
                    }
                },
            };
            let (tls, downstream) = (tls.clone(), downstream.clone());
            tokio::spawn(async move {
                connection(stream, peer, tls, downstream).await;
                drop(slot);
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
        let logs = |p| target(p, "/logs/");
        assert_eq!(logs("/logs/shop-abc/web-1"), Some(("shop-abc", "web-1")));
        assert_eq!(logs("/logs/shop/../x"), None);
        assert_eq!(logs("/logs/shop/a/b"), None);
        assert_eq!(logs("/logs//x"), None);
        assert_eq!(logs("/metrics"), None);
        assert_eq!(target("/exec/shop/web", "/exec/"), Some(("shop", "web")));
    }
}
