//! The running proxy: its listeners, and configuration changes applied without dropping
//! a connection (same listener: endpoints updated in place; new: bound; gone: stops
//! accepting while its connections finish).

use std::net::SocketAddr;
use std::sync::Mutex;

use prometheus_client::registry::Registry;

use crate::config::{ConfigError, ProxyConfig};
use crate::listener::{self, Running};
use crate::metrics::ProxyMetrics;
use crate::service::Service;

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    #[error("service {0}: binding {1}: {2}")]
    Bind(String, SocketAddr, std::io::Error),
}

pub struct Proxy {
    pub metrics: ProxyMetrics,
    registry: Registry,
    running: Mutex<Vec<Running>>,
}

impl Default for Proxy {
    fn default() -> Self {
        let metrics = ProxyMetrics::default();
        let mut registry = Registry::with_prefix("sluice_proxy");
        metrics.register(&mut registry);
        Self {
            metrics,
            registry,
            running: Mutex::new(Vec::new()),
        }
    }
}

impl Proxy {
    /// Make `config` the running configuration. On error nothing changes.
    pub fn apply(&self, config: &ProxyConfig) -> Result<(), ApplyError> {
        config.validate()?;
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        // Bind new listeners first: a bind error leaves the running set untouched.
        let mut fresh = Vec::new();
        for sc in &config.services {
            if !running.iter().any(|r| r.serves(sc.listen)) {
                let svc = Service::new(sc, self.metrics.clone());
                let r = listener::start(sc, svc)
                    .map_err(|e| ApplyError::Bind(sc.name.clone(), sc.listen, e))?;
                fresh.push(r);
            }
        }
        let mut next = Vec::with_capacity(config.services.len());
        for sc in &config.services {
            if let Some(i) = fresh.iter().position(|r| r.config.listen == sc.listen) {
                next.push(fresh.swap_remove(i));
                continue;
            }
            let Some(i) = running.iter().position(|r| r.serves(sc.listen)) else {
                continue;
            };
            let mut r = running.swap_remove(i);
            let current = r.service();
            if current.name == sc.name && current.protocol == sc.protocol {
                current.update(sc);
            } else {
                // A new identity or protocol: new connections get a new service.
                let mut w = r.svc.write().unwrap_or_else(|p| p.into_inner());
                *w = std::sync::Arc::new(Service::new(sc, self.metrics.clone()));
            }
            r.config = sc.clone();
            next.push(r);
        }
        for gone in running.drain(..) {
            tracing::info!(service = %gone.config.name, addr = %gone.addr, "listener removed");
            gone.stop();
            gone.service().balancer.update(&[]);
        }
        *running = next;
        self.metrics.reloads.inc();
        Ok(())
    }

    /// Where each service listens (port 0 in the configuration resolved).
    pub fn addresses(&self) -> Vec<(String, SocketAddr)> {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running
            .iter()
            .map(|r| (r.config.name.clone(), r.addr))
            .collect()
    }

    pub fn addr_of(&self, service: &str) -> Option<SocketAddr> {
        self.addresses()
            .into_iter()
            .find(|(n, _)| n == service)
            .map(|(_, a)| a)
    }

    /// In-flight requests and open connections per service and source cluster.
    pub fn active(&self) -> Vec<(String, String, u64)> {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        for r in running.iter() {
            let svc = r.service();
            for (cluster, n) in svc.balancer.active_by_cluster() {
                out.push((svc.name.clone(), cluster, n));
            }
        }
        out
    }

    /// The running configuration and live state, as `/config_dump` shows it.
    pub fn dump(&self) -> serde_json::Value {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let services: Vec<serde_json::Value> = running
            .iter()
            .map(|r| {
                let svc = r.service();
                let endpoints: Vec<serde_json::Value> = svc
                    .balancer
                    .endpoints()
                    .iter()
                    .map(|e| {
                        serde_json::json!({
                            "address": e.address, "cluster": e.cluster, "weight": e.weight(),
                            "draining": e.draining(), "active": e.active(),
                        })
                    })
                    .collect();
                serde_json::json!({
                    "name": r.config.name, "listen": r.addr, "protocol": r.config.protocol,
                    "timeouts": r.config.timeouts, "endpoints": endpoints,
                })
            })
            .collect();
        serde_json::json!({ "services": services })
    }
}

impl sluice_observe::AdminSource for Proxy {
    fn registry(&self) -> &Registry {
        &self.registry
    }

    fn ready(&self) -> bool {
        true
    }

    fn page(&self, path: &str) -> Option<(&'static str, String)> {
        (path == "/config_dump").then(|| {
            let body = serde_json::to_string_pretty(&self.dump()).unwrap_or_default();
            ("application/json", body)
        })
    }
}
