//! Helpers the dataplane's test files share.

#![allow(dead_code, unused_imports, clippy::unwrap_used)]

use std::net::SocketAddr;

use sluice_dataplane::config::Timeouts;
use sluice_dataplane::{AppProtocol, EndpointConfig, ProxyConfig, ServiceConfig};

/// A proxy with one HTTP service, `web`, in front of `upstream`; its listen address.
pub async fn http_proxy(
    upstream: SocketAddr,
    timeouts: Timeouts,
) -> (sluice_dataplane::Bound, SocketAddr) {
    proxy_of(AppProtocol::Http, vec![upstream], timeouts, 0.2).await
}

/// A proxy with one service, `web`, speaking `protocol` in front of `endpoints`, retrying
/// up to `retry_ratio` of its requests; its listen address.
pub async fn proxy_of(
    protocol: AppProtocol,
    endpoints: Vec<SocketAddr>,
    timeouts: Timeouts,
    retry_ratio: f64,
) -> (sluice_dataplane::Bound, SocketAddr) {
    let config = ProxyConfig {
        services: vec![ServiceConfig {
            name: "web".into(),
            listen: "127.0.0.1:0".parse().unwrap(),
            protocol,
            endpoints: endpoints.into_iter().map(EndpointConfig::new).collect(),
            timeouts,
            retry_ratio,
            exported: false,
            locality: Default::default(),
        }],
        ..Default::default()
    };
    let bound = sluice_dataplane::build(&config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = bound.proxy.addr_of("web").unwrap();
    (bound, addr)
}

pub use sluice_test_support::http::{get, raw, roundtrip};
