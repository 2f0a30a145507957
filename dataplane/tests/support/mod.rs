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
    let config = ProxyConfig {
        services: vec![ServiceConfig {
            name: "web".into(),
            listen: "127.0.0.1:0".parse().unwrap(),
            protocol: AppProtocol::Http,
            endpoints: vec![EndpointConfig::new(upstream)],
            timeouts,
            retry_ratio: 0.2,
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
