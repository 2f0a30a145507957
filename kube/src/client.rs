//! Kubernetes clients: from a kubeconfig file (its current context), or in-cluster (the
//! pod's service account) when no file is given.

use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("reading kubeconfig {0}: {1}")]
    Read(PathBuf, #[source] kube::config::KubeconfigError),
    #[error("kubeconfig {0}: {1}")]
    Config(PathBuf, #[source] kube::config::KubeconfigError),
    #[error("in-cluster configuration: {0}")]
    InCluster(#[source] kube::config::InClusterError),
    #[error("invalid server URL {0:?}: {1}")]
    Url(String, String),
    #[error("building the client: {0}")]
    Build(#[source] kube::Error),
}

/// The configuration of a kubeconfig file's current context; `server` overrides its
/// server URL (another logical cluster of the same API server, `/clusters/<path>`).
pub async fn config_from_kubeconfig(
    path: &Path,
    server: Option<&str>,
) -> Result<kube::Config, ClientError> {
    let kc = Kubeconfig::read_from(path).map_err(|e| ClientError::Read(path.into(), e))?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| ClientError::Config(path.into(), e))?;
    if let Some(s) = server {
        config.cluster_url = s
            .parse()
            .map_err(|e: http::uri::InvalidUri| ClientError::Url(s.into(), e.to_string()))?;
    }
    Ok(config)
}

/// A client for a kubeconfig file's current context.
pub async fn from_kubeconfig(path: &Path) -> Result<kube::Client, ClientError> {
    build(config_from_kubeconfig(path, None).await?)
}

/// A client for `config`, with `TCP_NODELAY`: kube's default connector leaves Nagle on,
/// and a request written in two segments then waits for the server's delayed ACK (40 ms on
/// Linux) — most of a change's propagation time when every hop is a write.
pub fn build(config: kube::Config) -> Result<kube::Client, ClientError> {
    Ok(at_base(
        transport(&config)?,
        config.cluster_url.clone(),
        config.default_namespace.clone(),
    ))
}

/// What carries a client's requests: the connection pool, TLS, authentication and extra
/// headers, without the server URL. Clones share the pool, so many clients for one server
/// (one per logical cluster, [`crate::roots::Roots`]) cost one pool and one TLS setup.
pub(crate) type Transport = tower::util::BoxCloneSyncService<
    http::Request<kube::client::Body>,
    http::Response<hyper::body::Incoming>,
    tower::BoxError,
>;

/// The transport of `config` (its URL is not used).
pub(crate) fn transport(config: &kube::Config) -> Result<Transport, ClientError> {
    use kube::client::ConfigExt;
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = config
        .rustls_https_connector_with_connector(http)
        .map_err(ClientError::Build)?;
    let client: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(https);
    let service = tower::ServiceBuilder::new()
        .option_layer(config.auth_layer().map_err(ClientError::Build)?)
        .layer(config.extra_headers_layer().map_err(ClientError::Build)?)
        .map_err(tower::BoxError::from)
        .service(client);
    Ok(Transport::new(service))
}

/// A client sending `transport`'s requests to the server at `url`.
pub(crate) fn at_base(
    transport: Transport,
    url: http::Uri,
    default_namespace: String,
) -> kube::Client {
    let service = tower::ServiceBuilder::new()
        .layer(kube::client::middleware::BaseUriLayer::new(url))
        .service(transport);
    kube::Client::new(service, default_namespace)
}

/// A client from `kubeconfig`, or in-cluster configuration when it is `None`.
pub async fn from_kubeconfig_or_in_cluster(
    kubeconfig: Option<&Path>,
) -> Result<kube::Client, ClientError> {
    match kubeconfig {
        Some(path) => from_kubeconfig(path).await,
        None => build(kube::Config::incluster().map_err(ClientError::InCluster)?),
    }
}
