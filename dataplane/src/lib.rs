//! `sluice proxy`: the per-cluster dataplane.
//!
//! [`config`] is the model; [`proxy`] runs it ([`listener`] accepts, [`tcp`] forwards
//! bytes per connection, [`http`] balances requests) and applies changes live;
//! [`balance`] holds endpoints and picks among them (weighted P2C over peak-EWMA, outlier
//! ejection, draining); [`budget`] bounds retries; [`dial`] reaches an endpoint directly or through [`tunnel`]s to
//! its cluster's gateway; [`ingress`] routes external clients by Host.

pub mod balance;
pub mod budget;
pub mod busy_poll;
pub mod cluster;
pub mod config;
pub mod dial;
pub mod http;
pub mod ingress;
pub mod listener;
pub mod metrics;
pub mod proxy;
pub mod service;
pub mod tcp;
pub mod trace;
pub mod tunnel;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::watch;

pub use config::{
    AppProtocol, EndpointConfig, IngressConfig, IngressRoute, PeerConfig, ProxyConfig,
    ServiceConfig, TunnelConfig, TunnelTransport,
};
pub use proxy::Proxy;

/// A running proxy.
pub struct Bound {
    pub proxy: Arc<Proxy>,
    pub admin: SocketAddr,
    _admin_stop: watch::Sender<bool>,
}

/// Bind every listener and the admin endpoint.
pub async fn build(config: &ProxyConfig, admin: SocketAddr) -> anyhow::Result<Bound> {
    let proxy = Arc::new(Proxy::default());
    proxy.apply(config)?;
    let (admin_stop, rx) = watch::channel(false);
    let admin = sluice_observe::serve(admin, proxy.clone(), rx).await?;
    Ok(Bound {
        proxy,
        admin,
        _admin_stop: admin_stop,
    })
}
