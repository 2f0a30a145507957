//! `sluice console`: a local web page that shows the clusterset live — clusters, logical
//! clusters and their namespaces, moves and drains as timelines, each Service's traffic
//! share by cluster — and moves, cordons, drains and uncordons with the kubeconfig's
//! identity, nothing more.
//!
//! Layers, downward only: `server` (HTTP) → `source` (watches, scrapes) and `actions`
//! (writes) → `snapshot` → `timeline`, `traffic`, `view` (pure) — `metrics` beside.

pub mod actions;
pub mod metrics;
pub mod server;
pub mod snapshot;
pub mod source;
pub mod timeline;
pub mod traffic;
pub mod view;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;

/// How to start a console.
#[derive(Clone, Debug)]
pub struct Config {
    /// Whose identity, and which server.
    pub kubeconfig: PathBuf,
    /// Where to listen (loopback by default).
    pub listen: SocketAddr,
    /// The access token; a random one when unset.
    pub token: Option<String>,
}

/// Why a console could not start.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    #[error(transparent)]
    Client(#[from] sluice_kube::ClientError),
    #[error("listening on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
}

/// A console bound to its address, not yet serving.
pub struct Bound {
    /// The URL to open, with its token.
    pub url: String,
    pub addr: SocketAddr,
    listener: tokio::net::TcpListener,
    source: source::Source,
    token: String,
}

/// A random access token: 128 bits, hex.
fn new_token() -> String {
    rand::random::<[u8; 16]>()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Read the kubeconfig, find what its identity may see, and bind.
pub async fn build(config: Config) -> Result<Bound, ConsoleError> {
    let kube = sluice_kube::client::config_from_kubeconfig(&config.kubeconfig, None).await?;
    let own = source::logical_cluster_of(&kube.cluster_url.to_string());
    let roots = Arc::new(sluice_kube::Roots::new(kube, "/clusters/"));
    let scope = source::scope(&roots, &own).await;
    let user = source::user(&roots, &own).await;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| ConsoleError::Listen(config.listen, e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ConsoleError::Listen(config.listen, e))?;
    let token = config.token.unwrap_or_else(new_token);
    tracing::info!(%addr, user = %user, scope = scope.label(), "console");
    Ok(Bound {
        url: format!("http://{addr}/?token={token}"),
        addr,
        listener,
        source: source::Source {
            roots,
            scope,
            user,
            metrics: Arc::new(metrics::Metrics::default()),
        },
        token,
    })
}

impl Bound {
    /// Serve until `stop` changes.
    pub async fn serve(self, stop: watch::Receiver<bool>) -> Result<(), ConsoleError> {
        let (out, pictures) = watch::channel(Arc::new(String::from("{}")));
        let shared = Arc::new(server::Shared {
            token: self.token,
            roots: self.source.roots.clone(),
            pictures,
            metrics: self.source.metrics.clone(),
            stop: stop.clone(),
        });
        let run = self.source.run(out, stop.clone());
        let source = tokio::spawn(async move {
            let r = run.await;
            if let Err(e) = &r {
                tracing::error!(error = %e, "console: cannot follow the control plane");
            }
            r
        });
        server::serve(self.listener, shared).await;
        match source.await {
            Ok(r) => r.map_err(ConsoleError::from),
            Err(_) => Ok(()),
        }
    }
}
