//! How a webhook is reached. A `url` is called directly. A `service` names a Service of
//! the webhook's own cluster: in a physical cluster's server its ready endpoints are dialled
//! directly; in a logical cluster the Service runs on some physical cluster, and the
//! control plane asks that cluster's syncer (mutual TLS, the cluster's identity) for a
//! byte stream to one of its ready endpoints — clusters the Service is placed on, the ones
//! not draining first, so a webhook keeps answering while its namespace moves. TLS runs end
//! to end over that stream: the webhook proves the name `<service>.<namespace>.svc` with a
//! certificate its `caBundle` signed (the system's roots without one), so neither the
//! syncer nor anything between reads or changes a review.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use sluice_api::{ClusterName, LogicalClusterPath};
use tokio::io::{AsyncRead, AsyncWrite};

use super::config::{Client, Webhook};
use super::pool::{Pool, Sender};
use super::review::MAX_RESPONSE_BYTES;
use crate::state::ApiState;
use crate::storage::ResourcePrefix;

/// How long connecting to one endpoint may take before the next is tried (within the
/// webhook's own timeout).
const CONNECT_WITHIN: Duration = Duration::from_secs(3);

/// Why a webhook was not called (kube's `failed to call webhook`).
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("context deadline exceeded")]
    Timeout,
    #[error("dial tcp {addr}: {source}")]
    Dial {
        addr: String,
        source: std::io::Error,
    },
    #[error("tls: {0}")]
    Tls(String),
    #[error("the caBundle: {0}")]
    Bundle(String),
    #[error("{0}")]
    Http(String),
    #[error("the server responded with status code {code}: {body}")]
    Status { code: u16, body: String },
    #[error("the response is larger than {MAX_RESPONSE_BYTES} bytes")]
    TooLarge,
    #[error("service {service:?} in namespace {namespace:?}: {why}")]
    NoRoute {
        namespace: String,
        service: String,
        why: String,
    },
    #[error("cluster {cluster}'s syncer: {why}")]
    Syncer { cluster: ClusterName, why: String },
}

/// The system's trust roots, read once (for webhooks without a `caBundle`).
fn system_roots() -> &'static rustls::RootCertStore {
    static ROOTS: OnceLock<rustls::RootCertStore> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        roots
    })
}

fn tls_config(ca_bundle: &[u8]) -> Result<Arc<rustls::ClientConfig>, CallError> {
    let roots = if ca_bundle.is_empty() {
        system_roots().clone()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_pemfile::certs(&mut &ca_bundle[..]) {
            let cert: CertificateDer<'static> =
                cert.map_err(|e| CallError::Bundle(e.to_string()))?;
            roots
                .add(cert)
                .map_err(|e| CallError::Bundle(e.to_string()))?;
        }
        roots
    };
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| CallError::Tls(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// An HTTP/1.1 connection over `io`, after a TLS handshake proving `server_name`.
async fn handshake<IO>(
    io: IO,
    tls: Arc<rustls::ClientConfig>,
    server_name: &str,
) -> Result<Sender, CallError>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let name = ServerName::try_from(server_name.to_string())
        .map_err(|e| CallError::Tls(format!("{server_name:?}: {e}")))?;
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(name, io)
        .await
        .map_err(|e| CallError::Tls(e.to_string()))?;
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| CallError::Http(e.to_string()))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(send)
}

/// POST `body` to `path` on `sender`'s connection; the answer's body if it is a 200.
async fn post(
    sender: &mut Sender,
    host: &str,
    path: &str,
    body: Bytes,
) -> Result<Bytes, CallError> {
    sender
        .ready()
        .await
        .map_err(|e| CallError::Http(e.to_string()))?;
    let request = Request::post(path)
        .header(header::HOST, host)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, */*")
        .header(header::USER_AGENT, "sluice-control/admission")
        .body(Full::new(body))
        .map_err(|e| CallError::Http(e.to_string()))?;
    let resp = sender
        .send_request(request)
        .await
        .map_err(|e| CallError::Http(e.to_string()))?;
    let status = resp.status();
    let bytes = Limited::new(resp.into_body(), MAX_RESPONSE_BYTES)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                CallError::TooLarge
            } else {
                CallError::Http(e.to_string())
            }
        })?
        .to_bytes();
    if status != StatusCode::OK {
        let text: String = String::from_utf8_lossy(&bytes).chars().take(256).collect();
        return Err(CallError::Status {
            code: status.as_u16(),
            body: text.trim().to_string(),
        });
    }
    Ok(bytes)
}

/// Whether the connection still carries requests after `result` (the webhook answered).
fn reusable(result: &Result<Bytes, CallError>) -> bool {
    matches!(result, Ok(_) | Err(CallError::Status { .. }))
}

/// One call over route `key`: a kept connection when there is one (a fresh one if it turns
/// out to be closed), else one `connect` opens; kept again after an answer.
async fn over<F, Fut>(
    pool: &Pool,
    key: String,
    host: &str,
    path: &str,
    body: Bytes,
    connect: F,
) -> Result<Bytes, CallError>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<Sender, CallError>>,
{
    if let Some(mut sender) = pool.take(&key) {
        let result = post(&mut sender, host, path, body.clone()).await;
        if reusable(&result) {
            pool.put(key, sender);
            return result;
        }
        tracing::debug!(route = %key, "a kept webhook connection failed; opening another");
    }
    let mut sender = connect().await?;
    let result = post(&mut sender, host, path, body).await;
    if reusable(&result) {
        pool.put(key, sender);
    }
    result
}

async fn dial(addr: &str) -> Result<tokio::net::TcpStream, CallError> {
    match tokio::time::timeout(CONNECT_WITHIN, tokio::net::TcpStream::connect(addr)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(source)) => Err(CallError::Dial {
            addr: addr.to_string(),
            source,
        }),
        Err(_) => Err(CallError::Dial {
            addr: addr.to_string(),
            source: std::io::Error::new(std::io::ErrorKind::TimedOut, "i/o timeout"),
        }),
    }
}

fn stored(
    state: &ApiState,
    group: &str,
    resource: &str,
    cluster: &LogicalClusterPath,
    ns: &str,
    name: &str,
) -> Option<Value> {
    let key = ResourcePrefix::new(group, resource).key(cluster, Some(ns), name);
    serde_json::from_slice(&state.store.get(&key)?.value).ok()
}

/// The ready endpoints of Service `name` for its port `port`, from this server's own
/// EndpointSlices (a physical cluster's server).
fn local_endpoints(
    state: &ApiState,
    cluster: &LogicalClusterPath,
    namespace: &str,
    name: &str,
    port: u16,
) -> Result<Vec<SocketAddr>, String> {
    let service = stored(state, "", "services", cluster, namespace, name)
        .ok_or_else(|| format!("service \"{name}\" not found"))?;
    let port_name = service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["port"].as_u64() == Some(u64::from(port)))
        .map(|p| p["name"].as_str().unwrap_or_default().to_string())
        .ok_or_else(|| format!("service \"{name}\" has no port {port}"))?;
    let prefix = ResourcePrefix::new("discovery.k8s.io", "endpointslices")
        .scope(Some(cluster), Some(namespace));
    let mut out = Vec::new();
    state.store.scan(&prefix, None, |_, e| {
        let Ok(slice) = serde_json::from_slice::<Value>(&e.value) else {
            return true;
        };
        if slice["metadata"]["labels"]["kubernetes.io/service-name"] != name {
            return true;
        }
        let Some(target) = slice["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"].as_str().unwrap_or_default() == port_name)
            .and_then(|p| p["port"].as_u64())
            .and_then(|p| u16::try_from(p).ok())
        else {
            return true;
        };
        for ep in slice["endpoints"].as_array().into_iter().flatten() {
            if ep["conditions"]["ready"] == false {
                continue;
            }
            for a in ep["addresses"].as_array().into_iter().flatten() {
                if let Some(ip) = a.as_str().and_then(|s| s.parse().ok()) {
                    out.push(SocketAddr::new(ip, target));
                }
            }
        }
        true
    });
    if out.is_empty() {
        return Err(format!("service \"{name}\" has no ready endpoints"));
    }
    Ok(out)
}

/// The physical clusters Service `name` of logical `cluster` runs on, the ones its
/// namespace is not draining from first.
fn placed_on(
    state: &ApiState,
    cluster: &LogicalClusterPath,
    namespace: &str,
    name: &str,
) -> Result<Vec<ClusterName>, String> {
    let service = stored(state, "", "services", cluster, namespace, name)
        .ok_or_else(|| format!("service \"{name}\" not found"))?;
    let labels: std::collections::BTreeMap<String, String> =
        super::matching::labels_of(&service).into_iter().collect();
    let mut clusters = sluice_api::sync::placed_clusters(&labels);
    if clusters.is_empty() {
        return Err("it runs on no cluster yet".into());
    }
    let ns = state.namespace(cluster, namespace).unwrap_or_default();
    clusters.sort_by_key(|c| {
        ns["metadata"]["annotations"][sluice_api::sync::draining_annotation(c)] == "true"
    });
    Ok(clusters)
}

/// Where a webhook of any kind (admission, conversion) is reached.
#[derive(Clone, Copy)]
pub struct Endpoint<'a> {
    pub client: &'a Client,
    /// PEM certificates that sign its serving certificate.
    pub ca_bundle: &'a [u8],
    /// The whole call, connecting included.
    pub timeout: Duration,
}

impl<'a> From<&'a Webhook> for Endpoint<'a> {
    fn from(hook: &'a Webhook) -> Self {
        Endpoint {
            client: &hook.client,
            ca_bundle: &hook.ca_bundle,
            timeout: hook.timeout,
        }
    }
}

/// Send `body` to the webhook at `hook` of logical (or physical) `cluster` and return its
/// answer, all within the webhook's timeout.
pub async fn call(
    state: &ApiState,
    cluster: &LogicalClusterPath,
    hook: Endpoint<'_>,
    body: Bytes,
) -> Result<Bytes, CallError> {
    tokio::time::timeout(hook.timeout, call_within(state, cluster, hook, body))
        .await
        .map_err(|_| CallError::Timeout)?
}

async fn call_within(
    state: &ApiState,
    cluster: &LogicalClusterPath,
    hook: Endpoint<'_>,
    body: Bytes,
) -> Result<Bytes, CallError> {
    let pool = &state.webhook_connections;
    let server_name = hook.client.server_name();
    let query = format!("?timeout={}s", hook.timeout.as_secs());
    let key = |to: String| Pool::key(&to, &server_name, hook.ca_bundle);
    match hook.client {
        Client::Url {
            authority, path, ..
        } => {
            let path = format!("{path}{query}");
            over(
                pool,
                key(format!("url:{authority}")),
                authority,
                &path,
                body,
                || async {
                    let tcp = dial(authority).await?;
                    handshake(tcp, tls_config(hook.ca_bundle)?, &server_name).await
                },
            )
            .await
        }
        Client::Service {
            namespace,
            name,
            port,
            path,
        } => {
            let path = format!("{path}{query}");
            let host = format!("{server_name}:{port}");
            let no_route = |why: String| CallError::NoRoute {
                namespace: namespace.clone(),
                service: name.clone(),
                why,
            };
            let mut last = None;
            if state.ips.is_some() {
                for addr in
                    local_endpoints(state, cluster, namespace, name, *port).map_err(no_route)?
                {
                    let result = over(
                        pool,
                        key(format!("endpoint:{addr}")),
                        &host,
                        &path,
                        body.clone(),
                        || async {
                            let tcp = dial(&addr.to_string()).await?;
                            handshake(tcp, tls_config(hook.ca_bundle)?, &server_name).await
                        },
                    )
                    .await;
                    match result {
                        Err(e @ CallError::Dial { .. }) => last = Some(e),
                        other => return other,
                    }
                }
            } else {
                let downstream =
                    crate::admission::downstream_names::of_namespace(state, cluster, namespace);
                for physical in placed_on(state, cluster, namespace, name).map_err(no_route)? {
                    let route = format!("service:{cluster}/{namespace}/{name}:{port}@{physical}");
                    let result = over(pool, key(route), &host, &path, body.clone(), || async {
                        let base = crate::agent_client::syncer_url(&state.store, &physical)
                            .ok_or_else(|| CallError::Syncer {
                                cluster: physical.clone(),
                                why: "it has not published an endpoint".into(),
                            })?;
                        let stream = state
                            .agents
                            .dial_service(&base, &physical, &downstream, name, *port)
                            .await
                            .map_err(|e| {
                                tracing::debug!(cluster = %physical, error = %e,
                                    "a webhook's cluster did not give a stream");
                                CallError::Syncer {
                                    cluster: physical.clone(),
                                    why: e.to_string(),
                                }
                            })?;
                        handshake(
                            TokioIo::new(stream),
                            tls_config(hook.ca_bundle)?,
                            &server_name,
                        )
                        .await
                    })
                    .await;
                    match result {
                        // This cluster gave no stream: the next one may.
                        Err(e @ CallError::Syncer { .. }) => last = Some(e),
                        other => return other,
                    }
                }
            }
            Err(last.unwrap_or_else(|| no_route("no endpoint answered".into())))
        }
    }
}
