//! `sluice proxy`: the per-cluster dataplane.
//!
//! Layers, each importing only those below it (no two modules import each other):
//! - model and plumbing: [`config`], [`reason`] (failure reasons, mapped once to metrics
//!   labels and HTTP statuses), [`metrics`], [`trace`], [`busy_poll`], [`budget`];
//!   [`http2`] (HTTP/2 frames and HPACK, no state: the wire format of the h2 server);
//! - sockets: [`accept`] (every listener accepts here), [`tunnel`] (the east-west gateway
//!   and pooled tunnels to peers), [`dial`] (an endpoint, directly or through a tunnel);
//! - endpoint state: [`balance`] (weighted P2C over peak-EWMA, outlier ejection,
//!   draining; no protocol types), [`service`] (a balancer with its timeouts and retry
//!   budget);
//! - protocol servers, one `serve(service, stream)` each: [`tcp`], [`http`] (with its
//!   lean HTTP/1.1 path and the upstream pools it owns);
//! - listeners: [`listener`] (a service's socket, sniffed to L4 or L7), [`ingress`]
//!   (external clients by Host);
//! - the running proxy: [`proxy`] (applies configuration live), [`reload`] (file mode),
//!   [`cluster`] (cluster mode: configuration from Kubernetes).

pub mod accept;
pub mod balance;
pub mod budget;
pub mod busy_poll;
pub mod cluster;
pub mod config;
pub mod deadline;
pub mod dial;
pub mod http;
pub mod http2;
pub mod ingress;
pub mod listener;
pub mod metrics;
pub mod proxy;
pub mod reason;
pub mod reload;
pub mod service;
pub mod tcp;
pub mod trace;
pub mod tunnel;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::watch;

pub use config::{
    AppProtocol, EndpointConfig, IngressConfig, IngressRoute, Locality, PathType, PeerConfig,
    ProxyConfig, ServiceConfig, TunnelConfig, TunnelTransport,
};
pub use proxy::{ApplyError, Proxy};

/// A running proxy.
pub struct Bound {
    pub proxy: Arc<Proxy>,
    pub admin: SocketAddr,
    _admin_stop: watch::Sender<bool>,
}

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error("binding the admin endpoint on {0}: {1}")]
    Admin(SocketAddr, std::io::Error),
}

/// Bind every listener and the admin endpoint.
pub async fn build(config: &ProxyConfig, admin: SocketAddr) -> Result<Bound, BuildError> {
    let proxy = Arc::new(Proxy::default());
    proxy.apply(config)?;
    let (admin_stop, rx) = watch::channel(false);
    let admin = sluice_observe::serve(admin, proxy.clone(), rx)
        .await
        .map_err(|e| BuildError::Admin(admin, e))?;
    Ok(Bound {
        proxy,
        admin,
        _admin_stop: admin_stop,
    })
}
