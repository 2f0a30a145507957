//! How the control plane reaches into a physical cluster (today `kubectl logs`, served by
//! the cluster's syncer): TLS both ways, each end proving a per-cluster identity its CA
//! signed. The syncer's certificate must name `<cluster>.syncer.sluice.internal`
//! ([`syncer_server_name`]), checked like a host name; the control plane presents
//! [`CONTROL_PLANE_USER`], which the syncer checks. An address that cannot prove the
//! cluster's name gets no request, so a published URL cannot point the control plane at
//! another cluster's syncer or at anything else.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use sluice_api::ClusterName;
use sluice_api::liveness::{CONTROL_PLANE_USER, syncer_server_name};

/// How long connecting and the TLS handshake may take: a cluster that is gone fails fast.
const CONNECT_WITHIN: Duration = Duration::from_secs(10);

/// Why a cluster's agent was not reached.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(
        "its endpoint {0:?} is no https:// address (a syncer from before per-cluster TLS: upgrade it)"
    )]
    NotHttps(String),
    #[error("the cluster name {0:?} is no DNS name")]
    Name(String),
    #[error("connecting to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("{addr} did not prove it is {name}: {source}")]
    Identity {
        addr: String,
        name: String,
        source: std::io::Error,
    },
    #[error("{addr} did not complete a TLS handshake within {within:?}")]
    Timeout { addr: String, within: Duration },
    #[error("the request: {0}")]
    Request(#[from] http::Error),
    #[error("{0}")]
    Http(#[from] hyper::Error),
    #[error("refused: {0}")]
    Refused(String),
}

/// The endpoint URL `cluster`'s syncer publishes on its heartbeat Lease (in `root`).
pub fn syncer_url(store: &crate::storage::Store, cluster: &ClusterName) -> Option<String> {
    use sluice_api::liveness::{ANNOTATION_SYNCER_LOGS, SYNCER_LEASE_NAMESPACE, syncer_lease_name};
    let key = crate::storage::ResourcePrefix::new("coordination.k8s.io", "leases").key(
        &sluice_api::LogicalClusterPath::root(),
        Some(SYNCER_LEASE_NAMESPACE),
        &syncer_lease_name(cluster),
    );
    let lease: serde_json::Value = serde_json::from_slice(&store.get(&key)?.value).ok()?;
    lease["metadata"]["annotations"][ANNOTATION_SYNCER_LOGS]
        .as_str()
        .map(str::to_string)
}

/// The upgrade protocol of a byte stream to a Service's endpoint through a syncer.
pub const SERVICE_STREAM_PROTOCOL: &str = "sluice-tcp";

/// The control plane's TLS client toward agents (its identity: [`CONTROL_PLANE_USER`]).
#[derive(Clone)]
pub struct AgentClient {
    tls: tokio_rustls::TlsConnector,
}

impl AgentClient {
    /// `config` trusts the control plane's CA only and presents [`CONTROL_PLANE_USER`]
    /// ([`crate::pki::Pki::agent_client_config`]).
    pub fn new(config: rustls::ClientConfig) -> Self {
        Self {
            tls: tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)),
        }
    }

    /// `GET path_and_query` of `cluster`'s syncer at `url`, the `https://host:port` its
    /// heartbeat Lease publishes; the answer streams as the syncer sends it.
    pub async fn get(
        &self,
        url: &str,
        cluster: &ClusterName,
        path_and_query: &str,
    ) -> Result<Response<Incoming>, AgentError> {
        self.get_with(url, cluster, path_and_query, &http::HeaderMap::new())
            .await
    }

    /// [`Self::get`] with `headers` added (a WebSocket upgrade's); the connection stays
    /// open for an upgrade the agent answers (`hyper::upgrade::on` the response).
    pub async fn get_with(
        &self,
        url: &str,
        cluster: &ClusterName,
        path_and_query: &str,
        headers: &http::HeaderMap,
    ) -> Result<Response<Incoming>, AgentError> {
        self.send(
            url,
            cluster,
            http::Method::GET,
            path_and_query,
            headers,
            Bytes::new(),
        )
        .await
    }

    /// A byte stream to a ready endpoint of Service `service` (port `port`) in downstream
    /// namespace `namespace` of `cluster`, which its syncer dials (an admission webhook's
    /// Service: the caller runs TLS to the webhook over it).
    pub async fn dial_service(
        &self,
        url: &str,
        cluster: &ClusterName,
        namespace: &str,
        service: &str,
        port: u16,
    ) -> Result<hyper::upgrade::Upgraded, AgentError> {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            header::CONNECTION,
            http::HeaderValue::from_static("Upgrade"),
        );
        headers.insert(
            header::UPGRADE,
            http::HeaderValue::from_static(SERVICE_STREAM_PROTOCOL),
        );
        let path = format!("/services/{namespace}/{service}/{port}");
        let resp = self.get_with(url, cluster, &path, &headers).await?;
        if resp.status() != http::StatusCode::SWITCHING_PROTOCOLS {
            use http_body_util::BodyExt;
            let status = resp.status();
            let body = http_body_util::Limited::new(resp.into_body(), 4096)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let text = String::from_utf8_lossy(&body).trim().to_string();
            return Err(AgentError::Refused(format!("{status}: {text}")));
        }
        Ok(hyper::upgrade::on(resp).await?)
    }

    /// `method path_and_query` of `cluster`'s syncer with `headers` and `body` (a write the
    /// syncer makes on the cluster: an ephemeral container added).
    pub async fn send(
        &self,
        url: &str,
        cluster: &ClusterName,
        method: http::Method,
        path_and_query: &str,
        headers: &http::HeaderMap,
        body: Bytes,
    ) -> Result<Response<Incoming>, AgentError> {
        let addr = url
            .strip_prefix("https://")
            .map(|a| a.trim_end_matches('/'))
            .filter(|a| !a.is_empty() && !a.contains('/'))
            .ok_or_else(|| AgentError::NotHttps(url.to_string()))?
            .to_string();
        let name = syncer_server_name(cluster);
        let server_name = ServerName::try_from(name.clone())
            .map_err(|_| AgentError::Name(cluster.to_string()))?;
        let connect = async {
            let tcp = tokio::net::TcpStream::connect(&addr)
                .await
                .map_err(|source| AgentError::Connect {
                    addr: addr.clone(),
                    source,
                })?;
            self.tls
                .connect(server_name, tcp)
                .await
                .map_err(|source| AgentError::Identity {
                    addr: addr.clone(),
                    name: name.clone(),
                    source,
                })
        };
        let tls = tokio::time::timeout(CONNECT_WITHIN, connect)
            .await
            .map_err(|_| AgentError::Timeout {
                addr: addr.clone(),
                within: CONNECT_WITHIN,
            })??;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "agent connection ended");
            }
        });
        let mut request = Request::builder()
            .method(method)
            .uri(path_and_query)
            .header(header::HOST, name)
            .header(header::USER_AGENT, CONTROL_PLANE_USER);
        for (k, v) in headers {
            request = request.header(k, v);
        }
        let request = request.body(Full::new(body))?;
        Ok(send.send_request(request).await?)
    }
}
